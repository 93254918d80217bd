// supervisor.h: Note [The job's supervisor].
#include "supervisor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "child_command.h"
#include "gcr/chunk_id.h"
#include "gcr/store.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "job_labels.h"
#include "slurm_env.h"
#include "supervisor_wire.h"

namespace gcr::slurm {
namespace {

using Clock = std::chrono::steady_clock;

struct Step {
  bool known = false;
  std::uint32_t id = 0;
  unsigned ntasks = 0;
  std::map<unsigned, Task> tasks;  // by rank
  bool complete() const { return known && tasks.size() == ntasks; }
};

struct Waiting {
  UniqueFd conn;
  Registration reg;
};

// One line of the job's output, stamped with the wall clock (to the millisecond: what each step
// took is read off them).
void say(const std::string& text) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
  std::fprintf(stderr, "gcr: %s.%03ld %s\n", stamp, now.tv_nsec / 1'000'000, text.c_str());
  std::fflush(stderr);
}

// This host's address as the job's other nodes know it (its name in their hosts), else "".
std::string host_address(const std::string& node_name) {
  char name[256] = {};
  std::string host = node_name;
  if (host.empty() && gethostname(name, sizeof name - 1) == 0) host = name;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* list = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return "";
  char text[INET_ADDRSTRLEN] = {};
  auto* a = reinterpret_cast<sockaddr_in*>(list->ai_addr);
  inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
  freeaddrinfo(list);
  return text;
}

class Supervisor {
 public:
  Supervisor(SlurmEnv env, SupervisorOptions options)
      : env_(std::move(env)), options_(std::move(options)) {}
  Result<int> run();

 private:
  Status listen();
  Status start_script();
  void load_plan();
  void on_signal(int sig);
  void on_connection();
  void register_task(UniqueFd conn, const Registration& r);
  void restore_step();
  void restored(int code, const std::string& how);
  void checkpoint(bool requeue);
  void checkpointed(int code, const std::string& name);
  void requeue();
  Result<ChildCommand> forget(const std::vector<std::string>& names);
  void forget_all();
  void then(Result<ChildCommand> started, std::function<void(int)> next);
  void command_ended();
  int poll_timeout() const;

  SlurmEnv env_;
  SupervisorOptions options_;
  std::string self_gcrd_;  // this node's gcrd, "" when it does not listen
  std::string key_;
  UniqueFd listener_, signals_, script_fd_;
  std::string address_;
  pid_t script_ = -1;
  std::optional<int> script_status_;
  std::optional<Plan> plan_;
  Step step_;
  std::vector<Waiting> waiting_;
  std::optional<ChildCommand> running_;
  std::function<void(int)> next_;
  bool requeue_after_ = false, requeued_ = false, stopping_ = false;
  unsigned seq_ = 0;
  std::string previous_;  // the job's checkpoint before the newest (Note [A job's old checkpoints])
  Clock::time_point next_period_ = Clock::time_point::max();
};

Status Supervisor::listen() {
  listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener_) return errno_error("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener_.get(), 256) != 0 ||
      getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return errno_error("listening for the job's tasks");
  const std::string host = host_address(env_.node_name);
  if (host.empty())
    return Error{Errc::unreachable, "this node's name (" + env_.node_name +
                                        ") does not resolve: the job's tasks could not reach "
                                        "its supervisor"};
  address_ = host + ":" + std::to_string(ntohs(a.sin_port));
  key_ = store::Id128::random().hex();
  return ok();
}

Status Supervisor::start_script() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {env_.signal, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signals_ = UniqueFd(signalfd(-1, &mask, SFD_CLOEXEC));
  if (!signals_) return errno_error("signalfd");
  std::vector<std::string> args = options_.script;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  script_ = fork();
  if (script_ < 0) return errno_error("fork for the batch script");
  if (script_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(env_.signal, SIG_IGN);  // gcr's: the script neither dies of it nor sees it twice
    setenv("GCR_SLURM_SUPERVISOR", address_.c_str(), 1);
    setenv("GCR_SLURM_KEY", key_.c_str(), 1);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "gcr: cannot run the batch script %s: %s\n", argv[0],
                 std::strerror(errno));
    _exit(127);
  }
  script_fd_ = UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, script_, 0)));
  if (!script_fd_) return errno_error("pidfd_open of the batch script");
  return ok();
}

