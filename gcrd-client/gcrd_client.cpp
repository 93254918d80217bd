#include "gcrd_client.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gcr/private_dir.h"
#include "gcr/settings.h"
#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"

extern char** environ;

namespace gcr::gcrd {
namespace fs = std::filesystem;

fs::path default_socket_path() {
  return default_socket_path(settings().gcrd_socket);
}

fs::path default_socket_path(const std::optional<fs::path>& configured) {
  if (configured && !configured->empty()) return *configured;
  if (geteuid() == 0) return "/run/gcr/gcrd.sock";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return fs::path(x) / "gcr/gcrd.sock";
  return "/tmp/gcr-" + std::to_string(geteuid()) + "/gcrd.sock";
}

namespace {

Result<int> try_connect(const fs::path& socket) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.string().size() >= sizeof addr.sun_path)
    return Error{Errc::invalid_argument, "gcrd socket path too long: " + socket.string()};
  std::strcpy(addr.sun_path, socket.c_str());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return errno_error("connecting to gcrd at " + socket.string());
  return fd.release();
}

// The process listening must be root or this user: a root client talks only to a root gcrd.
Result<int> checked_peer(UniqueFd fd, const fs::path& socket) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return errno_error("SO_PEERCRED on gcrd's socket " + socket.string());
  if (cred.uid != 0 && cred.uid != geteuid())
    return Error{Errc::permission_denied, "the gcrd listening on " + socket.string() +
                                              " runs as uid " + std::to_string(cred.uid) +
                                              ", neither root nor uid " +
                                              std::to_string(geteuid()) + ": not talking to it"};
  return fd.release();
}

Status start_gcrd(const fs::path& socket, const fs::path& binary,
                  const std::map<std::string, std::string>& env) {
  if (access(binary.c_str(), X_OK) != 0)
    return Error{Errc::not_found, "gcrd is not running and " + binary.string() +
                                      " cannot be started; run 'gcr daemon' yourself"};
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && env.count(kv.substr(0, eq))) continue;
    envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::string sock = socket.string(), bin = binary.string();
  std::vector<char*> argv = {bin.data(), const_cast<char*>("--socket"), sock.data(),
                             const_cast<char*>("--detach"), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid;
  int rc = posix_spawn(&pid, bin.c_str(), &actions, &attr, argv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return errno_error("starting " + bin, rc);
  int status;
  waitpid(pid, &status, 0);  // gcrd --detach forks and its parent exits once it listens
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Error{Errc::io_error, "gcrd failed to start (exit " +
                                     std::to_string(WEXITSTATUS(status)) +
                                     "); run 'gcr daemon' in a terminal to see why"};
  return ok();
}

Result<std::string> read_line(int fd) {
  std::string line;
  char c;
  for (;;) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("reading from gcrd");
    if (n == 0)
      return Error{Errc::io_error,
                   "gcrd closed the connection before answering (did it crash? see its log)"};
    if (c == '\n') return line;
    line += c;
  }
}

}  // namespace

Result<int> connect_running(const fs::path& socket) {
  // A socket in a directory another user can write (or made) may be theirs, and so may the
  // "gcrd" behind it: refuse before sending it anything.
  if (Status s = io::check_trusted_parent(socket, geteuid());
      !s && s.error().code != Errc::not_found)
    return Error{s.error().code,
                 "not connecting to gcrd at " + socket.string() + ": " + s.error().message};
  GCR_TRY_ASSIGN(int fd, try_connect(socket));
  return checked_peer(UniqueFd(fd), socket);
}

Result<int> connect_or_start(const fs::path& socket, const fs::path& binary,
                             const std::map<std::string, std::string>& env) {
  auto running = connect_running(socket);
  if (running) return running;
  if (running.error().code == Errc::permission_denied) return std::move(running).error();
  GCR_TRY(start_gcrd(socket, binary, env));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto fd = try_connect(socket);
    if (fd) return checked_peer(UniqueFd(*fd), socket);
    if (std::chrono::steady_clock::now() > deadline) return std::move(fd).error();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::map<std::string, std::string>> call(
    int fd, const std::string& verb, const std::map<std::string, std::string>& fields,
    const std::function<void(const std::string&)>& progress, const std::vector<int>& files,
    bool* answered) {
  if (answered) *answered = false;
  std::string req = std::string(kProtocol) + " " + verb + " " + encode_fields(fields) + "\n";
  std::size_t first = 0;
  if (!files.empty()) {
    // The files ride on the request's first byte.
    if (files.size() > 64) return Error{Errc::invalid_argument, "more than 64 files for gcrd"};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * files.size()));
    iovec iov{req.data(), 1};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* h = CMSG_FIRSTHDR(&msg);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * files.size());
    std::memcpy(CMSG_DATA(h), files.data(), sizeof(int) * files.size());
    ssize_t n;
    while ((n = ::sendmsg(fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (n != 1) return errno_error("sending files to gcrd");
    first = 1;
  }
  for (std::size_t done = first; done < req.size();) {
    ssize_t n = ::send(fd, req.data() + done, req.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("writing to gcrd");
    done += static_cast<std::size_t>(n);
  }
  return read_reply(fd, progress, answered);
}

Result<std::map<std::string, std::string>> read_reply(
    int fd, const std::function<void(const std::string&)>& progress, bool* answered) {
  if (answered) *answered = false;
  for (;;) {
    GCR_TRY_ASSIGN(std::string line, read_line(fd));
    if (line.rfind("progress ", 0) == 0) {
      if (progress) progress(decode_value(line.substr(9)));
    } else if (line.rfind("ok", 0) == 0) {
      return decode_fields(line.size() > 3 ? line.substr(3) : "");
    } else if (line.rfind("error ", 0) == 0) {
      if (answered) *answered = true;
      std::string rest = line.substr(6);
      auto sp = rest.find(' ');
      int code = std::atoi(rest.substr(0, sp).c_str());
      return Error{static_cast<Errc>(code),
                   decode_value(sp == std::string::npos ? "" : rest.substr(sp + 1))};
    } else {
      return Error{Errc::protocol, "gcrd sent an unexpected line: " + line};
    }
  }
}

std::uint64_t field_u64(const std::map<std::string, std::string>& reply, const std::string& key) {
  auto it = reply.find(key);
  return it == reply.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

}  // namespace gcr::gcrd
