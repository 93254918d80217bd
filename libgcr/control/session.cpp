// The server's side of one conversation: dispatch of each request to the Handler, the park and
// unpark transfers in batches, and Note [Nobody left behind] (session.h).
#include "session.h"

#include <utility>

namespace gcr::control {
namespace {

// In a Session method: a request that does not decode gets an error reply, and the session goes on.
#define GCR_TRY_OR_REPLY(expr)                                             \
  do {                                                                     \
    Status gcr_reply_status_ = (expr);                                     \
    if (!gcr_reply_status_) return reply_error(gcr_reply_status_.error()); \
  } while (0)

class Session {
 public:
  Session(Channel& channel, Handler& handler, const SessionOptions& options)
      : ch_(channel), h_(handler), o_(options) {}

  void run() {
    Hello hello{o_.server_pid, h_.status().state, o_.server_uid, o_.software};
    if (Status s = ch_.send(MsgType::hello, encode_hello(hello), {}, io_deadline()); !s) {
      log("could not greet a caller: " + s.error().message);
    } else {
      while (serve_next()) {
      }
    }
    h_.cow_end();                 // a caller that left mid-drain cannot take copies any more
    (void)h_.cut(CutOp::end, 0);  // a cut no one finishes holds no launch back
    resume_if_quiesced();
  }

 private:
  Deadline io_deadline() const { return deadline_after(o_.io_timeout); }

  void log(const std::string& m) {
    if (o_.log) o_.log(m);
  }

  bool reply_error(const Error& e) {
    Status s = ch_.send(MsgType::error, encode_error(e), {}, io_deadline());
    if (!s) log("could not send an error reply: " + s.error().message);
    return s.has_value();
  }

  bool reply_ok(MsgType request) {
    Status s = ch_.send(MsgType::ok, encode_ok(request), {}, io_deadline());
    if (!s) log("could not reply to " + msg_type_name(request) + ": " + s.error().message);
    return s.has_value();
  }

  bool reply(MsgType request, const Status& s) {
    return s ? reply_ok(request) : reply_error(s.error());
  }

  void resume_if_quiesced() {
    if (h_.status().state != ProcessState::quiesced) return;
    if (Status s = h_.resume(); !s)
      log("the caller left the process quiesced and resuming it failed: " + s.error().message);
  }

