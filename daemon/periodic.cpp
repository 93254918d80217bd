// Note [Checkpoints every period] (periodic.h).
#include "periodic.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>

#include "checkpoint.h"
#include "gcr/private_dir.h"
#include "gcr/process_tree.h"
#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"
#include "net_store.h"

namespace gcr::gcrd {

using Clock = std::chrono::steady_clock;

struct Periodic::Schedule {
  EveryStatus status;
  std::shared_ptr<store::Store> store;
  criu::Tools tools;
  WorkRegistry* work = nullptr;
  std::optional<std::uint64_t> started;  // the process's start time: its pid may be reused
  std::deque<store::CheckpointId> kept;  // oldest first
  std::uint64_t peer_complete = 0;       // a job's newest checkpoint whose every peer copy was made
  bool stop = false, done = false;
  bool gone = false;  // ended with its process (its file goes too)
  std::optional<store::CheckpointId> peer_complete_id;  // never removed while it is the newest
  std::condition_variable wake;
  std::thread thread;
};

Periodic::Periodic() = default;

Periodic::~Periodic() {
  std::vector<std::unique_ptr<Schedule>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, s] : schedules_) all.push_back(std::move(s));
    schedules_.clear();
    for (auto& s : retired_) all.push_back(std::move(s));
    retired_.clear();
    for (auto& s : all) s->stop = true;
  }
  for (auto& s : all) {
    s->wake.notify_all();
    if (s->thread.joinable()) s->thread.join();
  }
}

