// gcr under Slurm without Slurm: supervisor_wire.h, job_labels.h, slurm_env.h, and the label.*
// fields of gcrd's checkpoint request.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>

#include "gcr/unique_fd.h"
#include "gcrd_requests.h"
#include "job_labels.h"
#include "slurm_env.h"
#include "supervisor_wire.h"

using namespace gcr;
using namespace gcr::slurm;

namespace {
const std::string kKey = "0123456789abcdef0123456789abcdef";

std::string line_of(const std::string& encoded) {
  REQUIRE(encoded.ends_with("\n"));
  return encoded.substr(0, encoded.size() - 1);
}
}  // namespace

TEST_CASE("a task's registration reaches the supervisor as it was sent") {
  Registration r{7, 1, 2, 1, 4242, "10.0.0.2:7070"};
  auto back = decode_registration(line_of(encode_registration(kKey, r)), kKey);
  REQUIRE(back);
  CHECK(back->step == 7);
  CHECK(back->procid == 1);
  CHECK(back->ntasks == 2);
  CHECK(back->node == 1);
  CHECK(back->pid == 4242);
  CHECK(back->gcrd == "10.0.0.2:7070");
}

TEST_CASE("registrations with a wrong key, another version or bad fields are refused") {
  Registration r{0, 0, 2, 0, 100, "10.0.0.1:7070"};
  const std::string good = line_of(encode_registration(kKey, r));
  CHECK(decode_registration(good, kKey.substr(0, 31) + "0").error().code ==
        Errc::permission_denied);
  CHECK(decode_registration(good, "").error().code == Errc::permission_denied);
  CHECK(decode_registration("gcr-slurm/2 " + good.substr(12), kKey).error().code == Errc::protocol);
  for (const std::string& bad :
       {"gcr-slurm/1 " + kKey + " register 0 2 2 0 100 h:1",       // rank >= tasks
        "gcr-slurm/1 " + kKey + " register 0 0 2 0 0 h:1",         // pid 0
        "gcr-slurm/1 " + kKey + " register 0 0 2 0 100 h:1 more",  // extra words
        "gcr-slurm/1 " + kKey + " register -1 0 2 0 100 h:1",      // not a number
        "gcr-slurm/1 " + kKey + " register 0 0 2 0 99999999 h:1",  // pid past PID_MAX_LIMIT
        "gcr-slurm/1 " + kKey + " hello 0 0 2 0 100 h:1", "gcr-slurm/1 " + kKey})
    CHECK(decode_registration(bad, kKey).error().code == Errc::invalid_argument);
}

TEST_CASE("the supervisor's answers") {
  CHECK(decode_answer(line_of(encode_answer({})))->kind == Answer::Kind::run);
  auto restored = decode_answer(line_of(encode_answer({Answer::Kind::restored, 321, ""})));
  REQUIRE(restored);
  CHECK(restored->kind == Answer::Kind::restored);
  CHECK(restored->pid == 321);
  auto error = decode_answer(line_of(encode_answer({Answer::Kind::error, 0, "two\nlines"})));
  REQUIRE(error);
  CHECK(error->message == "two lines");  // one line on the wire, whatever the message
  CHECK_FALSE(decode_answer("restored 0"));
  CHECK_FALSE(decode_answer("restored x"));
  CHECK_FALSE(decode_answer("go"));
}

TEST_CASE("read_line: a line, a silent peer, a peer that leaves, a line too long") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  REQUIRE(write_all(b.get(), "run\nrest"));
  CHECK(*read_line(a.get(), 16, 1000) == "run");
  CHECK(read_line(a.get(), 16, 50).error().code == Errc::timeout);  // "rest" has no newline
  REQUIRE(write_all(b.get(), std::string(40, 'x') + "\n"));
  CHECK(read_line(a.get(), 16, 1000).error().code == Errc::invalid_argument);
  CHECK(read_line(a.get(), 64, 1000)->size() == 23);  // the rest of it (a caller hangs up then)
  b.reset();
  CHECK(read_line(a.get(), 64, 1000).error().code == Errc::io_error);
}

