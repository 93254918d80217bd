// The caller's side (docs/protocol.md §2, §5-§6): Client::connect finds and locks the mailbox,
// listens on a rendezvous socket, asks the process to connect, and authenticates it; the methods
// are one request and its reply each, park and unpark in batches. A transport failure closes the
// connection for good (the stream can no longer be trusted); an error reply leaves it usable.
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "channel.h"
#include "gcr/control.h"
#include "mailbox.h"
#include "messages.h"
#include "procfs.h"
#include "rendezvous.h"

namespace gcr::control {

namespace {

std::string who(pid_t pid) {
  return "process " + std::to_string(pid);
}

// Waits for the session lock (flock on the mailbox; it dies with its holder).
Status lock_session(int fd, const MailboxLayout& box, pid_t pid, Deadline deadline) {
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return ok();
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return errno_error(who(pid) + ": flock on its gcr-control mailbox");
    if (process_life(pid) == ProcessLife::exited || process_life(pid) == ProcessLife::absent)
      return make_error(Errc::not_found, who(pid) + " has exited");
    if (Clock::now() >= deadline) {
      std::uint32_t holder = box.caller_pid;
      return make_error(Errc::busy, who(pid) + " is being controlled by another gcr command" +
                                        (holder ? " (pid " + std::to_string(holder) + ")" : "") +
                                        "; try again when it has finished");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Errc errc_from_wire(std::int32_t v) {
  if (v <= 0 || v > static_cast<std::int32_t>(Errc::already_exists)) return Errc::io_error;
  return static_cast<Errc>(v);
}

}  // namespace

// Client's request/reply plumbing, with access to its members.
struct ClientExchange {
  static Status require_open(const Client& c, const char* what) {
    if (!c.channel_)
      return make_error(Errc::io_error, who(c.pid_) + ": " + what +
                                            ": the control connection is closed; connect again");
    return ok();
  }

  // A transport failure: the connection is dropped (the server then resumes a quiesced process
  // and maps back an unconfirmed park: Note [Nobody left behind]).
  static Error broken(Client& c, const Error& e, const char* what,
                      std::chrono::milliseconds waited) {
    c.channel_.reset();
    if (is_peer_closed(e))
      return make_error(Errc::io_error, who(c.pid_) + " closed its control connection during " +
                                            what + " (did it exit?)");
    if (e.code == Errc::timeout)
      return make_error(Errc::timeout, who(c.pid_) + " did not answer " + what + " within " +
                                           std::to_string(waited.count()) +
                                           " ms; the connection was dropped");
    return make_error(e.code, who(c.pid_) + ": " + what + ": " + e.message);
  }

  static Status send(Client& c, MsgType type, std::span<const std::uint8_t> payload,
                     std::span<const int> fds, const char* what) {
    GCR_TRY(require_open(c, what));
    Status s = c.channel_->send(type, payload, fds, deadline_after(c.reply_timeout_));
    if (!s) return broken(c, s.error(), what, c.reply_timeout_);
    return ok();
  }

  static Result<Message> recv(Client& c, std::size_t max_fds, const char* what,
                              std::chrono::milliseconds extra = {}) {
    GCR_TRY(require_open(c, what));
    auto wait = c.reply_timeout_ + extra;
    Result<Message> m = c.channel_->recv(deadline_after(wait), max_fds);
    if (!m) return broken(c, m.error(), what, wait);
    return m;
  }

  // A reply that is not what `what` expects: an error reply passes the server's error on (the
  // connection stays usable); anything else is a protocol violation.
  static Error unexpected(Client& c, const Message& m, const char* what) {
    if (m.type == MsgType::error) {
      Result<ErrorReply> e = decode_error(m.payload);
      if (e) return make_error(e->error.code, who(c.pid_) + ": " + what + ": " + e->error.message);
      return broken(c, e.error(), what, {});
    }
    return broken(c,
                  make_error(Errc::protocol, "unexpected " + msg_type_name(m.type) + " in reply"),
                  what, {});
  }

  static Status expect_ok(Client& c, const Message& m, MsgType request, const char* what) {
    if (m.type != MsgType::ok) return unexpected(c, m, what);
    Result<MsgType> answered = decode_ok(m.payload);
    if (!answered) return broken(c, answered.error(), what, {});
    if (*answered != request)
      return broken(c,
                    make_error(Errc::protocol, "ok answers " + msg_type_name(*answered) + ", not " +
                                                   msg_type_name(request)),
                    what, {});
    return ok();
  }

  static Status call_for_ok(Client& c, MsgType type, std::span<const std::uint8_t> payload,
                            const char* what, std::chrono::milliseconds extra = {}) {
    GCR_TRY(send(c, type, payload, {}, what));
    GCR_TRY_ASSIGN(Message m, recv(c, 0, what, extra));
    return expect_ok(c, m, type, what);
  }
};

Client::Client() noexcept = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Client> Client::connect(pid_t pid, std::chrono::milliseconds timeout) {
  GCR_TRY_ASSIGN(UniqueFd mailbox, open_mailbox(pid));
  return connect_mailbox(pid, std::move(mailbox), timeout);
}

Result<Client> Client::connect_mailbox(pid_t pid, UniqueFd mailbox,
                                       std::chrono::milliseconds timeout) {
  Deadline deadline = deadline_after(timeout);
  Result<MailboxMap> mapped = MailboxMap::map(mailbox.get());
  if (!mapped) return std::move(mapped).context(who(pid) + ": its gcr-control mailbox").error();
  MailboxLayout& box = *mapped->get();
  GCR_TRY(check_mailbox(box, pid));
  GCR_TRY(lock_session(mailbox.get(), box, pid, deadline));

  // This caller alone writes the request fields now (docs/protocol.md §2).
  Result<Rendezvous> rv = Rendezvous::listen(pid);
  if (!rv) return std::move(rv).context("listening for " + who(pid)).error();
  box.caller_pid = static_cast<std::uint32_t>(getpid());
  std::memset(box.rendezvous, 0, sizeof box.rendezvous);
  std::memcpy(box.rendezvous, rv->name().data(), rv->name().size());
  box.rendezvous_bytes = static_cast<std::uint32_t>(rv->name().size());
  std::uint32_t seq = box.request_seq.load(std::memory_order_relaxed) + 1;
  box.request_seq.store(seq, std::memory_order_release);
  futex_wake(&box.request_seq);

  auto still_waiting = [&]() -> Status {
    if (box.response_seq.load(std::memory_order_acquire) == seq && box.result != 0) {
      char text[kMailboxMessageBytes];
      std::memcpy(text, box.message, sizeof text);
      text[sizeof text - 1] = 0;
      return make_error(errc_from_wire(box.result),
                        who(pid) + " could not reach this gcr: " + std::string(text));
    }
    ProcessLife life = process_life(pid);
    if (life == ProcessLife::exited || life == ProcessLife::absent)
      return make_error(Errc::not_found, who(pid) + " exited before answering");
    return ok();
  };
  Result<UniqueFd> sock = rv->accept_from(pid, deadline, still_waiting);
  if (!sock) {
    if (sock.error().code != Errc::timeout) return std::move(sock).error();
    if (process_life(pid) == ProcessLife::stopped)
      return make_error(Errc::timeout, who(pid) +
                                           " is stopped (SIGSTOP or a debugger) and cannot answer; "
                                           "continue it ('kill -CONT " +
                                           std::to_string(pid) + "') and try again");
    return make_error(Errc::timeout,
                      who(pid) + " did not answer on its gcr-control mailbox within " +
                          std::to_string(timeout.count()) +
                          " ms; its agent thread is not running (is the process frozen, or in "
                          "the middle of a checkpoint?)");
  }

  Client c;
  c.pid_ = pid;
  c.mailbox_ = std::move(mailbox);
  c.channel_ = std::make_unique<Channel>(std::move(*sock));
  Result<Message> hello = c.channel_->recv(deadline, 0);
  if (!hello) return ClientExchange::broken(c, hello.error(), "connect", timeout);
  if (hello->type != MsgType::hello) {
    Error e = ClientExchange::unexpected(c, *hello, "connect");
    c.channel_.reset();
    return e;
  }
  Result<Hello> h = decode_hello(hello->payload);
  if (!h) return ClientExchange::broken(c, h.error(), "connect", timeout);
  c.server_ = ServerInfo{hello->minor, h->pid, h->state, h->uid, std::move(h->software)};
  return c;
}

Result<StatusInfo> Client::status() {
  GCR_TRY(ClientExchange::send(*this, MsgType::status, {}, {}, "status"));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, "status"));
  if (m.type != MsgType::status_reply) return ClientExchange::unexpected(*this, m, "status");
  Result<StatusInfo> s = decode_status_reply(m.payload);
  if (!s) return ClientExchange::broken(*this, s.error(), "status", {});
  return s;
}

Result<std::vector<RegionRecord>> Client::regions() {
  GCR_TRY(ClientExchange::send(*this, MsgType::regions, {}, {}, "regions"));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, "regions"));
  if (m.type != MsgType::regions_reply) return ClientExchange::unexpected(*this, m, "regions");
  Result<std::vector<RegionRecord>> r = decode_regions_reply(m.payload);
  if (!r) return ClientExchange::broken(*this, r.error(), "regions", {});
  return r;
}

