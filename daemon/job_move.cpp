// Note [A rank moved while its job runs] (job_move.h): the moving rank's side and a bystander's.
#include "job_move.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "address_takeover.h"
#include "checkpoint_ports_gcrd.h"
#include "device.h"
#include "job.h"
#include "job_hosts.h"
#include "job_link.h"
#include "pause_point.h"
#include "tree_freeze.h"

namespace gcr::gcrd {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t since(Clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// The moving rank's link to the bystanders: the job's meetings, and in the stop "frozen" after
// "quiesced" (every bystander held still and settled before the rank's connections are locked).
// It also learns the rank's own addresses, which must move with it.
class MoveLink final : public JobLink {
 public:
  MoveLink(std::vector<RemotePart>& parts, bool freeze, pid_t rank)
      : coordinator_(parts), freeze_(freeze), rank_(rank) {}

  Result<std::vector<TcpConnection>> carried(const std::vector<TcpConnection>& outward) override {
    GCR_TRY_ASSIGN(std::vector<TcpConnection> carried, coordinator_.carried(outward));
    addresses_.clear();
    for (const TcpConnection& c : carried) addresses_.push_back(c.local.ip);
    GCR_TRY(check_own_addresses(addresses_, "process " + std::to_string(rank_)));
    return carried;
  }
  Result<std::uint64_t> cut_target(std::uint64_t admitted) override {
    return coordinator_.cut_target(admitted);
  }
  Status quiesced() override {
    GCR_TRY(coordinator_.quiesced());
    if (freeze_) GCR_TRY(coordinator_.meet("frozen", "lock"));
    return ok();
  }
  Status dumped() override { return coordinator_.dumped(); }
  Status restored() override {
    return Error{Errc::internal, "a moving rank's checkpoint restores nothing here"};
  }
  const std::vector<std::uint32_t>& addresses() const { return addresses_; }

 private:
  CoordinatorLink coordinator_;
  bool freeze_;
  pid_t rank_;
  std::vector<std::uint32_t> addresses_;
};

// Every bystander goes on: told to (`word`: "thaw" after the stop, "abort" after a failure; none
// after a round, whose bystanders went on at "go"), then its last line read. The longest any was
// stalled, in ns.
std::uint64_t let_bystanders_go(std::vector<RemotePart>& parts, const char* word,
                                std::vector<std::string>& warnings) {
  if (word)
    for (RemotePart& p : parts)
      if (p.wire) (void)p.wire->send(word);
  std::uint64_t longest = 0;
  for (RemotePart& p : parts) {
    if (!p.wire) continue;
    for (;;) {
      auto l = p.wire->read();
      if (!l) {
        if (std::string(word ? word : "") != "abort")
          warnings.push_back("a bystander did not say it went on: " + l.error().message);
        break;
      }
      if (l->word != "ok") continue;
      p.reply = std::move(l->fields);
      longest = std::max<std::uint64_t>(
          longest, std::strtoull(p.reply["time.stall_ns"].c_str(), nullptr, 10));
      break;
    }
  }
  return longest;
}

}  // namespace

Result<CheckpointReport> checkpoint_moving_rank(store::Store& store, const criu::Tools& tools,
                                                CheckpointRequest req,
                                                const std::vector<JobHost>& hosts,
                                                const JobOptions& job, const Progress& progress,
                                                WorkRegistry* work) {
  const bool stop = static_cast<bool>(req.hold);
  if (!stop && !req.leave_running)
    return Error{Errc::invalid_argument,
                 "a moving rank's checkpoint is a pre-copy round (--leave-running) or the stop "
                 "(hold)"};
  std::vector<RemotePart> parts;
  MoveLink link(parts, stop, req.pid);
  for (const JobHost& h : hosts) {
    WireFields f{{"pids", pid_list(h.pids)},
                 {"bystander", "1"},
                 {"freeze", stop ? "1" : "0"},
                 {"timeout_ms", std::to_string(req.quiesce_timeout.count())},
                 {"idle_ms", std::to_string(job.idle.count())}};
    auto p = ask_host(h.address, job.key, job.idle, "job_part", f);
    if (!p) {
      std::vector<std::string> ignored;
      let_bystanders_go(parts, "abort", ignored);
      return std::move(p).error();
    }
    p->pids = h.pids;
    parts.push_back(std::move(p).value());
  }
  req.link = &link;
  std::vector<std::string> warnings;
  bool bystanders_gone = false;  // told to go on before the hold ended (the rank runs there)
  std::uint64_t job_stop = 0;
  if (stop) {
    // The rank's addresses leave this host before the client hears that the rank is held (so
    // before it can ask the destination to take them); they come back should it run on here. The
    // rest of the job goes on as soon as the rank runs at the destination.
    auto hold = std::move(req.hold);
    req.hold = [&, hold](const std::string& id,
                         const std::function<void(const std::string&)>& heard) {
      auto released = release_addresses(link.addresses());
      if (!released) {
        progress("the rank's address cannot leave this host: " + released.error().message);
        return false;
      }
      for (const TakenAddress& t : *released)
        progress("gave address " + address_text(t.ip) + " up for the destination");
      bool end = hold(id, [&](const std::string& word) {
        heard(word);
        if (word == "running" && !bystanders_gone) {
          job_stop = let_bystanders_go(parts, "thaw", warnings);
          bystanders_gone = true;
        }
      });
      if (!end) put_back_addresses(*released);
      return end;
    };
  }
  auto rep = checkpoint_process(store, tools, req, progress, work);
  if (!bystanders_gone) {
    const char* word = !rep ? "abort" : stop ? "thaw" : nullptr;
    job_stop = let_bystanders_go(parts, word, warnings);
  }
  const std::uint64_t longest = job_stop;
  if (!rep) return rep;
  for (std::string& w : warnings) rep->warnings.push_back(std::move(w));
  if (stop)
    rep->times_ns["job_stop"] = longest;
  else
    rep->times_ns["job_stall"] = std::max(longest, rep->times_ns["stall"]);
  return rep;
}

Result<BystanderReport> bystand(const BystanderRequest& req, int fd, const Progress& progress) {
  JobWire wire(fd, "the moving rank's gcrd", req.idle);
  PartLink link(wire);
  GCR_TRY(check_roots(req.roots));
  GCR_TRY_ASSIGN(JobTrees trees, inspect_job_trees(req.roots));
  GCR_TRY_ASSIGN(std::vector<Member> members, connect_members(trees.all, std::chrono::seconds(5)));
  if (members.empty())
    return Error{Errc::unsupported, "no process of the job's ranks on this host (" +
                                        pid_list(req.roots) + ") runs under gcr"};
  GCR_TRY_ASSIGN(std::vector<SharedAllocation> shared,
                 find_shared(members, trees.all, "the job's ranks " + pid_list(req.roots)));
  carry_tcp(trees);
  GCR_TRY_ASSIGN(std::vector<TcpConnection> across, link.carried(outward_tcp(trees)));
  carry_tcp_listed(trees, across);
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  MemberSessions sessions(members, std::move(shared), trees.tcp, &link, *gpu);
  BystanderReport rep;
  rep.processes = members.size();
  const auto t_cut = Clock::now();
  GCR_TRY(sessions.cut(req.timeout, progress));
  Status quiesced = sessions.quiesce(req.timeout);
  sessions.end_cut();  // launches held by the cut now wait at the closed gate
  if (!quiesced) return std::move(quiesced).error();
  // From here every member waits at its closed gate until resumed, whatever happens (after its
  // threads are let go: `held` is destroyed first).
  struct Resume {
    MemberSessions& s;
    void now() {
      for (std::size_t i = 0; i < s.size(); ++i) (void)s.resume(i);
      done = true;
    }
    bool done = false;
    ~Resume() {
      if (!done) now();
    }
  } resume{sessions};
  GCR_TRY(link.quiesced());
  FrozenThreads held;
  if (req.freeze) {
    GCR_TRY_ASSIGN(held, FrozenThreads::freeze(trees.all.pids));
    rep.threads = held.threads();
    if (!trees.tcp.empty())
      if (auto sockets = RepairedSockets::take(trees.tcp.ends))
        sockets->settle(std::chrono::milliseconds(10));
    pause_point("bystander-frozen");
    GCR_TRY(link.meet("frozen", "lock"));
  }
  GCR_TRY(link.dumped());
  if (req.freeze) {
    // Until the stop is over ("thaw"), or failed ("abort"), or the coordinator is lost: on, either
    // way.
    auto told = wire.read();
    if (told && told->word != "thaw" && told->word != "abort")
      progress("the moving rank's gcrd said '" + told->word + "'; the ranks here go on");
  }
  held.thaw();
  resume.now();
  rep.stall_ns = since(t_cut);
  return rep;
}

}  // namespace gcr::gcrd
