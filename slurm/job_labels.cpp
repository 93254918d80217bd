// job_labels.h.
#include "job_labels.h"

#include <sstream>

namespace gcr::slurm {
namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; std::getline(in, w, by);)
    if (!w.empty()) out.push_back(w);
  return out;
}

bool digits(const std::string& w) {
  return !w.empty() && w.size() <= 10 && w.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::string tasks_label(const std::map<unsigned, Task>& tasks) {
  std::string out;
  for (const auto& [rank, t] : tasks)
    out += (out.empty() ? "" : ",") + std::to_string(rank) + ":" + std::to_string(t.pid) + ":" +
           std::to_string(t.node);
  return out;
}

// Each node's gcrd, in node order; "" for a node with no task.
std::vector<std::string> node_gcrds(const std::map<unsigned, Task>& tasks) {
  std::vector<std::string> out;
  for (const auto& [rank, t] : tasks) {
    if (out.size() <= t.node) out.resize(t.node + 1);
    out[t.node] = t.gcrd;
  }
  return out;
}

std::string join(const std::vector<std::string>& words, char by) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : std::string(1, by)) + w;
  return out;
}

Result<Plan> plan_of(const store::Manifest& m, const std::string& name) {
  Plan p;
  p.name = name;
  const std::string step = m.meta_or("label.slurm.step");
  const Error bad{Errc::corrupt_image,
                  "checkpoint " + name + " has no or bad slurm.* labels (not gcr slurm's?)"};
  if (!digits(step) || std::stoull(step) > 0xffffffffULL) return bad;
  p.step = static_cast<std::uint32_t>(std::stoull(step));
  p.nodes = split(m.meta_or("label.slurm.nodes"), ',');
  for (const std::string& t : split(m.meta_or("label.slurm.tasks"), ',')) {
    auto f = split(t, ':');
    if (f.size() != 3 || !digits(f[0]) || !digits(f[1]) || !digits(f[2])) return bad;
    const unsigned long long rank = std::stoull(f[0]), pid = std::stoull(f[1]),
                             node = std::stoull(f[2]);
    if (rank >= (1u << 24) || pid == 0 || pid > (1u << 22) || node >= p.nodes.size() ||
        p.tasks.count(static_cast<unsigned>(rank)))
      return bad;
    p.tasks[static_cast<unsigned>(rank)] =
        Task{static_cast<pid_t>(pid), "", static_cast<unsigned>(node)};
  }
  if (p.tasks.empty() || p.nodes.empty()) return bad;
  return p;
}

}  // namespace gcr::slurm