Status Client::quiesce(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0 || timeout.count() > UINT32_MAX)
    return make_error(Errc::invalid_argument, "quiesce timeout out of range");
  auto payload = encode_quiesce(static_cast<std::uint32_t>(timeout.count()));
  return ClientExchange::call_for_ok(*this, MsgType::quiesce, payload, "quiesce", timeout);
}

Status Client::resume() {
  return ClientExchange::call_for_ok(*this, MsgType::resume, {}, "resume");
}

Result<std::vector<ParkedRegion>> Client::park() {
  constexpr const char* what = "park";
  GCR_TRY(ClientExchange::send(*this, MsgType::park, {}, {}, what));
  std::vector<ParkedRegion> out;
  std::uint32_t total = 0;
  std::uint32_t expected = 0;
  do {
    GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, kMaxFdsPerMessage, what));
    if (m.type != MsgType::parked) return ClientExchange::unexpected(*this, m, what);
    // Any failure from here drops the connection without park_done: the process maps its regions
    // back (Note [Nobody left behind]), and `out` closes this side's copies.
    Result<RegionBatch> b = decode_region_batch(MsgType::parked, m.payload);
    if (!b) return ClientExchange::broken(*this, b.error(), what, {});
    if (expected == 0) {
      total = b->total;
      out.reserve(total);
    }
    std::string bad;
    if (b->total != total)
      bad = "batch total changed from " + std::to_string(total) + " to " + std::to_string(b->total);
    else if (b->first != expected)
      bad =
          "batch starts at " + std::to_string(b->first) + ", expected " + std::to_string(expected);
    else if (m.fds.size() != b->records.size())
      bad = std::to_string(b->records.size()) + " records came with " +
            std::to_string(m.fds.size()) + " fds";
    if (!bad.empty())
      return ClientExchange::broken(*this, make_error(Errc::protocol, bad), what, {});
    for (std::size_t i = 0; i < b->records.size(); ++i)
      out.push_back(ParkedRegion{b->records[i], std::move(m.fds[i])});
    expected += static_cast<std::uint32_t>(b->records.size());
  } while (expected < total);

  // park_done hands the memory over: once it is sent, these fds are the only references, so they
  // are returned even if the courtesy ok that follows does not arrive (close() will say so).
  GCR_TRY(ClientExchange::send(*this, MsgType::park_done, {}, {}, what));
  Result<Message> reply = ClientExchange::recv(*this, 0, what);
  if (reply) (void)ClientExchange::expect_ok(*this, *reply, MsgType::park_done, what);
  return out;
}

