// dump_root.h: the root of a dump at init, and whether its tree uses CUDA.
#include "dump_root.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "gcr/process_tree.h"

extern "C" {
// criu/pstree.c: the dump's root, allocated and given its pid before plugins are initialized.
__attribute__((weak)) extern void* root_item;
}

namespace gcr::criu_plugin {
namespace {

// The leading members of CRIU 4.2's struct pstree_item and struct pid (criu/include/pstree.h,
// pid.h), as far as the root's real pid.
struct ListHead {
  void* next;
  void* prev;
};
struct PstreeItemPrefix {
  void* parent;
  ListHead children;
  ListHead sibling;
  struct PidPrefix* pid;
};
struct PidPrefix {
  void* item;
  pid_t real;
};

std::optional<pid_t> positive(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  long v = std::strtol(s.c_str(), nullptr, 10);
  if (v <= 0 || v > 4194304) return std::nullopt;
  return static_cast<pid_t>(v);
}

}  // namespace

std::optional<pid_t> tree_from_cmdline(const std::string& cmdline) {
  std::vector<std::string> args;
  for (std::size_t at = 0; at < cmdline.size();) {
    auto nul = cmdline.find('\0', at);
    if (nul == std::string::npos) nul = cmdline.size();
    args.push_back(cmdline.substr(at, nul - at));
    at = nul + 1;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "-t" || a == "--tree") && i + 1 < args.size()) return positive(args[i + 1]);
    if (a.rfind("--tree=", 0) == 0) return positive(a.substr(7));
    if (a.size() > 2 && a.rfind("-t", 0) == 0 && a[2] != '-') return positive(a.substr(2));
  }
  return std::nullopt;
}

std::optional<pid_t> dump_root() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (auto t = tree_from_cmdline(cmdline)) return t;
  if (&root_item == nullptr || root_item == nullptr) return std::nullopt;
  const auto* item = static_cast<const PstreeItemPrefix*>(root_item);
  if (item->pid == nullptr || item->pid->item != root_item) return std::nullopt;  // not 4.2's
  pid_t pid = item->pid->real;
  if (pid <= 0 || access(("/proc/" + std::to_string(pid)).c_str(), F_OK) != 0) return std::nullopt;
  return pid;
}

bool tree_uses_cuda(pid_t root) {
  for (pid_t pid : criu::tree_pids(root))
    if (criu::maps_libcuda(pid).value_or(false)) return true;
  return false;
}

}  // namespace gcr::criu_plugin