  // One request; false when the session is over.
  bool serve_next() {
    Result<Message> m = ch_.recv(kNoDeadline, kMaxFdsPerMessage);
    if (!m) {
      const Error& e = m.error();
      if (is_peer_closed(e)) return false;
      log("control connection: " + e.message);
      // A bad header leaves the stream unreadable: say why, then hang up.
      if (e.code == Errc::protocol || e.code == Errc::unsupported) reply_error(e);
      return false;
    }
    Message& msg = *m;
    bool fds_allowed =
        msg.type == MsgType::unpark ||
        (msg.type == MsgType::cow_begin && (msg.fds.size() == 1 || msg.fds.size() == 2));
    if (!msg.fds.empty() && !fds_allowed)  // the fds close with msg
      return reply_error(make_error(Errc::protocol, msg_type_name(msg.type) + " carried fds (" +
                                                        std::to_string(msg.fds.size()) + ")"));
    std::span<const std::uint8_t> p = msg.payload;
    switch (msg.type) {
      case MsgType::status: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        return send_reply(MsgType::status_reply, encode_status_reply(h_.status()));
      }
      case MsgType::regions: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        std::vector<RegionRecord> regions = h_.regions();
        auto payload = encode_regions_reply(regions);
        if (!payload) return reply_error(payload.error());
        return send_reply(MsgType::regions_reply, *payload);
      }
      case MsgType::quiesce: {
        auto timeout_ms = decode_quiesce(p);
        if (!timeout_ms) return reply_error(timeout_ms.error());
        return reply(msg.type, h_.quiesce(std::chrono::milliseconds(*timeout_ms)));
      }
      case MsgType::resume: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        return reply(msg.type, h_.resume());
      }
      case MsgType::park: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        return park();
      }
      case MsgType::unpark:
        return unpark(std::move(msg));
      case MsgType::new_epoch: {
        auto id = decode_new_epoch(p);
        if (!id) return reply_error(id.error());
        return reply(msg.type, h_.new_epoch(*id));
      }
      case MsgType::cow_begin: {
        auto entries = decode_cow_begin(p);
        if (!entries) return reply_error(entries.error());
        if (msg.fds.empty())
          return reply_error(make_error(Errc::protocol, "cow_begin came without the table's fd"));
        UniqueFd handover = msg.fds.size() == 2 ? std::move(msg.fds[1]) : UniqueFd();
        return reply(msg.type, h_.cow_begin(std::move(msg.fds[0]), std::move(handover), *entries));
      }
      case MsgType::cow_take: {
        auto index = decode_cow_take(p);
        if (!index) return reply_error(index.error());
        Result<CowCopy> copy = h_.cow_take(*index);
        if (!copy) return reply_error(copy.error());
        auto payload = encode_cow_snapshot(CowSnapshot{copy->index, copy->size});
        if (!payload) return reply_error(payload.error());
        int fd = copy->fd.get();
        Status s = ch_.send(MsgType::cow_snapshot, *payload, {&fd, 1}, io_deadline());
        if (!s) log("could not send cow_snapshot: " + s.error().message);
        return s.has_value();
      }
      case MsgType::touch_order: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        std::vector<std::uint64_t> order = h_.touch_order();
        auto payload = encode_touch_order_reply(order);
        if (!payload) return reply_error(payload.error());
        return send_reply(MsgType::touch_order_reply, *payload);
      }
      case MsgType::blockers: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        auto payload = encode_blockers_reply(h_.blockers());
        if (!payload) return reply_error(payload.error());
        return send_reply(MsgType::blockers_reply, *payload);
      }
      case MsgType::shares: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        auto payload = encode_shares_reply(h_.shares());
        if (!payload) return reply_error(payload.error());
        return send_reply(MsgType::shares_reply, *payload);
      }
      case MsgType::host_dma: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        auto payload = encode_host_dma_reply(h_.host_dma());
        if (!payload) return reply_error(payload.error());
        return send_reply(MsgType::host_dma_reply, *payload);
      }
      case MsgType::cut: {
        auto request = decode_cut(p);
        if (!request) return reply_error(request.error());
        return send_reply(MsgType::cut_reply,
                          encode_cut_reply(h_.cut(request->op, request->value)));
      }
      case MsgType::cow_end: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        h_.cow_end();
        return reply_ok(msg.type);
      }
      case MsgType::bye: {
        GCR_TRY_OR_REPLY(decode_empty(msg.type, p));
        resume_if_quiesced();  // before the reply: once the caller sees it, the server is done
        reply_ok(msg.type);
        return false;
      }
      case MsgType::park_done:
        return reply_error(make_error(Errc::protocol, "park_done without a park in progress"));
      case MsgType::hello:
      case MsgType::error:
      case MsgType::ok:
      case MsgType::status_reply:
      case MsgType::regions_reply:
      case MsgType::parked:
      case MsgType::cow_snapshot:
      case MsgType::touch_order_reply:
      case MsgType::blockers_reply:
      case MsgType::shares_reply:
      case MsgType::cut_reply:
      case MsgType::host_dma_reply:
        return reply_error(
            make_error(Errc::protocol, msg_type_name(msg.type) + " is not a request"));
    }
    return reply_error(make_error(
        Errc::unsupported,
        "this process's gcr speaks control protocol " + std::to_string(kProtocolMajor) + "." +
            std::to_string(kProtocolMinor) + " and does not know request " +
            msg_type_name(msg.type) + "; use the gcr that matches the process's interposer"));
  }

  bool send_reply(MsgType type, std::span<const std::uint8_t> payload) {
    Status s = ch_.send(type, payload, {}, io_deadline());
    if (!s) log("could not send " + msg_type_name(type) + ": " + s.error().message);
    return s.has_value();
  }

  // Maps parked regions back after a park the caller did not confirm. Leaves `regions` empty.
  void give_back(std::vector<ParkedRegion>& regions, const std::string& why) {
    std::size_t n = regions.size();
    Status s = h_.unpark(std::move(regions));
    regions.clear();
    log("park not confirmed (" + why + "); mapped " + std::to_string(n) + " regions back");
    if (!s)
      log("mapping parked regions back failed, their contents are lost: " + s.error().message);
  }

  bool park() {
    Result<std::vector<ParkedRegion>> parked = h_.park();
    if (!parked) return reply_error(parked.error());
    std::vector<ParkedRegion>& regions = *parked;
    // From here until park_done, `regions` holds the only references to the memory: even an
    // exception (std::bad_alloc) must give it back rather than close the fds while unwinding.
    try {
      return transfer_park(regions);
    } catch (...) {
      if (!regions.empty()) (void)h_.unpark(std::move(regions));
      throw;
    }
  }

  bool transfer_park(std::vector<ParkedRegion>& regions) {
    if (std::size_t n = regions.size(); n > kMaxRegions) {
      give_back(regions, "too many regions");
      return reply_error(make_error(Errc::unsupported,
                                    std::to_string(n) + " regions exceed the protocol's limit of " +
                                        std::to_string(kMaxRegions)));
    }
    auto total = static_cast<std::uint32_t>(regions.size());
    std::uint32_t first = 0;
    do {
      RegionBatch batch{total, first, {}};
      std::vector<int> fds;
      for (std::uint32_t i = first; i < total && batch.records.size() < kMaxFdsPerMessage; ++i) {
        batch.records.push_back(regions[i].region);
        fds.push_back(regions[i].fd.get());
      }
      Result<std::vector<std::uint8_t>> payload = encode_region_batch(batch);
      Status sent = payload ? ch_.send(MsgType::parked, *payload, fds, io_deadline())
                            : Status(payload.error());
      if (!sent) {
        give_back(regions,
                  "sending batch at " + std::to_string(first) + " failed: " + sent.error().message);
        if (sent.error().code == Errc::invalid_argument) reply_error(sent.error());
        return false;
      }
      first += static_cast<std::uint32_t>(batch.records.size());
    } while (first < total);

    Result<Message> ack = ch_.recv(io_deadline(), 0);
    if (ack && ack->type == MsgType::park_done && decode_empty(ack->type, ack->payload)) {
      // The caller holds every fd now; the process keeps none (CRIU must not dump the memory).
      regions.clear();
      reply_ok(MsgType::park_done);
      return true;
    }
    std::string why =
        ack ? "got " + msg_type_name(ack->type) + " instead of park_done" : ack.error().message;
    give_back(regions, why);
    if (ack)
      reply_error(make_error(
          Errc::protocol, "park not confirmed (" + why + "); the process mapped its regions back"));
    return false;
  }

  bool unpark(Message first_batch) {
    std::vector<ParkedRegion> all;
    std::uint32_t total = 0;
    std::uint32_t expected = 0;
    Message cur = std::move(first_batch);
    for (;;) {
      Result<RegionBatch> batch = decode_region_batch(MsgType::unpark, cur.payload);
      if (!batch) {
        reply_error(batch.error());
        return false;  // the rest of the caller's batches would be read as requests
      }
      if (expected == 0) {
        total = batch->total;
        all.reserve(total);
      }
      std::string bad;
      if (batch->total != total)
        bad = "total changed from " + std::to_string(total) + " to " + std::to_string(batch->total);
      else if (batch->first != expected)
        bad = "batch starts at " + std::to_string(batch->first) + ", expected " +
              std::to_string(expected);
      else if (cur.fds.size() != batch->records.size())
        bad = std::to_string(batch->records.size()) + " records came with " +
              std::to_string(cur.fds.size()) + " fds";
      if (!bad.empty()) {
        reply_error(make_error(Errc::protocol, "unpark: " + bad));
        return false;  // the rest of the caller's batches would be read as requests
      }
      for (std::size_t i = 0; i < batch->records.size(); ++i)
        all.push_back(ParkedRegion{batch->records[i], std::move(cur.fds[i])});
      expected += static_cast<std::uint32_t>(batch->records.size());
      if (expected == total) break;
      Result<Message> next = ch_.recv(io_deadline(), kMaxFdsPerMessage);
      if (!next) {
        log("unpark: waiting for the batch at " + std::to_string(expected) + ": " +
            next.error().message);
        return false;
      }
      if (next->type != MsgType::unpark) {
        reply_error(make_error(Errc::protocol, "unpark: got " + msg_type_name(next->type) +
                                                   " before the batch at " +
                                                   std::to_string(expected)));
        return false;
      }
      cur = std::move(*next);
    }
    return reply(MsgType::unpark, h_.unpark(std::move(all)));
  }

  Channel& ch_;
  Handler& h_;
  const SessionOptions& o_;
};

}  // namespace

#undef GCR_TRY_OR_REPLY

Status Handler::cow_begin(UniqueFd, UniqueFd, std::uint32_t) {
  return make_error(Errc::unsupported, "this process's gcr has no soft copy-on-write");
}

CutCounts Handler::cut(CutOp, std::uint64_t) {
  return CutCounts{0, 0, ~0ull, 0};  // nothing shared: no launch is ever held
}

Result<CowCopy> Handler::cow_take(std::uint32_t) {
  return make_error(Errc::unsupported, "this process's gcr has no soft copy-on-write");
}

void serve_session(Channel& channel, Handler& handler, const SessionOptions& options) {
  Session(channel, handler, options).run();
}

}  // namespace gcr::control
