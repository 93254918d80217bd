// The restore rules of gcr/restore_streams.h, and META files round trips (gcr/process_tree.h).
#include "gcr/restore_streams.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "scratch_dir.h"

using namespace gcr;
using namespace gcr::criu;
using criu::FileKind;
using criu::OpenFile;

namespace {

OpenFile file(pid_t pid, int fd, FileKind kind, const std::string& path, int flags,
              std::uint64_t size = 0, bool external = true) {
  OpenFile f;
  f.pid = pid;
  f.fd = fd;
  f.kind = kind;
  f.path = path;
  f.flags = flags;
  f.size = size;
  f.external = external;
  if (kind == FileKind::regular) f.key = path.substr(1);
  if (kind == FileKind::pipe) f.key = path;
  if (kind == FileKind::terminal) f.key = "tty[8800:1a]";
  return f;
}

std::string target_of(int fd) {
  char buf[4096];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n < 0 ? "" : std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

TEST_CASE("META files round-trips, escapes included") {
  criu::ProcessTree t;
  t.root = 10;
  t.root_is_session_leader = false;
  t.files = {file(10, 1, FileKind::regular, "/tmp/a\tb\\c\nd.log", O_WRONLY | O_APPEND, 42),
             file(10, 0, FileKind::terminal, "/dev/pts/3", O_RDWR),
             file(11, 5, FileKind::pipe, "pipe:[77]", O_WRONLY),
             file(11, 6, FileKind::anon, "anon_inode:[eventfd]", O_RDWR)};
  auto back = criu::decode_files(criu::encode_files(t));
  REQUIRE(back);
  REQUIRE(back->size() == 3);  // the eventfd is not a connection a restore reconnects
  CHECK((*back)[0].path == "/tmp/a\tb\\c\nd.log");
  CHECK((*back)[0].key == "tmp/a\tb\\c\nd.log");
  CHECK((*back)[0].flags == (O_WRONLY | O_APPEND));
  CHECK((*back)[0].size == 42);
  CHECK((*back)[1].kind == FileKind::terminal);
  CHECK((*back)[2].pid == 11);
  CHECK((*back)[2].external);
  CHECK(t.shell_job());
  auto args = t.dump_arguments();
  CHECK(std::find(args.begin(), args.end(), "--shell-job") != args.end());
  CHECK(std::find(args.begin(), args.end(), "tty[8800:1a]") != args.end());
}

TEST_CASE("a corrupt META files line is an error, not a guess") {
  auto r = criu::decode_files("1\t2\tfile\n");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::corrupt_image);
}

TEST_CASE("a grown log is appended to as it is now") {
  ScratchDir d;
  std::string log = (d / "train.log").string();
  std::ofstream(log) << "what the original wrote after the checkpoint\n";
  auto plan = plan_streams({file(10, 1, FileKind::regular, log, O_WRONLY, 5),
                            file(10, 2, FileKind::regular, log, O_WRONLY, 5)},
                           10, {});
  REQUIRE(plan);
  REQUIRE(plan->inherit.size() == 1);  // one open file, however many fds
  CHECK(plan->inherit[0].key == log.substr(1));
  CHECK(target_of(plan->inherit[0].fd.get()) == log);
  CHECK((fcntl(plan->inherit[0].fd.get(), F_GETFL) & O_APPEND) != 0);
}

TEST_CASE("a log rotated away is created again") {
  ScratchDir d;
  std::string log = (d / "gone.log").string();
  auto plan = plan_streams({file(10, 1, FileKind::regular, log, O_WRONLY | O_APPEND, 5)}, 10, {});
  REQUIRE(plan);
  CHECK(std::filesystem::exists(log));
}

TEST_CASE("a read file that changed is refused by name, unless accepted") {
  ScratchDir d;
  std::string data = (d / "data.bin").string();
  std::ofstream(data) << "0123456789";
  std::vector<OpenFile> files = {file(10, 4, FileKind::regular, data, O_RDONLY, 4)};
  auto refused = plan_streams(files, 10, {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find(data) != std::string::npos);
  CHECK(refused.error().message.find("--accept-changed") != std::string::npos);
  StreamOptions o;
  o.accept_changed.insert(data);
  files[0].pos = 3;
  auto accepted = plan_streams(files, 10, o);
  REQUIRE(accepted);
  REQUIRE(accepted->inherit.size() == 1);
  CHECK(lseek(accepted->inherit[0].fd.get(), 0, SEEK_CUR) == 3);
  // Unchanged: opened here too, at the process's position (Note [Files reopened for the
  // restored process]): CRIU opens nothing by a path someone could have changed.
  files[0].size = 10;
  auto same = plan_streams(files, 10, {});
  REQUIRE(same);
  REQUIRE(same->inherit.size() == 1);
  CHECK(target_of(same->inherit[0].fd.get()) == data);
  CHECK(lseek(same->inherit[0].fd.get(), 0, SEEK_CUR) == 3);
}

TEST_CASE("a file made a link since the checkpoint is refused, whatever its size") {
  ScratchDir d;
  std::string data = (d / "data.bin").string(), other = (d / "other.bin").string();
  std::ofstream(other) << "0123456789";
  REQUIRE(symlink(other.c_str(), data.c_str()) == 0);
  auto plan = plan_streams({file(10, 4, FileKind::regular, data, O_RDONLY, 10)}, 10, {});
  REQUIRE_FALSE(plan);
  CHECK(plan.error().message.find("symbolic link") != std::string::npos);
  // A directory on the way made a link: the same.
  std::filesystem::create_directory(d / "real");
  std::ofstream((d / "real" / "f").string()) << "0123456789";
  std::filesystem::create_directory_symlink(d / "real", d / "dir");
  std::string via = (d / "dir" / "f").string();
  auto through = plan_streams({file(10, 4, FileKind::regular, via, O_RDONLY, 10)}, 10, {});
  REQUIRE_FALSE(through);
  CHECK(through.error().message.find("symbolic link") != std::string::npos);
}

TEST_CASE("a mapped file is handed over unless only root can change its path") {
  ScratchDir d;
  std::filesystem::permissions(d.path(), std::filesystem::perms::all);  // anyone may add names
  std::string data = (d / "weights.bin").string();
  std::ofstream(data) << "0123456789";
  OpenFile mine = file(10, -1, FileKind::regular, data, O_RDWR, 10);
  OpenFile libc = file(10, -1, FileKind::regular, "/bin/sh", O_RDONLY, 0);
  struct stat st {};
  REQUIRE(::stat("/bin/sh", &st) == 0);
  libc.path = std::filesystem::canonical("/bin/sh").string();
  libc.key = libc.path.substr(1);
  libc.size = static_cast<std::uint64_t>(st.st_size);
  auto plan = plan_streams({mine, libc}, 10, {});
  REQUIRE(plan);
  REQUIRE(plan->inherit.size() == 1);  // the system's shell is root's: CRIU opens it
  CHECK(plan->inherit[0].key == mine.key);
  CHECK((fcntl(plan->inherit[0].fd.get(), F_GETFL) & O_ACCMODE) == O_RDWR);
  // Changed size: refused (a mapping past the end would fault), unless accepted.
  std::ofstream(data, std::ios::app) << "more";
  CHECK_FALSE(plan_streams({mine}, 10, {}));
}

TEST_CASE("a terminal shared by stdin, stdout and stderr gets what stdout gets") {
  ScratchDir d;
  StreamOptions o;
  o.stdout_file = (d / "out.log").string();
  auto plan = plan_streams({file(10, 0, FileKind::terminal, "/dev/pts/3", O_RDWR),
                            file(10, 1, FileKind::terminal, "/dev/pts/3", O_RDWR),
                            file(10, 2, FileKind::terminal, "/dev/pts/3", O_RDWR)},
                           10, o);
  REQUIRE(plan);
  REQUIRE(plan->inherit.size() == 1);
  CHECK(target_of(plan->inherit[0].fd.get()) == o.stdout_file);
}

TEST_CASE("--detach: stdin /dev/null, stdout to the log") {
  ScratchDir d;
  StreamOptions o;
  o.detach = true;
  o.detach_log = (d / "detached.log").string();
  auto plan = plan_streams({file(10, 0, FileKind::pipe, "pipe:[1]", O_RDONLY),
                            file(10, 1, FileKind::pipe, "pipe:[2]", O_WRONLY)},
                           10, o);
  REQUIRE(plan);
  REQUIRE(plan->inherit.size() == 2);
  CHECK(target_of(plan->inherit[0].fd.get()) == "/dev/null");
  CHECK(target_of(plan->inherit[1].fd.get()) == o.detach_log);
}

TEST_CASE("a pipe that is not a stream of the root gets /dev/null and a warning") {
  auto plan = plan_streams({file(11, 7, FileKind::pipe, "pipe:[9]", O_WRONLY)}, 10, {});
  REQUIRE(plan);
  REQUIRE(plan->inherit.size() == 1);
  CHECK(target_of(plan->inherit[0].fd.get()) == "/dev/null");
  REQUIRE(plan->warnings.size() == 1);
  CHECK(plan->warnings[0].find("pipe:[9]") != std::string::npos);
}

TEST_CASE("a pipe within the tree is left to CRIU") {
  auto plan = plan_streams({file(10, 1, FileKind::pipe, "pipe:[5]", O_WRONLY, 0, false)}, 10, {});
  REQUIRE(plan);
  CHECK(plan->inherit.empty());
}

TEST_CASE("root opens a recorded path as the process's owner, never as root") {
  if (geteuid() != 0) return;  // the case exists only for root
  ScratchDir d;
  // A directory only root may write: the target a symlink on the recorded path would lead to.
  std::filesystem::path rootonly = d / "rootonly";
  std::filesystem::create_directory(rootonly);
  chmod(d.path().c_str(), 0755);
  chmod(rootonly.c_str(), 0755);
  std::string log = (rootonly / "train.log").string();
  StreamOptions o;
  o.owner_uid = 65534;  // nobody
  o.owner_gid = 65534;
  auto refused = plan_streams({file(10, 1, FileKind::regular, log, O_WRONLY, 5)}, 10, o);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("Permission denied") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(log));
  // Root's own files (--stdout) are still root's to name, and root is root again afterwards.
  o.stdout_file = (rootonly / "mine.log").string();
  auto mine = plan_streams({file(10, 1, FileKind::pipe, "pipe:[3]", O_WRONLY)}, 10, o);
  REQUIRE(mine);
  CHECK(std::filesystem::exists(o.stdout_file));
  // A file the owner may create is created as the owner.
  std::filesystem::path shared = d / "shared";
  std::filesystem::create_directory(shared);
  chmod(shared.c_str(), 0777);
  std::string theirs = (shared / "theirs.log").string();
  StreamOptions as_nobody;
  as_nobody.owner_uid = 65534;
  as_nobody.owner_gid = 65534;
  auto created = plan_streams({file(10, 1, FileKind::regular, theirs, O_WRONLY, 0)}, 10, as_nobody);
  REQUIRE(created);
  struct stat st {};
  REQUIRE(::stat(theirs.c_str(), &st) == 0);
  CHECK(st.st_uid == 65534u);
}
