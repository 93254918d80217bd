// Note [TCP within a job] (job_tcp.h).
#include "job_tcp.h"

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

namespace gcr::gcrd {

namespace {

using Key = std::tuple<std::uint32_t, std::uint16_t, std::uint32_t, std::uint16_t>;
Key key_of(const TcpAddress& l, const TcpAddress& r) {
  return {l.ip, l.port, r.ip, r.port};
}

// "LOCAL -> REMOTE" (criu::OpenFile::detail of a TCP socket).
std::optional<TcpConnection> ends_of(const criu::OpenFile& f) {
  auto arrow = f.detail.find(" -> ");
  if (arrow == std::string::npos) return std::nullopt;
  auto l = parse_tcp_address(f.detail.substr(0, arrow));
  auto r = parse_tcp_address(f.detail.substr(arrow + 4));
  if (!l || !r) return std::nullopt;
  return TcpConnection{*l, *r};
}

}  // namespace

std::vector<TcpConnection> outward_tcp(
    const std::vector<const std::vector<criu::OpenFile>*>& files) {
  std::vector<TcpConnection> out;
  std::set<Key> seen;
  for (auto* list : files)
    for (const criu::OpenFile& f : *list)
      if (f.kind == criu::FileKind::tcp_socket && f.external)
        if (auto c = ends_of(f); c && seen.insert(key_of(c->local, c->remote)).second)
          out.push_back(*c);
  return out;
}

// Each connection is recorded once, as the first of its ends met sees it.
void carry_listed(std::vector<std::vector<criu::OpenFile>*> files,
                  const std::vector<TcpConnection>& listed, CarriedTcp& into) {
  std::set<Key> wanted;
  for (const TcpConnection& c : listed) wanted.insert(key_of(c.local, c.remote));
  std::set<Key> recorded;
  for (auto* list : files)
    for (criu::OpenFile& f : *list) {
      if (f.kind != criu::FileKind::tcp_socket || !f.external) continue;
      auto c = ends_of(f);
      if (!c || !wanted.contains(key_of(c->local, c->remote))) continue;
      f.external = false;
      into.ends.push_back({f.pid, f.fd});
      if (recorded.contains(key_of(c->remote, c->local))) continue;
      if (recorded.insert(key_of(c->local, c->remote)).second) into.connections.push_back(*c);
    }
}

// The connections of `files` whose far end `files` holds too.
CarriedTcp carry_tcp_within(std::vector<std::vector<criu::OpenFile>*> files) {
  const auto outward = outward_tcp({files.begin(), files.end()});
  std::set<Key> near;
  for (const TcpConnection& c : outward) near.insert(key_of(c.local, c.remote));
  std::vector<TcpConnection> both;
  for (const TcpConnection& c : outward)
    if (near.contains(key_of(c.remote, c.local))) both.push_back(c);
  CarriedTcp out;
  carry_listed(std::move(files), both, out);
  return out;
}

std::string encode_job_tcp(const std::vector<TcpConnection>& connections) {
  std::string out;
  for (const TcpConnection& c : connections) out += c.local.text() + " " + c.remote.text() + "\n";
  return out;
}

Result<std::vector<TcpConnection>> decode_job_tcp(const std::string& text) {
  std::vector<TcpConnection> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream f(line);
    std::string l, r, rest;
    f >> l >> r;
    auto local = parse_tcp_address(l), remote = parse_tcp_address(r);
    if (!local || !remote || (f >> rest))
      return Error{Errc::corrupt_image, "manifest META job_tcp: a line reads '" +
                                            line.substr(0, 60) + "', not 'IP:PORT IP:PORT' (IPv4)"};
    out.push_back({*local, *remote});
  }
  return out;
}

std::vector<std::string> tcp_criu_arguments() {
  return {"--tcp-established", "--network-lock", "skip"};
}

}  // namespace gcr::gcrd