Status Client::unpark(const std::vector<ParkedRegion>& regions) {
  constexpr const char* what = "unpark";
  GCR_TRY(ClientExchange::require_open(*this, what));
  if (regions.size() > kMaxRegions)
    return make_error(Errc::invalid_argument, std::to_string(regions.size()) +
                                                  " regions exceed the protocol's limit of " +
                                                  std::to_string(kMaxRegions));
  auto total = static_cast<std::uint32_t>(regions.size());
  std::uint32_t first = 0;
  do {
    RegionBatch batch{total, first, {}};
    std::vector<int> fds;
    for (std::uint32_t i = first; i < total && batch.records.size() < kMaxFdsPerMessage; ++i) {
      if (!regions[i].fd)
        return make_error(Errc::invalid_argument,
                          "unpark: region " + std::to_string(i) + " has no fd");
      batch.records.push_back(regions[i].region);
      fds.push_back(regions[i].fd.get());
    }
    GCR_TRY_ASSIGN(std::vector<std::uint8_t> payload, encode_region_batch(batch));
    Status s = channel_->send(MsgType::unpark, payload, fds, deadline_after(reply_timeout_));
    if (!s) {
      // The server hangs up after refusing a batch; its reason is worth more than EPIPE.
      Result<Message> why = channel_->recv(deadline_after(std::chrono::seconds(1)), 0);
      if (why && why->type == MsgType::error) {
        Error e = ClientExchange::unexpected(*this, *why, what);
        channel_.reset();
        return e;
      }
      return ClientExchange::broken(*this, s.error(), what, reply_timeout_);
    }
    first += static_cast<std::uint32_t>(batch.records.size());
  } while (first < total);
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  return ClientExchange::expect_ok(*this, m, MsgType::unpark, what);
}

Status Client::new_epoch(std::string_view checkpoint_id) {
  GCR_TRY_ASSIGN(std::vector<std::uint8_t> payload, encode_new_epoch(checkpoint_id));
  return ClientExchange::call_for_ok(*this, MsgType::new_epoch, payload, "new_epoch");
}