// Requeued: the job's newest checkpoint in the store, pulled here before any task registers.
void Supervisor::load_plan() {
  if (env_.restarts == 0) return;
  if (env_.store.empty()) {
    say("job " + std::to_string(env_.job) +
        " was requeued, but plugstack.conf names no store= for gcr: it starts from the beginning");
    return;
  }
  const std::string name = "slurm-" + std::to_string(env_.job);
  // A bucket is pulled from; a directory every node reaches is pushed from into this node's store.
  const bool url = env_.store.starts_with("s3://") || env_.store.starts_with("gcr://");
  auto pull = ChildCommand::gcr(
      url ? std::vector<std::string>{"image", "pull", env_.store + "/" + name, "--name", name}
          : std::vector<std::string>{"--store", env_.store, "image", "push", name,
                                     store::Store::default_root().string(), "--name", name},
      "gcr image pull");
  auto code = pull ? pull->wait() : Result<int>(pull.error());
  if (!code || *code != 0) {
    say("job " + std::to_string(env_.job) + " (restart " + std::to_string(env_.restarts) +
        "): no checkpoint of it could be read from " + env_.store +
        (code ? "" : ": " + code.error().message) + "; its steps start from the beginning");
    return;
  }
  auto st = store::Store::open({store::Store::default_root()}, false);
  auto id = st ? (*st)->resolve(name) : Result<store::CheckpointId>(st.error());
  auto m = id ? (*st)->read_manifest(*id) : Result<store::Manifest>(id.error());
  auto plan = m ? plan_of(*m, name) : Result<Plan>(m.error());
  if (!plan) {
    say("job " + std::to_string(env_.job) + ": " + plan.error().message +
        "; its steps start from the beginning");
    return;
  }
  plan_ = std::move(plan).value();
  say("job " + std::to_string(env_.job) + " (restart " + std::to_string(env_.restarts) +
      "): step " + std::to_string(plan_->step) + " will be restored from checkpoint " +
      id->hex().substr(0, 12) + " (" + std::to_string(plan_->tasks.size()) + " tasks on " +
      std::to_string(plan_->nodes.size()) + " nodes) once its tasks start");
}

// The pid of the self gcrd's node gets no @HOST: the checkpoint is coordinated here.
void Supervisor::checkpoint(bool requeue) {
  if (running_) {  // one at a time; the one under way serves the requeue too
    requeue_after_ |= requeue;
    return;
  }
  const std::string job = std::to_string(env_.job);
  if (!step_.complete() || self_gcrd_.empty()) {
    say("job " + job + ": " +
        (self_gcrd_.empty() ? std::string("this node's gcrd does not listen on the network")
                            : "no step has every task registered yet") +
        ": not checkpointed" +
        (requeue ? "; requeued, it restores its last checkpoint, if any" : ""));
    if (requeue) this->requeue();
    return;
  }
  const std::string name =
      "slurm-" + job + "." + std::to_string(env_.restarts) + "." + std::to_string(++seq_);
  std::vector<std::string> args{"checkpoint", "-R", "--name", name};
  std::vector<std::string> pids;
  bool remote = false;
  for (const auto& [rank, t] : step_.tasks) {
    remote |= t.gcrd != self_gcrd_;
    pids.push_back(t.gcrd == self_gcrd_ ? std::to_string(t.pid)
                                        : std::to_string(t.pid) + "@" + t.gcrd);
  }
  // The coordinator's own pids first: gcr checkpoint --job takes its first pid as the job's.
  std::stable_partition(pids.begin(), pids.end(),
                        [](const std::string& p) { return p.find('@') == std::string::npos; });
  if (pids.size() > 1) args.push_back("--job");
  if (remote) args.insert(args.end(), {"--copy-parts", "--token-file", env_.token_file});
  args.insert(args.end(), pids.begin(), pids.end());
  args.insert(args.end(), {"--label", "slurm.step=" + std::to_string(step_.id), "--label",
                           "slurm.tasks=" + tasks_label(step_.tasks), "--label",
                           "slurm.nodes=" + join(node_gcrds(step_.tasks), ',')});
  say("job " + job + ": checkpointing step " + std::to_string(step_.id) + " (" +
      std::to_string(step_.tasks.size()) + " tasks) as " + name +
      (requeue ? ", then requeueing it" : ""));
  requeue_after_ = requeue;
  then(ChildCommand::gcr(args, "gcr checkpoint"),
       [this, name](int code) { checkpointed(code, name); });
}

