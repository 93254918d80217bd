// node_tools.h.
#include "node_tools.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "address_takeover.h"

namespace gcr::slurm {
namespace {

Result<std::uint32_t> parse_ip(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1)
    return Error{Errc::invalid_argument, "'" + text + "' is not an IPv4 address (A.B.C.D)"};
  return ntohl(a.s_addr);
}

ino_t net_namespace_of(const std::string& pid) {
  struct stat st {};
  return ::stat(("/proc/" + pid + "/ns/net").c_str(), &st) == 0 ? st.st_ino : 0;
}

bool environment_names(const std::string& pid, const std::string& job, const std::string& step) {
  std::ifstream in("/proc/" + pid + "/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool job_seen = false, step_seen = false;
  for (std::size_t at = 0; at < all.size();) {
    std::size_t end = all.find('\0', at);
    if (end == std::string::npos) end = all.size();
    std::string_view var(all.data() + at, end - at);
    job_seen |= var == "SLURM_JOB_ID=" + job;
    step_seen |= var == "SLURM_STEP_ID=" + step;
    at = end + 1;
  }
  return job_seen && step_seen;
}

}  // namespace

Status take_job_address(const std::string& ip) {
  GCR_TRY_ASSIGN(std::uint32_t a, parse_ip(ip));
  GCR_TRY_ASSIGN(auto taken, gcrd::take_addresses({a}));
  (void)taken;
  return ok();
}

Status release_job_address(const std::string& ip) {
  GCR_TRY_ASSIGN(std::uint32_t a, parse_ip(ip));
  GCR_TRY_ASSIGN(auto released, gcrd::release_addresses({a}));
  (void)released;
  return ok();
}

std::vector<pid_t> leftovers_of_step(std::uint32_t job, std::uint32_t step, uid_t uid) {
  const ino_t mine = net_namespace_of("self");
  const std::string self = std::to_string(getpid()), parent = std::to_string(getppid());
  const std::string job_text = std::to_string(job), step_text = std::to_string(step);
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos || name == self || name == parent)
      continue;  // not a process, or gcr and the slurmstepd that runs it
    struct stat owner {};
    if (::stat(("/proc/" + name).c_str(), &owner) != 0 || owner.st_uid != uid) continue;
    if (net_namespace_of(name) != mine || !environment_names(name, job_text, step_text)) continue;
    out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

}  // namespace gcr::slurm