Status Client::cow_begin(int table_fd, std::uint32_t entries, int handover_fd) {
  constexpr const char* what = "cow_begin";
  GCR_TRY_ASSIGN(std::vector<std::uint8_t> payload, encode_cow_begin(entries));
  if (table_fd < 0) return make_error(Errc::invalid_argument, "cow_begin: no table fd");
  const int fds[2] = {table_fd, handover_fd};
  const std::size_t count = handover_fd >= 0 && server_.minor >= 6 ? 2 : 1;
  GCR_TRY(ClientExchange::send(*this, MsgType::cow_begin, payload, {fds, count}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  return ClientExchange::expect_ok(*this, m, MsgType::cow_begin, what);
}

Result<CowCopy> Client::cow_take(std::uint32_t index) {
  constexpr const char* what = "cow_take";
  GCR_TRY(ClientExchange::send(*this, MsgType::cow_take, encode_cow_take(index), {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 1, what));
  if (m.type != MsgType::cow_snapshot) return ClientExchange::unexpected(*this, m, what);
  Result<CowSnapshot> snap = decode_cow_snapshot(m.payload);
  if (!snap) return ClientExchange::broken(*this, snap.error(), what, {});
  if (snap->index != index || m.fds.size() != 1)
    return ClientExchange::broken(
        *this,
        make_error(Errc::protocol, "cow_snapshot for entry " + std::to_string(snap->index) +
                                       " with " + std::to_string(m.fds.size()) +
                                       " fds answered a take of entry " + std::to_string(index)),
        what, {});
  return CowCopy{snap->index, snap->size, std::move(m.fds[0])};
}

Result<std::vector<std::uint64_t>> Client::touch_order() {
  constexpr const char* what = "touch_order";
  GCR_TRY(ClientExchange::send(*this, MsgType::touch_order, {}, {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  if (m.type != MsgType::touch_order_reply) return ClientExchange::unexpected(*this, m, what);
  Result<std::vector<std::uint64_t>> order = decode_touch_order_reply(m.payload);
  if (!order) return ClientExchange::broken(*this, order.error(), what, {});
  return order;
}

Result<std::vector<std::string>> Client::blockers() {
  constexpr const char* what = "blockers";
  GCR_TRY(ClientExchange::send(*this, MsgType::blockers, {}, {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  if (m.type != MsgType::blockers_reply) return ClientExchange::unexpected(*this, m, what);
  Result<std::vector<std::string>> reasons = decode_blockers_reply(m.payload);
  if (!reasons) return ClientExchange::broken(*this, reasons.error(), what, {});
  return reasons;
}

Result<std::vector<ShareRecord>> Client::shares() {
  constexpr const char* what = "shares";
  GCR_TRY(ClientExchange::send(*this, MsgType::shares, {}, {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  if (m.type != MsgType::shares_reply) return ClientExchange::unexpected(*this, m, what);
  Result<std::vector<ShareRecord>> shares = decode_shares_reply(m.payload);
  if (!shares) return ClientExchange::broken(*this, shares.error(), what, {});
  return shares;
}

Result<HostDmaRanges> Client::host_dma() {
  constexpr const char* what = "host_dma";
  GCR_TRY(ClientExchange::send(*this, MsgType::host_dma, {}, {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  if (m.type != MsgType::host_dma_reply) return ClientExchange::unexpected(*this, m, what);
  Result<HostDmaRanges> ranges = decode_host_dma_reply(m.payload);
  if (!ranges) return ClientExchange::broken(*this, ranges.error(), what, {});
  return ranges;
}

Result<CutCounts> Client::cut(CutOp op, std::uint64_t value) {
  constexpr const char* what = "cut";
  auto payload = encode_cut(CutRequest{op, value});
  GCR_TRY(ClientExchange::send(*this, MsgType::cut, payload, {}, what));
  GCR_TRY_ASSIGN(Message m, ClientExchange::recv(*this, 0, what));
  if (m.type != MsgType::cut_reply) return ClientExchange::unexpected(*this, m, what);
  Result<CutCounts> counts = decode_cut_reply(m.payload);
  if (!counts) return ClientExchange::broken(*this, counts.error(), what, {});
  return counts;
}

Status Client::cow_end() {
  return ClientExchange::call_for_ok(*this, MsgType::cow_end, {}, "cow_end");
}

Status Client::close() {
  Status result = ok();
  if (channel_) {
    result = ClientExchange::call_for_ok(*this, MsgType::bye, {}, "close");
    if (result && channel_) {
      // The process closes its end after its reply: wait for it, so that on return the process
      // holds no socket to us (CRIU would refuse to dump it).
      if (Status s = channel_->wait_closed(deadline_after(reply_timeout_)); !s)
        result = make_error(s.error().code, who(pid_) + ": close: " + s.error().message);
    }
    channel_.reset();
  }
  mailbox_.reset();  // releases the session lock
  return result;
}

Result<UniqueFd> Client::close_keeping_lock() {
  UniqueFd mailbox = std::move(mailbox_);  // close() finds none to release
  GCR_TRY(close());
  return mailbox;
}

}  // namespace gcr::control