void Supervisor::checkpointed(int code, const std::string& name) {
  const std::string job = std::to_string(env_.job);
  auto finish = [this] {
    if (requeue_after_) requeue();
  };
  if (code != 0) {
    say("job " + job + ": checkpoint " + name + " failed (exit " + std::to_string(code) +
        "): the store keeps the job's previous checkpoint, if any");
    return finish();
  }
  if (env_.store.empty()) {
    say("job " + job + ": checkpoint " + name +
        " is in this node's store only (plugstack.conf names no store=): a requeued job cannot "
        "restore it");
    return finish();
  }
  then(ChildCommand::gcr({"image", "push", name, env_.store, "--name", "slurm-" + job},
                         "gcr image push"),
       [this, job, name, finish](int pushed) {
         if (pushed != 0) {
           say("job " + job + ": pushing checkpoint " + name + " to " + env_.store +
               " failed (exit " + std::to_string(pushed) + "): the store keeps the previous one");
           return finish();
         }
         say("job " + job + ": checkpoint " + name + " is in " + env_.store + " as slurm-" + job);
         const std::string before = std::exchange(previous_, name);
         if (before.empty()) return finish();
         then(forget({before}), [finish](int) { finish(); });
       });
}

// Note [A job's old checkpoints] (forget.h).
Result<ChildCommand> Supervisor::forget(const std::vector<std::string>& names) {
  std::vector<std::string> args{"slurm",         "forget", "--token-file",
                                env_.token_file, "--also", join(node_gcrds(step_.tasks), ',')};
  args.insert(args.end(), names.begin(), names.end());
  return ChildCommand::gcr(args, "gcr slurm forget");
}

// The script ended by itself: the job is done, and so are its checkpoints.
void Supervisor::forget_all() {
  const std::string job = std::to_string(env_.job);
  if (!previous_.empty())
    if (auto c = forget({previous_})) (void)c->wait();
  if (env_.store.empty() || (seq_ == 0 && env_.restarts == 0)) return;  // none was pushed
  if (auto c =
          ChildCommand::gcr({"--store", env_.store, "image", "rm", "slurm-" + job}, "gcr image rm"))
    if (auto code = c->wait(); code && *code == 0)
      say("job " + job + ": done; its checkpoints are removed (Note [A job's old checkpoints])");
}

void Supervisor::requeue() {
  if (requeued_ || stopping_) return;  // cancelled meanwhile: the job ends, as its user asked
  // It ended while it was checkpointed: done, not to be run again from before its end.
  std::string ended;
  if (script_status_)
    ended = "its script ended meanwhile (exit " + std::to_string(*script_status_) + ")";
  for (const auto& [rank, t] : step_.tasks)
    if (ended.empty() && t.gcrd == self_gcrd_ && ::kill(t.pid, 0) != 0 && errno == ESRCH)
      ended = "its rank " + std::to_string(rank) + " ended meanwhile";
  if (!ended.empty()) {
    say("job " + std::to_string(env_.job) + ": " + ended + ": not requeued");
    return;
  }
  requeued_ = true;
  requeue_after_ = false;
  say("job " + std::to_string(env_.job) + ": requeued (scontrol requeue)");
  then(ChildCommand::start({"scontrol", "requeue", std::to_string(env_.job)}, "scontrol requeue"),
       [this](int code) {
         if (code != 0)
           say("job " + std::to_string(env_.job) + ": scontrol requeue failed (exit " +
               std::to_string(code) + ")");
       });
}

