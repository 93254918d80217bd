// Permission errors: a writer that may not write the store gets Errc::permission_denied naming
// the path and what to do, and the store's checkpoints stay intact. Root bypasses mode bits, so
// the writer runs in a forked child that has dropped to `nobody`; skipped when that is impossible.
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#include "itest_util.h"

using namespace gcr;
using namespace gcr::store;
using namespace gcr::store::itest;

namespace {

struct Outcome {
  bool ran = false;
  int errc = -1;
  std::string message;
};

// Runs fn in a child as uid/gid nobody; fn returns a Status whose code and message come back.
template <typename Fn>
Outcome as_nobody(Fn fn) {
  const passwd* pw = ::getpwnam("nobody");
  uid_t uid = pw ? pw->pw_uid : 65534;
  gid_t gid = pw ? pw->pw_gid : 65534;
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(3);
    Status s = fn();
    std::string msg = s ? "" : s.error().message;
    int code = s ? 0 : static_cast<int>(s.error().code);
    (void)!::write(p[1], &code, sizeof code);
    (void)!::write(p[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(p[1]);
  Outcome o;
  int code = -1;
  if (::read(p[0], &code, sizeof code) == sizeof code) {
    o.ran = true;
    o.errc = code;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0)
      o.message.append(buf, static_cast<std::size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return o;
}

Status try_write(const std::filesystem::path& root) {
  StoreOptions o;
  o.root = root;
  GCR_TRY_ASSIGN(auto store, Store::open(o, true));
  GCR_TRY_ASSIGN(auto w, store->begin_checkpoint({}, std::nullopt));
  std::vector<std::byte> data(100000, std::byte{3});
  GCR_TRY(w->add_region(0x1000, data, 0, true));
  return w->commit({}).has_value() ? ok() : make_error(Errc::internal, "commit");
}

}  // namespace

TEST_CASE("a store the writer may not write gives a permission error naming the path",
          "[permission]") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root to run a writer as another user");
    return;
  }
  ScratchDir dir;
  ::chmod(dir.path().c_str(), 0755);  // nobody may pass through to the store
  auto root = dir.path() / "store";
  REQUIRE(run_writer({"write", root, "1", "256", dir.path() / "scratch"}).code == 0);

  SECTION("another user's private store") {
    auto o = as_nobody([&] { return try_write(root); });
    REQUIRE(o.ran);
    CHECK(o.errc == static_cast<int>(Errc::permission_denied));
    CHECK_THAT(o.message, Catch::Contains(root.string()) && Catch::Contains("GCR_STORE"));
  }
  SECTION("a store whose packs directory is not writable") {
    // The store is nobody's, except packs/, which root keeps.
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      REQUIRE(::chown(e.path().c_str(), 65534, 65534) == 0);
    }
    REQUIRE(::chown(root.c_str(), 65534, 65534) == 0);
    REQUIRE(::chown((root / "packs").c_str(), 0, 0) == 0);
    ::chmod((root / "packs").c_str(), 0755);
    auto o = as_nobody([&] { return try_write(root); });
    REQUIRE(o.ran);
    CHECK(o.errc == static_cast<int>(Errc::permission_denied));
    CHECK_THAT(o.message, Catch::Contains((root / "packs").string()));
    CHECK(std::filesystem::is_empty(root / "tmp"));
    CHECK(check_store(root) == 1);
  }
}
