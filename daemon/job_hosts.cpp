// Note [A job across hosts] (job_link.h): the coordinator's and a part's links.
#include "job_hosts.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <tuple>

#include "gcr/chunk_id.h"
#include "gcrd_protocol.h"

namespace gcr::gcrd {

// --- the wire ------------------------------------------------------------------------------------

Status JobWire::send(const std::string& word, const WireFields& fields) {
  std::string line = word;
  if (!fields.empty()) line += " " + encode_fields(fields);
  if (!send_line(fd_, line))
    return Error{Errc::unreachable, who_ + " cannot be reached (its connection is closed)"};
  return ok();
}

Result<WireLine> JobWire::read() {
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.rfind("progress ", 0) == 0) continue;  // alive
      if (line.rfind("error ", 0) == 0) {
        std::string rest = line.substr(6);
        auto sp = rest.find(' ');
        int code = std::atoi(rest.substr(0, sp).c_str());
        return Error{
            static_cast<Errc>(code),
            who_ + ": " + decode_value(sp == std::string::npos ? "" : rest.substr(sp + 1))};
      }
      auto sp = line.find(' ');
      WireLine out{line.substr(0, sp), {}};
      if (sp != std::string::npos) out.fields = decode_fields(line.substr(sp + 1));
      return out;
    }
    if (buffer_.size() > 65536) return Error{Errc::protocol, who_ + " sent an endless line"};
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(idle_.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_error("waiting for " + who_);
    if (r == 0)
      return Error{Errc::timeout, who_ + " said nothing for " + std::to_string(idle_.count()) +
                                      " ms (its host, its gcrd or the link is gone)"};
    char buf[4096];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Error{Errc::unreachable, who_ + " closed the connection (its gcrd is gone?)"};
    buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

Result<WireFields> JobWire::expect(const std::string& word) {
  GCR_TRY_ASSIGN(WireLine l, read());
  if (l.word != word)
    return Error{Errc::protocol, who_ + " said '" + l.word + "' where '" + word + "' was due"};
  return l.fields;
}

// --- connections ---------------------------------------------------------------------------------

std::string encode_connections(const std::vector<TcpConnection>& c) {
  std::string out;
  for (const TcpConnection& x : c)
    out += (out.empty() ? "" : ";") + x.local.text() + " " + x.remote.text();
  return out;
}

Result<std::vector<TcpConnection>> decode_connections(const std::string& text) {
  std::vector<TcpConnection> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(';', start);
    std::string one =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    auto sp = one.find(' ');
    auto l = parse_tcp_address(one.substr(0, sp));
    auto r = sp == std::string::npos ? std::nullopt : parse_tcp_address(one.substr(sp + 1));
    if (!l || !r) return Error{Errc::protocol, "a connection reads '" + one + "'"};
    out.push_back({*l, *r});
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// --- a part --------------------------------------------------------------------------------------

Result<WireLine> PartLink::answer(const std::string& sent, const std::string& expected,
                                  const WireFields& fields) {
  GCR_TRY(wire_.send(sent, fields));
  GCR_TRY_ASSIGN(WireLine l, wire_.read());
  if (l.word == "abort")
    return Error{Errc::busy, "the job's checkpoint was aborted by its coordinator" +
                                 (l.fields.count("why") ? ": " + l.fields.at("why") : "")};
  if (l.word != expected)
    return Error{Errc::protocol,
                 wire_.who() + " said '" + l.word + "' where '" + expected + "' was due"};
  return l;
}

Result<std::vector<TcpConnection>> PartLink::carried(const std::vector<TcpConnection>& outward) {
  GCR_TRY_ASSIGN(WireLine l, answer("tcp", "carry", {{"c", encode_connections(outward)}}));
  return decode_connections(l.fields["c"]);
}

Result<std::uint64_t> PartLink::cut_target(std::uint64_t admitted) {
  GCR_TRY_ASSIGN(WireLine l, answer("cut", "target", {{"admitted", std::to_string(admitted)}}));
  return std::strtoull(l.fields["t"].c_str(), nullptr, 10);
}

Status PartLink::quiesced() {
  GCR_TRY(answer("quiesced", "dump"));
  return ok();
}
Status PartLink::dumped() {
  GCR_TRY(answer("dumped", "go"));
  return ok();
}
Status PartLink::restored() {
  GCR_TRY(answer("restored", "go"));
  return ok();
}

Status PartLink::meet(const std::string& word, const std::string& expected) {
  GCR_TRY(answer(word, expected));
  return ok();
}

Result<std::optional<std::string>> PartLink::prepared(const std::string& id) {
  GCR_TRY(wire_.send("prepared", {{"id", id}}));
  GCR_TRY_ASSIGN(WireLine l, wire_.read());
  if (l.word == "commit" && !l.fields["name"].empty())
    return std::optional<std::string>(l.fields["name"]);
  if (l.word == "abort") return std::optional<std::string>();
  return Error{Errc::protocol,
               wire_.who() + " said '" + l.word + "' where commit or abort was due"};
}

// --- the coordinator -----------------------------------------------------------------------------

Result<std::vector<WireFields>> CoordinatorLink::gather(const std::string& word) {
  std::vector<WireFields> out;
  for (RemotePart& p : parts_) {
    GCR_TRY_ASSIGN(WireFields f, p.wire->expect(word));
    out.push_back(std::move(f));
  }
  return out;
}

Status CoordinatorLink::answer_all(const std::string& word, const WireFields& fields) {
  for (RemotePart& p : parts_) GCR_TRY(p.wire->send(word, fields));
  return ok();
}

namespace {
using Ends = std::tuple<std::uint32_t, std::uint16_t, std::uint32_t, std::uint16_t>;
Ends ends(const TcpConnection& c, bool reversed) {
  return reversed ? Ends{c.remote.ip, c.remote.port, c.local.ip, c.local.port}
                  : Ends{c.local.ip, c.local.port, c.remote.ip, c.remote.port};
}
}  // namespace

Result<std::vector<TcpConnection>> CoordinatorLink::carried(
    const std::vector<TcpConnection>& outward) {
  GCR_TRY_ASSIGN(std::vector<WireFields> said, gather("tcp"));
  std::vector<std::vector<TcpConnection>> of(parts_.size() + 1);
  of[0] = outward;
  for (std::size_t i = 0; i < said.size(); ++i) {
    GCR_TRY_ASSIGN(of[i + 1], decode_connections(said[i]["c"]));
  }
  // A connection is carried when another part holds its far end, as that part's near end.
  std::vector<std::set<Ends>> near(of.size());
  for (std::size_t i = 0; i < of.size(); ++i)
    for (const TcpConnection& c : of[i]) near[i].insert(ends(c, false));
  auto carried_of = [&](std::size_t i) {
    std::vector<TcpConnection> out;
    for (const TcpConnection& c : of[i])
      for (std::size_t j = 0; j < of.size(); ++j)
        if (j != i && near[j].contains(ends(c, true))) {
          out.push_back(c);
          break;
        }
    return out;
  };
  for (std::size_t i = 0; i < parts_.size(); ++i)
    GCR_TRY(parts_[i].wire->send("carry", {{"c", encode_connections(carried_of(i + 1))}}));
  return carried_of(0);
}

Result<std::uint64_t> CoordinatorLink::cut_target(std::uint64_t admitted) {
  GCR_TRY_ASSIGN(std::vector<WireFields> said, gather("cut"));
  std::uint64_t t = admitted;
  for (WireFields& f : said)
    t = std::max<std::uint64_t>(t, std::strtoull(f["admitted"].c_str(), nullptr, 10));
  GCR_TRY(answer_all("target", {{"t", std::to_string(t)}}));
  return t;
}

Status CoordinatorLink::quiesced() {
  GCR_TRY(gather("quiesced"));
  return answer_all("dump");
}

Status CoordinatorLink::dumped() {
  GCR_TRY(gather("dumped"));
  return answer_all("go");
}

Status CoordinatorLink::restored() {
  GCR_TRY(gather("restored"));
  return answer_all("go");
}

Status CoordinatorLink::meet(const std::string& word, const std::string& answer) {
  GCR_TRY(gather(word));
  return answer_all(answer);
}

Status CoordinatorLink::prepared() {
  for (RemotePart& p : parts_) {
    GCR_TRY_ASSIGN(WireFields f, p.wire->expect("prepared"));
    p.id = f["id"];
    if (!store::CheckpointId::from_hex(p.id))
      return Error{Errc::protocol, p.wire->who() + " prepared a part without a checkpoint id"};
  }
  return ok();
}

Status CoordinatorLink::commit_all(const std::string& name) {
  std::string failed;
  for (RemotePart& p : parts_) {
    Status s = p.wire->send("commit", {{"name", name}});
    if (s) {
      auto r = p.wire->expect("ok");
      if (r)
        p.reply = std::move(r).value();
      else
        s = std::move(r).error();
    }
    if (!s) failed += (failed.empty() ? "" : "; ") + s.error().message;
  }
  if (failed.empty()) return ok();
  return Error{Errc::io_error,
               "the job's checkpoint is committed, but not every host heard: " + failed};
}

void CoordinatorLink::abort_all() {
  for (RemotePart& p : parts_)
    if (p.wire) (void)p.wire->send("abort");
  for (RemotePart& p : parts_)
    if (p.wire)
      for (;;) {  // to its final line (or silence): its undos have run
        auto l = p.wire->read();
        if (!l || l->word == "ok") break;
      }
}

}  // namespace gcr::gcrd