TEST_CASE("a checkpoint's slurm labels give back its step, tasks and nodes") {
  std::map<unsigned, Task> tasks{{0, {100, "10.0.0.1:7070", 0}},
                                 {1, {200, "10.0.0.1:7070", 0}},
                                 {2, {300, "10.0.0.2:7070", 1}}};
  store::Manifest m;
  m.meta["label.slurm.step"] = "3";
  m.meta["label.slurm.tasks"] = tasks_label(tasks);
  m.meta["label.slurm.nodes"] = join(node_gcrds(tasks), ',');
  CHECK(m.meta["label.slurm.nodes"] == "10.0.0.1:7070,10.0.0.2:7070");
  auto p = plan_of(m, "slurm-9");
  REQUIRE(p);
  CHECK(p->step == 3);
  REQUIRE(p->tasks.size() == 3);
  CHECK(p->tasks[2].pid == 300);
  CHECK(p->tasks[2].node == 1);
  CHECK(p->nodes == std::vector<std::string>{"10.0.0.1:7070", "10.0.0.2:7070"});
}

TEST_CASE("bad or hostile slurm labels are refused, not trusted") {
  store::Manifest base;
  base.meta["label.slurm.step"] = "0";
  base.meta["label.slurm.tasks"] = "0:100:0";
  base.meta["label.slurm.nodes"] = "10.0.0.1:7070";
  REQUIRE(plan_of(base, "x"));
  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"label.slurm.step", ""},
           {"label.slurm.step", "99999999999"},
           {"label.slurm.tasks", "0:100:1"},  // node 1 of 1
           {"label.slurm.tasks", "0:0:0"},
           {"label.slurm.tasks", "0:100:0,0:101:0"},  // rank twice
           {"label.slurm.tasks", "0:100"},
           {"label.slurm.tasks", "0:99999999999999999999:0"},
           {"label.slurm.tasks", ""},
           {"label.slurm.nodes", ""}}) {
    store::Manifest m = base;
    m.meta[key] = value;
    INFO(key << "=" << value);
    CHECK(plan_of(m, "x").error().code == Errc::corrupt_image);
  }
}

TEST_CASE("--gcr's signal names") {
  CHECK(parse_signal("USR1") == SIGUSR1);
  CHECK(parse_signal("SIGUSR2") == SIGUSR2);
  CHECK(parse_signal("12") == 12);
  CHECK_FALSE(parse_signal("9"));  // KILL cannot be caught
  CHECK_FALSE(parse_signal("SIGSTOP"));
  CHECK_FALSE(parse_signal("USR3"));
  CHECK_FALSE(parse_signal(""));
}

TEST_CASE("--gcr's options, read from the job's environment") {
  setenv("SLURM_JOB_ID", "12", 1);
  setenv("GCR_SLURM_OPTIONS", "every=10m,signal=USR2", 1);
  auto e = read_slurm_env(false);
  REQUIRE(e);
  CHECK(e->job == 12);
  CHECK(e->every == "10m");
  CHECK(e->signal == SIGUSR2);
  setenv("GCR_SLURM_OPTIONS", "evry=10m", 1);
  CHECK(read_slurm_env(false).error().code == Errc::invalid_argument);
  setenv("GCR_SLURM_OPTIONS", "", 1);
  unsetenv("SLURM_JOB_ID");
  CHECK(read_slurm_env(false).error().code == Errc::invalid_argument);  // not in a job
}

TEST_CASE("gcr checkpoint --label: kept as META label.KEY, bad ones refused") {
  gcrd::Fields f{{"pid", "100"}, {"label.slurm.step", "0"}, {"label.team", "vision run 3"}};
  auto c = gcrd::decode_checkpoint(f);
  REQUIRE(c);
  CHECK(c->labels.at("slurm.step") == "0");
  CHECK(c->labels.at("team") == "vision run 3");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"label.Team", "x"},  // META's keys are lower case
           {"label.a-b", "x"},   // and have no '-'
           {"label.", "x"},
           {"label.t",
            "a\x01"
            "b"},  // not printable
           {"label.t", std::string(4097, 'v')}}) {
    gcrd::Fields bad{{"pid", "100"}, {key, value}};
    INFO(key);
    CHECK(gcrd::decode_checkpoint(bad).error().code == Errc::invalid_argument);
  }
  gcrd::Fields every{{"pid", "100"},      {"label.t", "x"},       {"every_ms", "1000"},
                     {"remote.0", "h:1"}, {"remote_pids.0", "5"}, {"net_key", "k"}};
  CHECK_FALSE(gcrd::decode_checkpoint(every));
}
