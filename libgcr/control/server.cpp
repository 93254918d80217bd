// The process's side of the mailbox (docs/protocol.md §2): wait for a request, connect to the
// caller's rendezvous socket, check who the caller is, serve the session, hang up, wait again.
// One caller at a time, on one thread, forever. Runs inside the user's program: it throws nothing
// out, raises no signals, and only reports through ServerOptions::log.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "channel.h"
#include "gcr/control.h"
#include "mailbox.h"
#include "rendezvous.h"
#include "session.h"

namespace gcr::control {

Result<std::unique_ptr<Server>> Server::create(ServerOptions options) {
  std::unique_ptr<Server> s(new Server());
  s->options_ = std::move(options);
  MailboxMap map;
  GCR_TRY_ASSIGN(s->mailbox_fd_, create_mailbox(&map));
  s->box_ = map.release();
  return s;
}

Server::~Server() {
  if (box_) munmap(box_, kMailboxBytes);
}

void Server::log(std::string_view message) noexcept {
  if (options_.log) options_.log(message);
}

void Server::finish_request(std::uint32_t seq, Errc code, std::string_view message) noexcept {
  box_->result = static_cast<std::int32_t>(code);
  std::size_t n = std::min(message.size(), kMailboxMessageBytes - 1);
  std::memcpy(box_->message, message.data(), n);
  box_->message[n] = 0;
  box_->response_seq.store(seq, std::memory_order_release);
  futex_wake(&box_->response_seq);
}

void Server::serve_forever(Handler& handler) noexcept {
  // Requests made before this thread started are still answered: start from the last response.
  std::uint32_t served = box_->response_seq.load(std::memory_order_acquire);
  while (!abandoned_) {
    std::uint32_t seq = box_->request_seq.load(std::memory_order_acquire);
    if (seq == served) {
      futex_wait(&box_->request_seq, seq, -1);
      continue;
    }
    served = seq;
    serve_request(handler, seq);
  }
}

void Server::serve_request(Handler& handler, std::uint32_t seq) noexcept {
  Channel channel;
  try {
    // The caller wrote the name under its lock before bumping request_seq (acquire above). A caller
    // that died mid-write can leave a torn name: it fails the format check or names a socket that
    // nobody listens on; a caller only ever accepts the process it asked for.
    std::uint32_t len = box_->rendezvous_bytes;
    char name_buf[kRendezvousMaxBytes];
    std::string_view name;
    if (len <= kRendezvousMaxBytes) {
      std::memcpy(name_buf, box_->rendezvous, len);
      name = std::string_view(name_buf, len);
    }
    if (!is_rendezvous_name(name)) {
      finish_request(seq, Errc::protocol, "the mailbox request names no gcr rendezvous socket");
      return;
    }
    Result<UniqueFd> conn = make_error(Errc::internal, "not connected");
    {
      std::lock_guard lock(fork_mu_);  // the socket and session_fd_ appear together
      conn = connect_rendezvous(name);
      if (conn) session_fd_ = conn->get();
    }
    if (!conn) {
      std::string why = "could not connect to @" + std::string(name) + ": " + conn.error().message +
                        " (caller and process must share a network namespace)";
      finish_request(seq, conn.error().code, why);
      log(why);
      return;
    }
    channel = Channel(std::move(*conn));
    finish_request(seq, Errc::ok, "");

    Result<PeerCred> cred = peer_cred(channel.fd());
    uid_t owner = geteuid();
    if (!cred || !caller_allowed(cred->uid, owner)) {
      Error e = !cred ? std::move(cred).error()
                      : make_error(Errc::permission_denied,
                                   "permission denied: only root or the process owner (uid " +
                                       std::to_string(owner) +
                                       ") may control this process; the caller runs as uid " +
                                       std::to_string(cred->uid));
      log("refused a control connection: " + e.message);
      (void)channel.send(MsgType::error, encode_error(e), {}, deadline_after(options_.io_timeout));
    } else {
      SessionOptions so{options_.software, options_.log, options_.io_timeout,
                        static_cast<std::uint32_t>(getpid()), static_cast<std::uint32_t>(owner)};
      serve_session(channel, handler, so);
    }
  } catch (...) {  // std::bad_alloc: give up on this caller, never on the process
    log("control session abandoned: out of memory");
  }
  std::lock_guard lock(fork_mu_);
  channel.close();
  session_fd_ = -1;
}

void Server::prepare_fork() noexcept {
  fork_mu_.lock();
  fork_locked_ = true;
}

void Server::after_fork_parent() noexcept {
  if (!fork_locked_) return;
  fork_locked_ = false;
  fork_mu_.unlock();
}

void Server::after_fork_child() noexcept {
  // The serving thread does not exist here; what it held is the child's to drop. Without
  // prepare_fork this is best effort: a connection being opened at the instant of fork may leak.
  abandoned_ = true;
  if (session_fd_ >= 0) ::close(session_fd_);
  session_fd_ = -1;
  if (box_) munmap(box_, kMailboxBytes);
  box_ = nullptr;
  mailbox_fd_.reset();
  if (fork_locked_) {
    fork_locked_ = false;
    fork_mu_.unlock();
  }
}

}  // namespace gcr::control
