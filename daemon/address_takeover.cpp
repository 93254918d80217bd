// Note [Addresses that move with a rank] (address_takeover.h).
#include "address_takeover.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/if_ether.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "gcr/unique_fd.h"
#include "system_tool.h"

namespace gcr::gcrd {
namespace {

struct Interface {
  std::string name;
  std::uint32_t ip = 0, mask = 0;  // host order
};

std::vector<Interface> ipv4_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !a->ifa_netmask) continue;
    Interface i;
    i.name = a->ifa_name;
    i.ip = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    i.mask = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
    out.push_back(i);
  }
  ::freeifaddrs(list);
  return out;
}

// The interface of the default route (/proc/net/route: destination 00000000).
std::string default_route_device() {
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string dev, dest;
    if (f >> dev >> dest && dest == "00000000") return dev;
  }
  return {};
}

// `ip addr VERB ADDRESS/32 dev DEVICE` (VERB add or del).
Status run_ip(const char* verb, std::uint32_t ip, const std::string& device) {
  auto tool = find_system_tool("ip");
  if (!tool)
    return Error{Errc::unsupported, "moving an address needs ip (Debian package iproute2)"};
  return run_system_tool({*tool, "addr", verb, address_text(ip) + "/32", "dev", device});
}

// One gratuitous ARP request for `ip` from `device` (an Ethernet interface; others are skipped).
void announce(std::uint32_t ip, const std::string& device) {
  UniqueFd s(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ARP)));
  if (!s) return;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, device.c_str(), IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFHWADDR, &ifr) != 0 || ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER)
    return;
  const unsigned index = ::if_nametoindex(device.c_str());
  if (index == 0) return;
  ether_arp arp{};
  arp.arp_hrd = htons(ARPHRD_ETHER);
  arp.arp_pro = htons(ETH_P_IP);
  arp.arp_hln = ETH_ALEN;
  arp.arp_pln = 4;
  arp.arp_op = htons(ARPOP_REQUEST);
  std::memcpy(arp.arp_sha, ifr.ifr_hwaddr.sa_data, ETH_ALEN);
  const std::uint32_t net = htonl(ip);
  std::memcpy(arp.arp_spa, &net, 4);
  std::memcpy(arp.arp_tpa, &net, 4);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_ARP);
  to.sll_ifindex = static_cast<int>(index);
  to.sll_halen = ETH_ALEN;
  std::memset(to.sll_addr, 0xff, ETH_ALEN);
  (void)::sendto(s.get(), &arp, sizeof arp, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
}

// Gratuitous ARP for every address added: once now, twice more (100 ms apart) from a thread of
// its own, so that a restore waits for none of the repeats (they are for a lost first one).
void announce_all(const std::vector<TakenAddress>& taken) {
  std::vector<TakenAddress> added;
  for (const TakenAddress& t : taken)
    if (t.added) added.push_back(t);
  if (added.empty()) return;
  for (const TakenAddress& t : added) announce(t.ip, t.device);
  std::thread([added] {
    for (int round = 1; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (const TakenAddress& t : added) announce(t.ip, t.device);
    }
  }).detach();
}

}  // namespace

std::string address_text(std::uint32_t ip) {
  in_addr a{htonl(ip)};
  char b[INET_ADDRSTRLEN];
  return ::inet_ntop(AF_INET, &a, b, sizeof b) ? b : "?";
}

Result<std::vector<TakenAddress>> take_addresses(const std::vector<std::uint32_t>& ips) {
  std::vector<TakenAddress> out;
  std::set<std::uint32_t> seen;
  const auto interfaces = ipv4_interfaces();
  for (std::uint32_t ip : ips) {
    if (!seen.insert(ip).second) continue;
    TakenAddress t{ip, {}, false};
    for (const Interface& i : interfaces)
      if (i.ip == ip) t.device = i.name;
    if (t.device.empty()) {
      for (const Interface& i : interfaces)
        if (i.name != "lo" && (i.ip & i.mask) == (ip & i.mask)) t.device = i.name;
      if (t.device.empty()) t.device = default_route_device();
      if (t.device.empty())
        return Error{Errc::unsupported, "no interface of this host is on the subnet of " +
                                            address_text(ip) + ", which a restored rank must keep"};
      GCR_TRY(run_ip("add", ip, t.device));
      t.added = true;
    }
    out.push_back(t);
  }
  announce_all(out);
  return out;
}

Status check_own_addresses(const std::vector<std::uint32_t>& ips, const std::string& whose) {
  const auto interfaces = ipv4_interfaces();
  for (std::uint32_t ip : ips) {
    bool own = false;
    for (const Interface& i : interfaces)
      own |= i.ip == ip && i.mask == 0xffffffffu && i.name != "lo";
    if (!own)
      return Error{Errc::unsupported,
                   whose + " talks to the job from " + address_text(ip) +
                       ", which is not an address of its own on this host: a rank that moves "
                       "takes its address along, so give it one (ip addr add ADDRESS/32 dev "
                       "DEV) and have it use it (mp_train --listen ADDRESS; NCCL_SOCKET_IFNAME "
                       "or GLOO_SOCKET_IFNAME naming it)"};
  }
  return ok();
}

Result<std::vector<TakenAddress>> release_addresses(const std::vector<std::uint32_t>& ips) {
  std::vector<TakenAddress> out;
  std::set<std::uint32_t> seen;
  const auto interfaces = ipv4_interfaces();
  for (std::uint32_t ip : ips) {
    if (!seen.insert(ip).second) continue;
    for (const Interface& i : interfaces)
      if (i.ip == ip) {
        if (Status s = run_ip("del", ip, i.name); !s) {
          put_back_addresses(out);
          return std::move(s).error();
        }
        out.push_back({ip, i.name, true});
        break;
      }
  }
  return out;
}

void put_back_addresses(const std::vector<TakenAddress>& released) {
  for (const TakenAddress& t : released)
    if (Status s = run_ip("add", t.ip, t.device); !s)
      std::fprintf(stderr, "gcrd: putting address %s back: %s\n", address_text(t.ip).c_str(),
                   s.error().message.c_str());
  announce_all(released);
}

}  // namespace gcr::gcrd
