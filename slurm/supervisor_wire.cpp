// supervisor_wire.h.
#include "supervisor_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <sstream>

namespace gcr::slurm {
namespace {

constexpr const char* kVersion = "gcr-slurm/1";

bool same_key(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) d |= a[i] ^ b[i];
  return d == 0 && !a.empty();
}

bool whole_number(const std::string& w, unsigned long max, unsigned long& out) {
  if (w.empty() || w.size() > 10 || w.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::strtoul(w.c_str(), nullptr, 10);
  return out <= max;
}

}  // namespace

std::string encode_registration(const std::string& key, const Registration& r) {
  return std::string(kVersion) + " " + key + " register " + std::to_string(r.step) + " " +
         std::to_string(r.procid) + " " + std::to_string(r.ntasks) + " " + std::to_string(r.node) +
         " " + std::to_string(r.pid) + " " + r.gcrd + "\n";
}

Result<Registration> decode_registration(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string version, their_key, verb, step, procid, ntasks, node, pid, gcrd, rest;
  in >> version >> their_key >> verb >> step >> procid >> ntasks >> node >> pid >> gcrd;
  if (version != kVersion)
    return Error{Errc::protocol, "a task spoke '" + version.substr(0, 16) + "', not " + kVersion +
                                     " (a gcr of another version in the job?)"};
  if (!same_key(their_key, key))
    return Error{Errc::permission_denied, "a registration with the wrong key was refused"};
  Registration r;
  unsigned long v[5];
  if (verb != "register" || !whole_number(step, 0xffffffffUL, v[0]) ||
      !whole_number(procid, 1u << 24, v[1]) || !whole_number(ntasks, 1u << 24, v[2]) ||
      !whole_number(node, 1u << 24, v[3]) || !whole_number(pid, 1u << 22, v[4]) || v[4] == 0 ||
      v[1] >= v[2] || gcrd.empty() || gcrd.size() > 300 || (in >> rest))
    return Error{Errc::invalid_argument, "a malformed registration: '" + line.substr(0, 120) + "'"};
  r.step = static_cast<std::uint32_t>(v[0]);
  r.procid = static_cast<unsigned>(v[1]);
  r.ntasks = static_cast<unsigned>(v[2]);
  r.node = static_cast<unsigned>(v[3]);
  r.pid = static_cast<pid_t>(v[4]);
  r.gcrd = gcrd;
  return r;
}

std::string encode_answer(const Answer& a) {
  switch (a.kind) {
    case Answer::Kind::run:
      return "run\n";
    case Answer::Kind::restored:
      return "restored " + std::to_string(a.pid) + "\n";
    case Answer::Kind::error:
      break;
  }
  std::string m = a.message;
  for (char& c : m)
    if (c == '\n') c = ' ';
  return "error " + m + "\n";
}

Result<Answer> decode_answer(const std::string& line) {
  Answer a;
  unsigned long pid = 0;
  if (line == "run") return a;
  if (line.starts_with("restored ") && whole_number(line.substr(9), 1u << 22, pid) && pid) {
    a.kind = Answer::Kind::restored;
    a.pid = static_cast<pid_t>(pid);
    return a;
  }
  if (line.starts_with("error ")) {
    a.kind = Answer::Kind::error;
    a.message = line.substr(6);
    return a;
  }
  return Error{Errc::invalid_argument,
               "the job's supervisor answered '" + line.substr(0, 80) + "'"};
}

Result<std::string> read_line(int fd, std::size_t max, int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  std::string out;
  for (;;) {
    int wait = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      if (left.count() <= 0) return Error{Errc::timeout, "no whole line within the time"};
      wait = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, wait);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("poll");
    if (n == 0) continue;
    char c;
    ssize_t got = ::read(fd, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error("read");
    if (got == 0) return Error{Errc::io_error, "the other end closed the connection"};
    if (c == '\n') return out;
    if (out.size() == max) return Error{Errc::invalid_argument, "a line longer than allowed"};
    out.push_back(c);
  }
}

Status write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("send");
    done += static_cast<std::size_t>(n);
  }
  return ok();
}

}  // namespace gcr::slurm
