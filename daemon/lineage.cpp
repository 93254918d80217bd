// gcrd's lineage record (lineage.h).
#include "lineage.h"

#include "gcr/process_tree.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "gcr/private_dir.h"
#include "work_dir.h"

namespace gcr::gcrd {
namespace {

constexpr char kFile[] = "lineage";
constexpr std::size_t kMaxFileBytes = 1 << 20;

struct Entry {
  std::uint64_t start_time;
  std::string id;
};

std::mutex g_mu;
bool g_loaded = false;
std::map<pid_t, Entry> g_records;

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

bool plain_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Lines "BOOT_ID PID START_TIME CHECKPOINT_ID"; those of another boot are dropped.
void load_locked() {
  if (g_loaded) return;
  g_loaded = true;
  auto root = open_work_root();
  if (!root) return;
  auto fd = io::open_private_file(root->get(), kFile, O_RDONLY);
  if (!fd) return;
  std::string text(kMaxFileBytes, '\0');
  ssize_t n = ::read(fd->get(), text.data(), text.size());
  if (n <= 0) return;
  text.resize(static_cast<std::size_t>(n));
  const std::string boot = boot_id();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string b, id;
    long long pid = 0;
    std::uint64_t start = 0;
    if (!(f >> b >> pid >> start >> id) || b != boot || pid <= 0 || !plain_id(id)) continue;
    g_records[static_cast<pid_t>(pid)] = Entry{start, id};
  }
}

void save_locked() {
  auto root = open_work_root();
  if (!root) return;
  const std::string boot = boot_id();
  std::string text;
  for (auto it = g_records.begin(); it != g_records.end();) {
    if (!same_process({it->first, it->second.start_time})) {
      it = g_records.erase(it);
      continue;
    }
    text += boot + " " + std::to_string(it->first) + " " + std::to_string(it->second.start_time) +
            " " + it->second.id + "\n";
    ++it;
  }
  const std::string tmp = std::string(".") + kFile + ".tmp";
  ::unlinkat(root->get(), tmp.c_str(), 0);
  auto fd = io::open_private_file(root->get(), tmp, O_WRONLY | O_CREAT | O_EXCL);
  if (!fd) return;
  bool written = ::write(fd->get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (written)
    ::renameat(root->get(), tmp.c_str(), root->get(), kFile);
  else
    ::unlinkat(root->get(), tmp.c_str(), 0);
}

}  // namespace

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  return criu::process_start_time(pid);
}

std::optional<ProcessKey> process_key(pid_t pid) {
  auto start = process_start_time(pid);
  if (!start) return std::nullopt;
  return ProcessKey{pid, *start};
}

bool same_process(const ProcessKey& key) {
  auto start = process_start_time(key.pid);
  return start && *start == key.start_time;
}

std::optional<std::string> lineage_last(const ProcessKey& key) {
  std::lock_guard lock(g_mu);
  load_locked();
  auto it = g_records.find(key.pid);
  if (it == g_records.end() || it->second.start_time != key.start_time) return std::nullopt;
  return it->second.id;
}

void lineage_record(const ProcessKey& key, const std::string& checkpoint_id) {
  if (!plain_id(checkpoint_id)) return;
  std::lock_guard lock(g_mu);
  load_locked();
  g_records[key.pid] = Entry{key.start_time, checkpoint_id};
  save_locked();
}

}  // namespace gcr::gcrd
