// Note [Checkpoints every period] (periodic.h).
#include "periodic.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "checkpoint.h"
#include "gcr/process_tree.h"

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
  ref.thread = std::thread([this, &ref] { run(ref); });
  return ok();
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

void Periodic::run(Schedule& s) {
  const EveryRequest req = s.status.request;
  auto due = Clock::now() + req.every;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      s.wake.wait_until(lock, due, [&] { return s.stop; });
      if (s.stop) break;
    }
    if (::kill(req.pid, 0) != 0 || criu::process_start_time(req.pid) != s.started) break;
    const auto t = Clock::now();
    const std::uint64_t n = s.status.count + 1;
    auto rep = take(s, n);
    bool removed = false;
    std::string error;
    if (rep) {
      auto id = store::CheckpointId::from_hex(rep->id);
      if (id) {
        Status named = s.store->tag(*id, req.name + "." + std::to_string(n));
        if (named) named = s.store->tag(*id, req.name);
        if (!named)
          error = "naming checkpoint " + rep->id.substr(0, 12) + ": " + named.error().message;
        s.kept.push_back(*id);
        while (s.kept.size() > std::max(req.keep, 1u)) {
          if (!req.hosts.empty()) remove_parts(s, s.kept.front());
          (void)s.store->remove(s.kept.front());
          removed = true;
          s.kept.pop_front();
        }
      }
      if (removed) (void)s.store->gc();  // their chunks nothing else holds
      std::lock_guard lock(mu_);
      s.status.count = n;
      s.status.last_id = rep->id;
      s.status.last_at = t;  // the state is from after this: its age is at most now - t
      s.status.last_stall_ns =
          rep->times_ns["job_stall"] ? rep->times_ns["job_stall"] : rep->times_ns["stall"];
      s.status.last_error = error;
      s.status.last_tiers = "local";
      if (rep->peer_copies_wanted) {
        if (rep->peer_copies == rep->peer_copies_wanted) {
          s.peer_complete = n;
          s.status.last_tiers = "local+peers";
        } else {
          s.status.last_tiers = "local, peers " + std::to_string(rep->peer_copies) + "/" +
                                std::to_string(rep->peer_copies_wanted);
          if (s.status.last_error.empty() && !rep->warnings.empty())
            s.status.last_error = rep->warnings.back();
        }
      }
    } else if (::kill(req.pid, 0) != 0) {
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
  std::lock_guard lock(mu_);
  s.done = true;
}

}  // namespace gcr::gcrd