void Supervisor::then(Result<ChildCommand> started, std::function<void(int)> next) {
  if (!started) {
    say(started.error().message);
    return next(127);
  }
  running_.emplace(std::move(started).value());
  next_ = std::move(next);
}

void Supervisor::command_ended() {
  auto code = running_->finish();
  running_.reset();
  auto next = std::move(next_);
  next_ = nullptr;
  if (next) next(code ? *code : 127);
}

void Supervisor::restore_step() {
  std::vector<std::string> args{"restore", plan_->name};
  std::map<unsigned, std::string> now;  // node -> its gcrd now
  for (const Waiting& w : waiting_) now[w.reg.node] = w.reg.gcrd;
  if (now[0] != self_gcrd_)
    return restored(1, "node 0 of the step is not this node (the batch script's)");
  const bool remote = plan_->nodes.size() > 1;
  for (std::size_t n = 1; n < plan_->nodes.size(); ++n) {
    if (!now.count(static_cast<unsigned>(n)))
      return restored(1, "the step has no task on node " + std::to_string(n) + " now");
    if (plan_->nodes[n] != now[static_cast<unsigned>(n)])
      args.insert(args.end(), {"--place", plan_->nodes[n] + "=" + now[static_cast<unsigned>(n)]});
  }
  if (remote) args.insert(args.end(), {"--token-file", env_.token_file});
  say("job " + std::to_string(env_.job) + ": restoring step " + std::to_string(plan_->step) +
      " from " + plan_->name);
  then(ChildCommand::gcr(args, "gcr restore"), [this](int code) { restored(code, ""); });
}

// Every waiting task told: its rank restored, or to start over.
void Supervisor::restored(int code, const std::string& why) {
  const std::string job = std::to_string(env_.job);
  if (code == 0) {
    say("job " + job + ": step " + std::to_string(plan_->step) + " restored; it runs on");
    previous_ = plan_->name;
  } else {
    say("job " + job + ": the restore of step " + std::to_string(plan_->step) + " failed" +
        (why.empty() ? " (exit " + std::to_string(code) + ")" : ": " + why) +
        "; the step starts from the beginning");
  }
  step_ = Step{true, plan_->step, waiting_.front().reg.ntasks, {}};  // every task is waiting
  for (Waiting& w : waiting_) {
    Answer a;
    Task t{w.reg.pid, w.reg.gcrd, w.reg.node};
    if (code == 0) {
      a.kind = Answer::Kind::restored;
      a.pid = plan_->tasks[w.reg.procid].pid;
      t.pid = a.pid;
    }
    step_.tasks[w.reg.procid] = t;
    (void)write_all(w.conn.get(), encode_answer(a));
  }
  waiting_.clear();
  plan_.reset();
}

void Supervisor::register_task(UniqueFd conn, const Registration& r) {
  if (plan_ && r.step == plan_->step) {
    if (r.ntasks != plan_->tasks.size()) {
      say("job " + std::to_string(env_.job) + ": step " + std::to_string(r.step) + " has " +
          std::to_string(r.ntasks) + " tasks now and had " + std::to_string(plan_->tasks.size()) +
          ": it starts from the beginning");
      plan_.reset();
    } else {
      waiting_.push_back({std::move(conn), r});
      if (waiting_.size() == r.ntasks && !running_) restore_step();
      return;
    }
  }
  if (!step_.known || step_.id != r.step) step_ = Step{true, r.step, r.ntasks, {}};
  step_.tasks[r.procid] = Task{r.pid, r.gcrd, r.node};
  (void)write_all(conn.get(), encode_answer(Answer{}));
}

