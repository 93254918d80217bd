#include "clone_network.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "gcr/chunk_id.h"
#include "system_tool.h"

namespace gcr::gcrd {

namespace {

bool is_ipv4(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1;
}

// A.B.C.D/N with N in 1..32.
bool is_cidr(const std::string& text) {
  auto slash = text.find('/');
  if (slash == std::string::npos || !is_ipv4(text.substr(0, slash))) return false;
  const std::string n = text.substr(slash + 1);
  if (n.empty() || n.size() > 2 || n.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const int bits = std::stoi(n);
  return bits >= 1 && bits <= 32;
}

// An interface name the kernel takes (IFNAMSIZ) and no option of ip's.
bool is_interface_name(const std::string& name) {
  return !name.empty() && name.size() < 16 && name[0] != '-' &&
         name.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
             std::string::npos;
}

// 02:67:A:B:C:D for address A.B.C.D (locally administered): a clone restored on the address of one
// that ended has its MAC too, so that neighbours' ARP entries for the address stay right.
std::string mac_of(const std::string& cidr) {
  in_addr a{};
  ::inet_pton(AF_INET, cidr.substr(0, cidr.find('/')).c_str(), &a);
  const auto* b = reinterpret_cast<const unsigned char*>(&a.s_addr);
  char mac[18];
  std::snprintf(mac, sizeof mac, "02:67:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3]);
  return mac;
}

constexpr std::string_view kClonePrefix = "gcr-clone-";

// `ip netns del NAME`: the name goes; the namespace, with whatever is in it, lives on while a
// process holds it.
Status delete_name(const std::string& ip, const std::string& name) {
  return run_system_tool({ip, "netns", "del", name});
}

}  // namespace

void remove_stale_clone_names() {
  std::error_code ec;
  auto ip = find_system_tool("ip");
  if (!ip) return;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(kClonePrefix)) continue;
    const long pid = std::strtol(name.c_str() + kClonePrefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (Status s = delete_name(*ip, name); !s)
      std::fprintf(stderr, "gcrd: %s\n", s.error().message.c_str());
    else
      std::fprintf(stderr, "gcrd: removed %s, left by a gcrd that is gone\n", name.c_str());
  }
}

Status check_clone_network(const CloneNetworkSpec& spec) {
  if (!spec.netns.empty()) {
    if (!spec.address.empty() || !spec.bridge.empty() || !spec.gateway.empty())
      return Error{Errc::invalid_argument,
                   "--netns names a namespace set up already: give it alone, or --address and "
                   "--bridge for one gcr makes"};
    std::error_code ec;
    if (!std::filesystem::exists(spec.netns, ec))
      return Error{Errc::not_found, "no network namespace " + spec.netns +
                                        " (make one with `ip netns add NAME`: /run/netns/NAME)"};
    return ok();
  }
  if (spec.address.empty() != spec.bridge.empty())
    return Error{Errc::invalid_argument,
                 "--address and --bridge go together: the clone's address, on a veth whose other "
                 "end joins the bridge"};
  if (!spec.address.empty() && !is_cidr(spec.address))
    return Error{Errc::invalid_argument,
                 "--address wants A.B.C.D/N (an IPv4 address and its prefix length), got '" +
                     spec.address + "'"};
  if (!spec.bridge.empty() && !is_interface_name(spec.bridge))
    return Error{Errc::invalid_argument,
                 "--bridge wants an interface name, got '" + spec.bridge + "'"};
  if (!spec.gateway.empty() && (spec.address.empty() || !is_ipv4(spec.gateway)))
    return Error{Errc::invalid_argument,
                 "--gateway wants an IPv4 address, and --address beside it"};
  std::error_code ec;
  if (!spec.bridge.empty() &&
      !std::filesystem::exists("/sys/class/net/" + spec.bridge + "/bridge", ec))
    return Error{Errc::not_found, "no bridge " + spec.bridge +
                                      " on this host: make it first (ip link add " + spec.bridge +
                                      " type bridge; ip addr add GATEWAY/N dev " + spec.bridge +
                                      "; ip link set " + spec.bridge + " up)"};
  return ok();
}

Result<CloneNetwork> CloneNetwork::make(const CloneNetworkSpec& spec) {
  GCR_TRY(check_clone_network(spec));
  CloneNetwork n;
  if (!spec.netns.empty()) {
    n.path_ = spec.netns;
    n.description_ = spec.netns;
    return n;
  }
  auto ip = find_system_tool("ip");
  if (!ip)
    return Error{Errc::unsupported,
                 "a clone's network namespace needs ip (Debian package iproute2)"};
  const std::string name = std::string(kClonePrefix) + std::to_string(::getpid()) + "-" +
                           store::Id128::random().hex().substr(0, 8);
  GCR_TRY(run_system_tool({*ip, "netns", "add", name}));
  n.made_ = name;  // from here the destructor removes it
  n.path_ = "/run/netns/" + n.made_;
  GCR_TRY(n.set_up(spec, *ip).context("setting up the clone's network namespace"));
  n.description_ =
      spec.address.empty() ? "loopback only" : spec.address + " on bridge " + spec.bridge;
  return n;
}

// Loopback up; with an address, eth0 (a veth into the bridge) with it, and the default route.
Status CloneNetwork::set_up(const CloneNetworkSpec& spec, const std::string& ip) {
  GCR_TRY(run_system_tool({ip, "-n", made_, "link", "set", "lo", "up"}));
  if (spec.address.empty()) return ok();
  const std::string outside = "gcr" + made_.substr(made_.size() - 8);  // gcrXXXXXXXX
  GCR_TRY(run_system_tool({ip, "link", "add", outside, "type", "veth", "peer", "name", "eth0",
                           "address", mac_of(spec.address), "netns", made_}));
  GCR_TRY(run_system_tool({ip, "link", "set", outside, "master", spec.bridge, "up"}));
  GCR_TRY(run_system_tool({ip, "-n", made_, "addr", "add", spec.address, "dev", "eth0"}));
  GCR_TRY(run_system_tool({ip, "-n", made_, "link", "set", "eth0", "up"}));
  if (!spec.gateway.empty())
    GCR_TRY(run_system_tool({ip, "-n", made_, "route", "add", "default", "via", spec.gateway}));
  return ok();
}

CloneNetwork::CloneNetwork(CloneNetwork&& o) noexcept
    : path_(std::move(o.path_)),
      description_(std::move(o.description_)),
      made_(std::exchange(o.made_, {})) {}

CloneNetwork::~CloneNetwork() {
  if (made_.empty()) return;
  auto ip = find_system_tool("ip");
  if (!ip) return;
  if (Status s = delete_name(*ip, made_); !s)
    std::fprintf(stderr, "gcrd: %s\n", s.error().message.c_str());
}

}  // namespace gcr::gcrd