void Periodic::reap() {
  std::vector<std::unique_ptr<Schedule>> finished;
  {
    std::lock_guard lock(mu_);
    for (auto it = schedules_.begin(); it != schedules_.end();)
      if (it->second->done) {
        finished.push_back(std::move(it->second));
        it = schedules_.erase(it);
      } else {
        ++it;
      }
    for (auto it = retired_.begin(); it != retired_.end();)
      if ((*it)->done) {
        finished.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
  }
  for (auto& s : finished)
    if (s->thread.joinable()) s->thread.join();
}

Status Periodic::start(EveryRequest req, std::shared_ptr<store::Store> store, criu::Tools tools,
                       WorkRegistry* work) {
  reap();
  if (req.name.empty()) req.name = "every-" + std::to_string(req.pid);
  auto started = criu::process_start_time(req.pid);
  if (!started) return Error{Errc::not_found, "no process " + std::to_string(req.pid)};
  auto s = std::make_unique<Schedule>();
  s->status.request = req;
  s->store = std::move(store);
  s->tools = std::move(tools);
  s->work = work;
  s->started = started;
  // A schedule of that name before this one (the process restored from one of its checkpoints):
  // its checkpoints count on, and are kept or removed as this one's.
  if (auto listed = s->store->list()) {
    std::map<std::uint64_t, store::CheckpointId> earlier;
    const std::string prefix = req.name + ".";
    for (const store::CheckpointInfo& c : *listed)
      for (const std::string& t : c.tags)
        if (t.size() > prefix.size() && t.starts_with(prefix) &&
            t.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
          earlier[std::strtoull(t.c_str() + prefix.size(), nullptr, 10)] = c.id;
    for (const auto& [n, id] : earlier) s->kept.push_back(id);
    if (!earlier.empty()) s->status.count = earlier.rbegin()->first;
  }
  s->status.count = std::max(s->status.count, req.after);
  // Under the lock: the destructor and reap() join threads they find in the map. A schedule this
  // one replaces (of a process this pid was before a restore) is told to stop and joined later:
  // a checkpoint of it still waiting on a lost host must not hold up this start.
  std::lock_guard lock(mu_);
  if (auto it = schedules_.find(req.pid); it != schedules_.end()) {
    it->second->stop = true;
    it->second->wake.notify_all();
    retired_.push_back(std::move(it->second));
    schedules_.erase(it);
  }
  Schedule& ref = *s;
  schedules_[req.pid] = std::move(s);
  save(ref);
  ref.thread = std::thread([this, &ref] { run(ref); });
  return ok();
}

void Periodic::save(const Schedule& s) {
  if (dir_.empty()) return;
  const EveryRequest& r = s.status.request;
  std::map<std::string, std::string> f{{"pid", std::to_string(r.pid)},
                                       {"start", std::to_string(s.started.value_or(0))},
                                       {"every_ms", std::to_string(r.every.count())},
                                       {"keep", std::to_string(r.keep)},
                                       {"name", r.name},
                                       {"store", s.store->options().root.string()}};
  if (!r.hosts.empty()) {
    f["job_pids"] = pid_list(r.job_pids);
    for (std::size_t i = 0; i < r.hosts.size(); ++i) {
      f["remote." + std::to_string(i)] = r.hosts[i].address;
      f["remote_pids." + std::to_string(i)] = pid_list(r.hosts[i].pids);
    }
    f["net_key_name"] = r.job.key.name;
    f["net_key"] = r.job.key.secret;
    f["idle_ms"] = std::to_string(r.job.idle.count());
    f["peer_copies"] = std::to_string(r.job.peer.copies);
    f["self"] = r.job.peer.self_address;
    f["served"] = r.job.served_store.string();
  }
  const std::string text = encode_fields(f) + "\n";
  const auto path = dir_ / std::to_string(r.pid);
  const auto tmp = dir_ / (std::to_string(r.pid) + ".new");
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::rename(tmp.c_str(), path.c_str()) != 0)
    std::fprintf(stderr, "gcrd: the schedule of process %d is not kept across a restart: %s\n",
                 r.pid, std::strerror(errno));
}

void Periodic::persist_in(const std::filesystem::path& dir, const std::filesystem::path& self_dir,
                          WorkRegistry* work, const std::function<void(const std::string&)>& log) {
  auto opened = io::open_private_dir(dir, true);
  if (!opened) {
    log("schedules are not kept across a restart: " + opened.error().message);
    return;
  }
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() != ".new") files.push_back(e.path());
  {
    std::lock_guard lock(mu_);
    dir_ = dir;
  }
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    auto f = decode_fields(line);
    auto number = [&](const char* k) { return std::strtoull(f[k].c_str(), nullptr, 10); };
    EveryRequest r;
    r.pid = static_cast<pid_t>(number("pid"));
    r.every = std::chrono::milliseconds(number("every_ms"));
    r.keep = static_cast<unsigned>(number("keep"));
    r.name = f["name"];
    const bool same = r.pid > 0 && criu::process_start_time(r.pid) == number("start");
    for (std::size_t i = 0; f.count("remote." + std::to_string(i)); ++i) {
      JobHost h{f["remote." + std::to_string(i)], {}};
      h.pids = parse_pid_list(f["remote_pids." + std::to_string(i)]).value_or(std::vector<pid_t>{});
      r.hosts.push_back(std::move(h));
    }
    r.job_pids = parse_pid_list(f["job_pids"]).value_or(std::vector<pid_t>{});
    r.job.key = NetKey{f["net_key_name"], f["net_key"], std::nullopt};
    r.job.idle = std::chrono::milliseconds(number("idle_ms") ? number("idle_ms") : 30'000);
    r.job.peer.copies = static_cast<unsigned>(number("peer_copies"));
    r.job.peer.self_address = f["self"];
    r.job.served_store = f["served"];
    store::StoreOptions so;
    so.root = f["store"];
    Status started = Error{Errc::not_found, "its process is gone"};
    if (same) {
      auto st = store::Store::open(so, false);
      auto tools = st ? criu::find_tools(self_dir) : Result<criu::Tools>(st.error());
      started = tools ? start(r, std::move(st).value(), std::move(tools).value(), work)
                      : Status(tools.error());
    }
    if (started) {
      log("checkpointing process " + std::to_string(r.pid) + " every " +
          std::to_string(r.every.count()) + " ms again (as " + r.name + ", kept across a restart)");
    } else {
      std::filesystem::remove(path, ec);
      if (same)
        log("the schedule of process " + std::to_string(r.pid) +
            " was not started again: " + started.error().message);
    }
  }
}

std::map<pid_t, EveryStatus> Periodic::snapshot() {
  reap();
  std::lock_guard lock(mu_);
  std::map<pid_t, EveryStatus> out;
  for (const auto& [pid, s] : schedules_) out[pid] = s->status;
  return out;
}

// One checkpoint of the schedule, the n-th: of the process, or of the job across hosts.
Result<CheckpointReport> Periodic::take(Schedule& s, std::uint64_t n) {
  const EveryRequest& req = s.status.request;
  CheckpointRequest c;
  c.pid = req.pid;
  c.leave_running = true;
  c.extra_meta = {{"every_ms", std::to_string(req.every.count())},
                  {"every_keep", std::to_string(req.keep)},
                  {"every_name", req.name},
                  {"every_seq", std::to_string(n)}};
  const Progress quiet = [](const std::string&) {};
  if (req.hosts.empty()) return checkpoint_process(*s.store, s.tools, c, quiet, s.work);
  c.job_pids = req.job_pids;
  c.tag = req.name + "." + std::to_string(n);
  JobOptions o = req.job;
  o.peer.series = req.name;
  o.peer.seq = n;
  o.peer.protect = s.peer_complete;
  o.peer.oldest = n >= req.keep ? n - req.keep + 1 : 1;
  return checkpoint_across_hosts(*s.store, s.tools, c, req.hosts, o, quiet, s.work);
}