void Supervisor::on_connection() {
  UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!conn) return;
  auto line = read_line(conn.get(), 512, 10'000);
  if (!line) return;
  auto r = decode_registration(*line, key_);
  if (!r) {
    say("job " + std::to_string(env_.job) + ": " + r.error().message);
    (void)write_all(conn.get(), encode_answer({Answer::Kind::error, 0, r.error().message}));
    return;
  }
  register_task(std::move(conn), *r);
}

void Supervisor::on_signal(int sig) {
  if (sig == env_.signal) {
    say("job " + std::to_string(env_.job) + ": got " + strsignal(sig));
    return checkpoint(/*requeue=*/true);
  }
  // Cancelled or killed: the script goes; a checkpoint under way is abandoned (gcrd undoes it).
  stopping_ = true;
  if (running_) running_->kill(SIGTERM);
  if (script_ > 0 && !script_status_) ::kill(script_, sig);
}

int Supervisor::poll_timeout() const {
  if (next_period_ == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_period_ - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

Result<int> Supervisor::run() {
  GCR_TRY(listen());
  if (auto g = gcrd::connect_running(gcrd::default_socket_path())) {
    UniqueFd conn(*g);
    if (auto reply = gcrd::call(conn.get(), "ping", {}, [](const std::string&) {}))
      self_gcrd_ = (*reply)["listen"];
  }
  if (self_gcrd_.empty())
    say("warning: this node's gcrd is not running or does not listen on the network: the job "
        "cannot be checkpointed (docs/slurm.md)");
  load_plan();
  GCR_TRY(start_script());
  if (options_.every_ms > 0)
    next_period_ = Clock::now() + std::chrono::milliseconds(options_.every_ms);
  while (!script_status_ || running_) {
    pollfd p[4] = {{signals_.get(), POLLIN, 0},
                   {listener_.get(), POLLIN, 0},
                   {script_status_ ? -1 : script_fd_.get(), POLLIN, 0},
                   {running_ ? running_->pidfd() : -1, POLLIN, 0}};
    if (::poll(p, 4, poll_timeout()) < 0 && errno != EINTR) return errno_error("poll");
    if (p[0].revents) {
      signalfd_siginfo info{};
      if (::read(signals_.get(), &info, sizeof info) == sizeof info)
        on_signal(static_cast<int>(info.ssi_signo));
    }
    if (p[1].revents) on_connection();
    // The script's end first: a checkpoint that ends in the same turn must not requeue a job
    // whose script is done.
    if (p[2].revents && !script_status_) {
      int status = 0;
      if (waitpid(script_, &status, 0) == script_)
        script_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (p[3].revents && running_) command_ended();
    if (Clock::now() >= next_period_) {
      next_period_ = Clock::now() + std::chrono::milliseconds(options_.every_ms);
      if (!running_ && !requeued_ && !stopping_ && !script_status_) checkpoint(false);
    }
    if (!running_ && plan_ && !waiting_.empty() && waiting_.size() == waiting_.front().reg.ntasks)
      restore_step();
  }
  if (!stopping_ && !requeued_) forget_all();
  return *script_status_;
}

}  // namespace

Result<int> run_supervisor(const SupervisorOptions& options) {
  if (options.script.empty())
    return Error{Errc::invalid_argument, "gcr slurm batch: no script after --"};
  GCR_TRY_ASSIGN(SlurmEnv env, read_slurm_env(false));
  // The node's gcrd is a service (docs/slurm.md): the checkpoints' gcr and the script's never
  // start a gcrd of their own, one without --listen that would keep the node's from its socket.
  setenv("GCR_START_GCRD", "0", 0);
  Supervisor s(std::move(env), options);
  return s.run();
}

}  // namespace gcr::slurm
