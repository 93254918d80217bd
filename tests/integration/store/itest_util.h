// Helpers for the store's integration tests: running store_writer as a child process (to
// completion, or killed), and checking a whole store against the content every checkpoint should
// hold.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "scratch_dir.h"
#include "store_content.h"

extern char** environ;

namespace gcr::store::itest {

struct ChildResult {
  bool exited = false;
  int code = -1;        // exit code when exited
  bool killed = false;  // ended by our SIGKILL
  std::string out;      // stdout
};

// Starts store_writer with args and extra environment ("NAME=value"); kills it with SIGKILL after
// kill_after (if given) unless it has ended by then.
inline ChildResult run_writer(const std::vector<std::string>& args,
                              const std::vector<std::string>& env = {},
                              std::optional<std::chrono::microseconds> kill_after = {}) {
  std::vector<std::string> argv_s{STORE_WRITER_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  REQUIRE(rc == 0);

  ChildResult r;
  if (kill_after) {
    std::this_thread::sleep_for(*kill_after);
    r.killed = ::kill(pid, SIGKILL) == 0;
  }
  char buf[256];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.exited = WIFEXITED(status);
  if (r.exited) {
    r.code = WEXITSTATUS(status);
    r.killed = false;  // it had finished before the signal could land
  }
  return r;
}

inline std::shared_ptr<Store> open_fresh(const std::filesystem::path& root) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = kBlock;
  auto s = Store::open(o, false);
  REQUIRE(s);
  return *s;
}

// Reads back every committed checkpoint of the store and compares it with content_for(seed) of
// its meta; runs verify. Returns the number of checkpoints.
inline std::size_t check_store(const std::filesystem::path& root) {
  auto store = open_fresh(root);
  auto list = store->list();
  REQUIRE(list);
  for (const auto& info : *list) {
    INFO("checkpoint " << info.id.hex());
    REQUIRE_FALSE(info.meta.contains("error"));
    Content want = content_for(std::stoull(info.meta.at("seed")),
                               static_cast<std::uint32_t>(std::stoul(info.meta.at("size_kib"))));
    auto r = store->open_checkpoint(info.id);
    REQUIRE(r);
    const Manifest& m = (*r)->manifest();
    CHECK(m.objects.size() == want.regions.size() + want.files.size() + want.blobs.size());
    for (const ObjectEntry& o : m.objects) {
      const std::vector<std::byte>* expected = nullptr;
      if (o.kind == ObjectKind::device_region) expected = &want.regions.at(o.address);
      if (o.kind == ObjectKind::file) expected = &want.files.at(o.name);
      if (o.kind == ObjectKind::blob) expected = &want.blobs.at(o.name);
      std::vector<std::byte> got(o.size);
      REQUIRE((*r)->read(o, 0, got));
      CHECK(got == *expected);
    }
  }
  auto v = store->verify(std::nullopt);
  REQUIRE(v);
  for (const auto& p : v->problems) {
    FAIL_CHECK("verify: " << p.checkpoint << " " << p.object << " " << p.chunk << ": " << p.what);
  }
  return list->size();
}

// After gc, nothing but sealed packs at least half live is left: tmp/ empty, every pack sealed.
inline void check_clean_after_gc(const std::filesystem::path& root) {
  auto store = open_fresh(root);
  auto g = store->gc();
  REQUIRE(g);
  std::size_t packs = 0, idx = 0;
  for (const auto& e : std::filesystem::directory_iterator(root / "packs")) {
    packs += e.path().extension() == ".pack";
    idx += e.path().extension() == ".idx";
  }
  CHECK(packs == idx);
  CHECK(std::filesystem::is_empty(root / "tmp"));
  auto u = store->usage(std::nullopt);
  REQUIRE(u);
  CHECK(u->garbage_bytes * 2 <= u->pack_file_bytes);
}

}  // namespace gcr::store::itest