// A job's checkpoint beyond --keep: its parts on the other hosts go with it.
void Periodic::remove_parts(Schedule& s, const store::CheckpointId& id) {
  auto m = s.store->read_manifest(id);
  if (!m) return;
  auto parts = decode_job_parts(m->meta_or("job_parts"));
  if (!parts) return;
  for (const JobPart& p : *parts)
    if (Status gone = remove_remote_part(p.address, p.id, s.status.request.job.key); !gone)
      std::fprintf(stderr, "gcrd: removing an old part on %s: %s\n", p.address.c_str(),
                   gone.error().message.c_str());
}

// The n-th checkpoint, taken at `t`, is committed: named, the oldest beyond K removed (but the
// one the tiers protect), and what gcr ps shows.
void Periodic::committed(Schedule& s, std::uint64_t n, Clock::time_point t, CheckpointReport& rep) {
  const EveryRequest& req = s.status.request;
  bool removed = false;
  std::string error;
  auto id = store::CheckpointId::from_hex(rep.id);
  if (id) {
    Status named = s.store->tag(*id, req.name + "." + std::to_string(n));
    if (named) named = s.store->tag(*id, req.name);
    if (!named) error = "naming checkpoint " + rep.id.substr(0, 12) + ": " + named.error().message;
    s.kept.push_back(*id);
    if (rep.peer_copies_wanted && rep.peer_copies == rep.peer_copies_wanted)
      s.peer_complete_id = *id;
    // Beyond K the oldest go, but never the newest checkpoint whose every peer copy was made
    // (the tiers protect it: Note [Checkpoints in peers' memory]).
    const std::size_t excess =
        s.kept.size() > std::max(req.keep, 1u) ? s.kept.size() - std::max(req.keep, 1u) : 0;
    std::deque<store::CheckpointId> still;
    for (std::size_t i = 0; i < s.kept.size(); ++i) {
      if (i >= excess || s.kept[i] == s.peer_complete_id) {
        still.push_back(s.kept[i]);
        continue;
      }
      if (!req.hosts.empty()) remove_parts(s, s.kept[i]);
      (void)s.store->remove(s.kept[i]);
      removed = true;
    }
    s.kept.swap(still);
  }
  if (removed) (void)s.store->gc();  // their chunks nothing else holds
  std::lock_guard lock(mu_);
  s.status.count = n;
  s.status.last_id = rep.id;
  s.status.last_at = t;  // the state is from after this: its age is at most now - t
  s.status.last_stall_ns =
      rep.times_ns["job_stall"] ? rep.times_ns["job_stall"] : rep.times_ns["stall"];
  s.status.last_error = error;
  s.status.last_tiers = "local";
  if (rep.peer_copies_wanted) {
    if (rep.peer_copies == rep.peer_copies_wanted) {
      s.peer_complete = n;
      s.status.last_tiers = "local+peers";
    } else {
      s.status.last_tiers = "local, peers " + std::to_string(rep.peer_copies) + "/" +
                            std::to_string(rep.peer_copies_wanted);
      if (s.status.last_error.empty() && !rep.warnings.empty())
        s.status.last_error = rep.warnings.back();
    }
  }
}

void Periodic::run(Schedule& s) {
  const EveryRequest req = s.status.request;
  auto due = Clock::now() + req.every;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      s.wake.wait_until(lock, due, [&] { return s.stop; });
      if (s.stop) break;
    }
    if (::kill(req.pid, 0) != 0 || criu::process_start_time(req.pid) != s.started) {
      s.gone = true;
      break;
    }
    const auto t = Clock::now();
    const std::uint64_t n = s.status.count + 1;
    auto rep = take(s, n);
    if (rep) {
      committed(s, n, t, *rep);
    } else if (::kill(req.pid, 0) != 0) {
      s.gone = true;
      break;  // it ended meanwhile: no failure of the schedule
    } else {
      std::fprintf(stderr, "gcrd: the periodic checkpoint of process %d failed: %s\n", req.pid,
                   rep.error().message.c_str());
      std::lock_guard lock(mu_);
      ++s.status.failed;
      s.status.last_error = rep.error().message;
    }
    // Never two at once: one that outlasted the period makes the next late, not doubled.
    due = t + req.every;
    if (Clock::now() > due) {
      due = Clock::now();
      std::lock_guard lock(mu_);
      ++s.status.delayed;
    }
  }
  if (s.gone && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove(dir_ / std::to_string(req.pid), ec);
  }
  std::lock_guard lock(mu_);
  s.done = true;
}

}  // namespace gcr::gcrd
