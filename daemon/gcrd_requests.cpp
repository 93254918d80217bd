// gcrd_requests.h.
#include "gcrd_requests.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "gcr/store.h"

namespace gcr::gcrd {
namespace {

constexpr std::int64_t kMaxPid = 1 << 22;  // the kernel's PID_MAX_LIMIT

Error bad(const std::string& key, const std::string& why) {
  return Error{Errc::invalid_argument, "request field " + key + ": " + why};
}

// label.KEY=VALUE fields: KEY of [a-z0-9._] (META's keys: docs/image-format.md §4), at most 64
// bytes; VALUE printable, at most 4096; at most 32 of them.
Result<std::map<std::string, std::string>> decode_labels(const Fields& f) {
  std::map<std::string, std::string> out;
  for (auto it = f.lower_bound("label."); it != f.end() && it->first.starts_with("label."); ++it) {
    const std::string key = it->first.substr(6);
    if (key.empty() || key.size() > 64 ||
        key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._") != std::string::npos)
      return bad(it->first, "a label's name is 1 to 64 of a-z, 0-9, '.' and '_'");
    if (it->second.size() > 4096 || std::any_of(it->second.begin(), it->second.end(), [](char c) {
          return static_cast<unsigned char>(c) < 0x20;
        }))
      return bad(it->first, "a label's value is at most 4096 printable bytes");
    if (out.size() == 32) return bad(it->first, "more than 32 labels");
    out[key] = it->second;
  }
  return out;
}

}  // namespace

Result<std::string> RequestFields::text(const std::string& key, std::size_t max_bytes) const {
  auto it = f_.find(key);
  if (it == f_.end()) return std::string();
  const std::string& v = it->second;
  if (v.size() > max_bytes) return bad(key, "longer than " + std::to_string(max_bytes) + " bytes");
  if (v.find('\0') != std::string::npos || v.find('\n') != std::string::npos)
    return bad(key, "holds a NUL or a newline");
  return v;
}

Result<bool> RequestFields::flag(const std::string& key) const {
  auto it = f_.find(key);
  if (it == f_.end() || it->second == "0") return false;
  if (it->second == "1") return true;
  return bad(key, "'" + it->second.substr(0, 32) + "' is not 0 or 1");
}

Result<std::optional<std::int64_t>> RequestFields::integer(const std::string& key, std::int64_t lo,
                                                           std::int64_t hi) const {
  auto it = f_.find(key);
  if (it == f_.end() || it->second.empty()) return std::optional<std::int64_t>();
  const std::string& v = it->second;
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v[0] == '+')
    return bad(key, "'" + v.substr(0, 32) + "' is not a number");
  if (n < lo || n > hi)
    return bad(key, v + " is outside " + std::to_string(lo) + " .. " + std::to_string(hi));
  return std::optional<std::int64_t>(n);
}

Result<pid_t> RequestFields::pid(const std::string& key) const {
  // 0 parses: it names no process, which the operation says as it says of any pid that is gone.
  GCR_TRY_ASSIGN(std::optional<std::int64_t> n, integer(key, 0, kMaxPid));
  if (!n) return bad(key, "missing (a process id)");
  return static_cast<pid_t>(*n);
}

Result<std::vector<pid_t>> RequestFields::pids(const std::string& key) const {
  std::vector<pid_t> out;
  GCR_TRY_ASSIGN(std::string list, text(key, 64 * 1024));
  for (std::size_t at = 0; !list.empty() && at <= list.size();) {
    std::size_t comma = std::min(list.find(',', at), list.size());
    std::string one = list.substr(at, comma - at);
    at = comma + 1;
    Fields single{{key, one}};
    auto p = RequestFields(single).integer(key, 1, kMaxPid);
    if (!p || !*p) return bad(key, "'" + one.substr(0, 32) + "' is not a pid");
    if (std::find(out.begin(), out.end(), static_cast<pid_t>(**p)) != out.end())
      return Error{Errc::invalid_argument, "process " + one + " is named twice"};
    out.push_back(static_cast<pid_t>(**p));
  }
  return out;
}

Result<CheckpointFields> decode_checkpoint(const Fields& f) {
  RequestFields r(f);
  CheckpointFields c;
  GCR_TRY_ASSIGN(c.pid, r.pid("pid"));
  GCR_TRY_ASSIGN(std::string tag, r.text("tag", 256));
  if (!tag.empty()) c.tag = tag;
  GCR_TRY_ASSIGN(c.leave_running, r.flag("leave_running"));
  GCR_TRY_ASSIGN(c.stop_copy, r.flag("stop_copy"));
  GCR_TRY_ASSIGN(c.tcp_close, r.flag("tcp_close"));
  GCR_TRY_ASSIGN(c.device_only, r.flag("device_only"));
  GCR_TRY_ASSIGN(c.hold, r.flag("hold"));
  GCR_TRY_ASSIGN(auto ms, r.integer("timeout_ms", 100, 3'600'000));
  if (ms) c.timeout = std::chrono::milliseconds(*ms);
  GCR_TRY_ASSIGN(c.job_pids, r.pids("job_pids"));  // Note [A job of several trees] (job.h)
  if (std::find(c.job_pids.begin(), c.job_pids.end(), c.pid) != c.job_pids.end())
    return Error{Errc::invalid_argument, "process " + std::to_string(c.pid) + " is named twice"};
  if (c.device_only && (!c.leave_running || c.stop_copy || c.hold))
    return Error{Errc::invalid_argument, "device_only is for a --leave-running checkpoint"};
  if (c.hold && (c.leave_running || c.stop_copy))
    return Error{Errc::invalid_argument, "hold is for a checkpoint that stops the process"};
  for (std::size_t i = 0; r.has("remote." + std::to_string(i)); ++i) {
    const std::string n = std::to_string(i);
    CheckpointFields::Remote h;
    GCR_TRY_ASSIGN(h.address, r.text("remote." + n, 300));
    GCR_TRY_ASSIGN(h.pids, r.pids("remote_pids." + n));
    if (h.pids.empty()) return bad("remote_pids." + n, "names no process");
    c.remote.push_back(std::move(h));
  }
  GCR_TRY_ASSIGN(c.copy_parts, r.flag("copy_parts"));
  GCR_TRY_ASSIGN(c.move, r.flag("move"));
  GCR_TRY_ASSIGN(c.net_key_name, r.text("net_key_name", 64));
  GCR_TRY_ASSIGN(c.net_key, r.text("net_key", 4096));
  GCR_TRY_ASSIGN(auto idle, r.integer("idle_ms", 100, 3'600'000));
  if (idle) c.idle = std::chrono::milliseconds(*idle);
  GCR_TRY_ASSIGN(auto copies, r.integer("peer_copies", 0, 16));
  if (copies) c.peer_copies = static_cast<unsigned>(*copies);
  GCR_TRY_ASSIGN(auto every, r.integer("every_ms", 100, 7 * 24 * 3'600'000LL));
  if (every) c.every = std::chrono::milliseconds(*every);
  GCR_TRY_ASSIGN(auto keep, r.integer("every_keep", 1, 10'000));
  if (keep) c.every_keep = static_cast<unsigned>(*keep);
  GCR_TRY_ASSIGN(c.labels, decode_labels(f));
  if (!c.labels.empty() && (c.every.count() || c.move))
    return Error{Errc::invalid_argument, "labels are for one checkpoint, not a schedule or a move"};
  if ((c.peer_copies || c.every.count()) && (c.remote.empty() || c.move))
    return Error{Errc::invalid_argument,
                 "peer_copies and every_ms are for a job across hosts (remote.N); a process is "
                 "checkpointed every period by gcr run --checkpoint-every"};
  if (c.move && (c.remote.empty() || !c.job_pids.empty() || c.copy_parts || c.tag ||
                 c.leave_running == c.hold))
    return Error{Errc::invalid_argument,
                 "move is a checkpoint of one rank, a pre-copy round (leave_running) or the stop "
                 "(hold), with the rest of its job as remote.N"};
  if (!c.remote.empty() && (c.stop_copy || (c.hold && !c.move) || c.device_only || c.tcp_close))
    return Error{Errc::invalid_argument,
                 "a job across hosts is checkpointed by gcr itself, live or stopping: not with "
                 "stop_copy, hold, device_only or tcp_close"};
  if (!c.remote.empty() && c.net_key.empty())
    return Error{Errc::invalid_argument, "a job across hosts needs the key of its hosts (net_key)"};
  return c;
}

Result<EveryFields> decode_every(const Fields& f) {
  RequestFields r(f);
  EveryFields e;
  GCR_TRY_ASSIGN(e.pid, r.pid("pid"));
  GCR_TRY_ASSIGN(auto ms, r.integer("every_ms", 100, 7 * 24 * 3'600'000LL));
  if (!ms) return bad("every_ms", "is missing");
  e.every = std::chrono::milliseconds(*ms);
  GCR_TRY_ASSIGN(auto keep, r.integer("keep", 1, 10'000));
  if (keep) e.keep = static_cast<unsigned>(*keep);
  GCR_TRY_ASSIGN(e.name, r.text("name", 200));
  return e;
}

Result<TierFields> decode_tier(const Fields& f) {
  RequestFields r(f);
  TierFields t;
  GCR_TRY_ASSIGN(t.op, r.text("op", 16));
  if (t.op != "keep" && t.op != "remove") return bad("op", "is neither keep nor remove");
  GCR_TRY_ASSIGN(t.id, r.text("id", 64));
  if (!store::CheckpointId::from_hex(t.id)) return bad("id", "is not a checkpoint id");
  if (t.op == "remove") return t;
  GCR_TRY_ASSIGN(t.from, r.text("from", 300));
  GCR_TRY_ASSIGN(t.series, r.text("series", 200));
  GCR_TRY_ASSIGN(t.origin, r.text("origin", 300));
  if (t.from.empty()) return bad("from", "is missing");
  if (!store::valid_tag(t.series)) return bad("series", "is not a valid checkpoint name");
  if (t.origin.empty() || t.origin.find_first_of(" \t") != std::string::npos)
    return bad("origin", "is not HOST:PORT");
  auto number = [&](const char* key, std::uint64_t& out) -> Status {
    GCR_TRY_ASSIGN(auto v, r.integer(key, 0, std::numeric_limits<std::int64_t>::max()));
    if (v) out = static_cast<std::uint64_t>(*v);
    return ok();
  };
  GCR_TRY(number("seq", t.seq));
  GCR_TRY(number("protect", t.protect));
  GCR_TRY(number("oldest", t.oldest));
  return t;
}

Result<JobPartFields> decode_job_part(const Fields& f) {
  RequestFields r(f);
  JobPartFields p;
  GCR_TRY_ASSIGN(p.pids, r.pids("pids"));
  if (p.pids.empty()) return bad("pids", "names no process");
  GCR_TRY_ASSIGN(p.leave_running, r.flag("leave_running"));
  GCR_TRY_ASSIGN(auto ms, r.integer("timeout_ms", 100, 3'600'000));
  if (ms) p.timeout = std::chrono::milliseconds(*ms);
  GCR_TRY_ASSIGN(auto idle, r.integer("idle_ms", 100, 3'600'000));
  if (idle) p.idle = std::chrono::milliseconds(*idle);
  GCR_TRY_ASSIGN(p.job, r.text("job", 64));
  GCR_TRY_ASSIGN(p.bystander, r.flag("bystander"));
  GCR_TRY_ASSIGN(p.freeze, r.flag("freeze"));
  if (p.freeze && !p.bystander) return bad("freeze", "is for a bystander");
  return p;
}

Result<RestoreFields> decode_restore(const Fields& f, std::size_t files) {
  RequestFields r(f);
  RestoreFields out;
  GCR_TRY_ASSIGN(out.name, r.text("name", 256));
  GCR_TRY_ASSIGN(auto device, r.integer("device", 0, 63));
  if (device) out.device = static_cast<int>(*device);
  GCR_TRY_ASSIGN(out.device_map, r.text("device_map", 1024));
  GCR_TRY_ASSIGN(out.eager, r.flag("eager"));
  GCR_TRY_ASSIGN(out.arriving, r.flag("arriving"));
  GCR_TRY_ASSIGN(out.new_pid_namespace, r.flag("new_pid_namespace"));
  GCR_TRY_ASSIGN(out.job_part, r.flag("job_part"));
  GCR_TRY_ASSIGN(out.take_addresses, r.flag("take_addresses"));
  for (std::size_t i = 0; r.has("place." + std::to_string(i)); ++i) {
    GCR_TRY_ASSIGN(std::string p, r.text("place." + std::to_string(i), 600));
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == p.size())
      return bad("place." + std::to_string(i), "'" + p + "' is not OLD=NEW (HOST:PORT each)");
    out.place[p.substr(0, eq)] = p.substr(eq + 1);
  }
  GCR_TRY_ASSIGN(out.net_key_name, r.text("net_key_name", 64));
  GCR_TRY_ASSIGN(out.net_key, r.text("net_key", 4096));
  GCR_TRY_ASSIGN(auto idle, r.integer("idle_ms", 100, 3'600'000));
  if (idle) out.idle = std::chrono::milliseconds(*idle);
  GCR_TRY_ASSIGN(out.pull_from, r.text("pull_from", 300));
  GCR_TRY_ASSIGN(out.pull_memory, r.flag("pull_memory"));
  if (!out.pull_from.empty() && (!out.job_part || !store::CheckpointId::from_hex(out.name)))
    return bad("pull_from", "is for a job's part named by its full id");
  GCR_TRY_ASSIGN(out.clone, r.flag("clone"));
  GCR_TRY_ASSIGN(out.clone_netns, r.text("clone_netns", 4096));
  GCR_TRY_ASSIGN(out.clone_address, r.text("clone_address", 64));
  GCR_TRY_ASSIGN(out.clone_bridge, r.text("clone_bridge", 64));
  GCR_TRY_ASSIGN(out.clone_gateway, r.text("clone_gateway", 64));
  GCR_TRY_ASSIGN(out.clone_hostname, r.text("clone_hostname", 64));
  if (out.clone_hostname.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789.-") != std::string::npos ||
      out.clone_hostname.starts_with('-'))
    return bad("clone_hostname", "wants letters, digits, '.' and '-' (a host name)");
  if (!out.clone && !(out.clone_netns + out.clone_address + out.clone_bridge + out.clone_gateway +
                      out.clone_hostname)
                         .empty())
    return bad("clone_netns", "and the other clone_ fields are for a clone (clone=1)");
  if (out.clone && (out.job_part || !out.place.empty()))
    return bad("clone", "is for a restore of one process, not of a job's part");
  for (std::size_t i = 0; i < files; ++i) {
    const std::string key = "inherit." + std::to_string(i);
    GCR_TRY_ASSIGN(std::string k, r.text(key, 4096));
    if (k.empty())
      return Error{Errc::protocol,
                   "the client sent file " + std::to_string(i) + " without an " + key + " key"};
    out.inherit.push_back(std::move(k));
  }
  return out;
}

Result<CriuDumpFields> decode_criu_dump(const Fields& f) {
  RequestFields r(f);
  CriuDumpFields out;
  GCR_TRY_ASSIGN(out.pid, r.pid("pid"));
  // The plugin passes CRIU's own timeout on: a runtime's value, clamped rather than refused.
  GCR_TRY_ASSIGN(auto ms, r.integer("timeout_ms", 0, INT64_MAX));
  if (ms) out.timeout = std::chrono::milliseconds(std::clamp<std::int64_t>(*ms, 100, 3'600'000));
  return out;
}

Result<CriuRestoreFields> decode_criu_restore(const Fields& f) {
  RequestFields r(f);
  CriuRestoreFields out;
  GCR_TRY_ASSIGN(out.name, r.text("name", 256));
  GCR_TRY_ASSIGN(out.device_map, r.text("device_map", 1024));
  return out;
}

}  // namespace gcr::gcrd
