// Encoding and decoding of the control protocol's frames and payloads (docs/protocol.md §3-§4).
// Little-endian fixed-width fields, strings as a u32 length and bytes. Decoders check every length
// before they allocate, every reserved field, and that the payload is consumed exactly.
#include "messages.h"

#include "gcr/cow_table.h"

#include <cstdio>
#include <cstring>

namespace gcr::control {
namespace {

class Writer {
 public:
  void u16(std::uint16_t v) { le(v, 2); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void record(const RegionRecord& r) {
    u64(r.address);
    u64(r.size);
    u32(r.device);
    u32(r.flags);
  }
  std::vector<std::uint8_t> take() { return std::move(out_); }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::uint8_t> out_;
};

// Reads fields in order; every failure names the message, the field and its offset.
class Reader {
 public:
  Reader(std::string_view message, std::span<const std::uint8_t> in) : msg_(message), in_(in) {}

  Result<std::uint32_t> u32(const char* field) {
    GCR_TRY(need(field, 4));
    return static_cast<std::uint32_t>(le(4));
  }
  Result<std::uint64_t> u64(const char* field) {
    GCR_TRY(need(field, 8));
    return le(8);
  }
  Status reserved32(const char* field) {
    std::size_t at = pos_;
    GCR_TRY_ASSIGN(std::uint32_t v, u32(field));
    if (v != 0) return fail(field, at, "reserved, must be zero, is " + std::to_string(v));
    return ok();
  }
  Result<std::string> str(const char* field, std::size_t max_bytes) {
    std::size_t at = pos_;
    GCR_TRY_ASSIGN(std::uint32_t n, u32(field));
    if (n > max_bytes)
      return fail(
          field, at,
          "length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_bytes));
    GCR_TRY(need(field, n));
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Result<RegionRecord> record(std::size_t index) {
    std::size_t at = pos_;
    RegionRecord r;
    GCR_TRY_ASSIGN(r.address, u64("region address"));
    GCR_TRY_ASSIGN(r.size, u64("region size"));
    GCR_TRY_ASSIGN(r.device, u32("region device"));
    GCR_TRY_ASSIGN(r.flags, u32("region flags"));
    if (r.size == 0) return fail("region", at, "record " + std::to_string(index) + " has size 0");
    if (r.address + r.size < r.address)
      return fail("region", at, "record " + std::to_string(index) + " wraps the address space");
    return r;
  }
  std::size_t left() const { return in_.size() - pos_; }
  std::size_t pos() const { return pos_; }
  Status done() {
    if (left() != 0)
      return make_error(Errc::protocol, std::string(msg_) + ": " + std::to_string(left()) +
                                            " trailing bytes after offset " + std::to_string(pos_));
    return ok();
  }
  Error fail(const char* field, std::size_t at, const std::string& what) const {
    return make_error(Errc::protocol, std::string(msg_) + ": field '" + field + "' at offset " +
                                          std::to_string(at) + ": " + what);
  }

 private:
  Status need(const char* field, std::size_t n) {
    if (left() < n)
      return fail(field, pos_,
                  "truncated (needs " + std::to_string(n) + " bytes, " + std::to_string(left()) +
                      " left of a " + std::to_string(in_.size()) + "-byte payload)");
    return ok();
  }
  std::uint64_t le(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view msg_;
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

Result<ProcessState> to_state(Reader& r, std::uint32_t v, std::size_t at) {
  if (v > static_cast<std::uint32_t>(ProcessState::parked))
    return r.fail("state", at, "unknown process state " + std::to_string(v));
  return static_cast<ProcessState>(v);
}

constexpr Errc kLastErrc = Errc::already_exists;

bool id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

}  // namespace

const char* process_state_name(ProcessState state) noexcept {
  switch (state) {
    case ProcessState::running:
      return "running";
    case ProcessState::quiesced:
      return "quiesced";
    case ProcessState::parked:
      return "parked";
  }
  return "unknown";
}

std::string msg_type_name(MsgType type) {
  switch (type) {
    case MsgType::hello:
      return "hello";
    case MsgType::error:
      return "error";
    case MsgType::ok:
      return "ok";
    case MsgType::status:
      return "status";
    case MsgType::status_reply:
      return "status_reply";
    case MsgType::regions:
      return "regions";
    case MsgType::regions_reply:
      return "regions_reply";
    case MsgType::quiesce:
      return "quiesce";
    case MsgType::resume:
      return "resume";
    case MsgType::park:
      return "park";
    case MsgType::parked:
      return "parked";
    case MsgType::park_done:
      return "park_done";
    case MsgType::unpark:
      return "unpark";
    case MsgType::new_epoch:
      return "new_epoch";
    case MsgType::bye:
      return "bye";
    case MsgType::cow_begin:
      return "cow_begin";
    case MsgType::cow_take:
      return "cow_take";
    case MsgType::cow_snapshot:
      return "cow_snapshot";
    case MsgType::cow_end:
      return "cow_end";
    case MsgType::touch_order:
      return "touch_order";
    case MsgType::touch_order_reply:
      return "touch_order_reply";
    case MsgType::blockers:
      return "blockers";
    case MsgType::blockers_reply:
      return "blockers_reply";
    case MsgType::shares:
      return "shares";
    case MsgType::shares_reply:
      return "shares_reply";
    case MsgType::host_dma:
      return "host_dma";
    case MsgType::host_dma_reply:
      return "host_dma_reply";
    case MsgType::cut:
      return "cut";
    case MsgType::cut_reply:
      return "cut_reply";
  }
  return "type " + std::to_string(static_cast<std::uint32_t>(type));
}

std::array<std::uint8_t, kHeaderBytes> encode_header(MsgType type, std::uint64_t payload_bytes) {
  Writer w;
  w.u32(kMessageMagic);
  w.u16(kProtocolMajor);
  w.u16(kProtocolMinor);
  w.u32(static_cast<std::uint32_t>(type));
  w.u32(0);
  w.u64(payload_bytes);
  std::vector<std::uint8_t> v = w.take();
  std::array<std::uint8_t, kHeaderBytes> out{};
  std::memcpy(out.data(), v.data(), kHeaderBytes);
  return out;
}

Result<Header> decode_header(std::span<const std::uint8_t> bytes) {
  if (bytes.size() != kHeaderBytes)
    return make_error(Errc::protocol, "message header: " + std::to_string(bytes.size()) +
                                          " bytes, expected " + std::to_string(kHeaderBytes));
  auto le = [&](std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(bytes[at + i]) << (8 * i);
    return v;
  };
  std::uint32_t magic = static_cast<std::uint32_t>(le(0, 4));
  if (magic != kMessageMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    return make_error(Errc::protocol, std::string("message header: bad magic ") + hex +
                                          " (not a gcr control message)");
  }
  Header h;
  h.major = static_cast<std::uint16_t>(le(4, 2));
  h.minor = static_cast<std::uint16_t>(le(6, 2));
  if (h.major != kProtocolMajor)
    return make_error(Errc::unsupported,
                      "the peer speaks gcr control protocol " + std::to_string(h.major) + "." +
                          std::to_string(h.minor) + ", this side " +
                          std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor) +
                          "; use the gcr that matches the process's interposer");
  h.type = static_cast<MsgType>(le(8, 4));
  if (std::uint64_t reserved = le(12, 4); reserved != 0)
    return make_error(Errc::protocol,
                      "message header: field 'reserved' at offset 12: must be zero, is " +
                          std::to_string(reserved));
  h.payload_bytes = le(16, 8);
  if (h.payload_bytes > kMaxPayloadBytes)
    return make_error(Errc::protocol, "message header: " + msg_type_name(h.type) + " payload of " +
                                          std::to_string(h.payload_bytes) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(kMaxPayloadBytes));
  return h;
}

std::vector<std::uint8_t> encode_hello(const Hello& hello) {
  Writer w;
  w.u32(hello.pid);
  w.u32(static_cast<std::uint32_t>(hello.state));
  w.u32(hello.uid);
  w.u32(0);
  w.str(std::string_view(hello.software).substr(0, kMaxSoftwareBytes));
  return w.take();
}

Result<Hello> decode_hello(std::span<const std::uint8_t> payload) {
  Reader r("hello", payload);
  Hello h;
  GCR_TRY_ASSIGN(h.pid, r.u32("pid"));
  std::size_t at = r.pos();
  GCR_TRY_ASSIGN(std::uint32_t state, r.u32("state"));
  GCR_TRY_ASSIGN(h.state, to_state(r, state, at));
  GCR_TRY_ASSIGN(h.uid, r.u32("uid"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY_ASSIGN(h.software, r.str("software", kMaxSoftwareBytes));
  GCR_TRY(r.done());
  return h;
}

std::vector<std::uint8_t> encode_error(const Error& error) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(error.code));
  w.u32(0);
  std::string_view text = error.message;
  w.str(text.substr(0, kMaxErrorTextBytes));
  return w.take();
}

Result<ErrorReply> decode_error(std::span<const std::uint8_t> payload) {
  Reader r("error", payload);
  GCR_TRY_ASSIGN(std::uint32_t code, r.u32("code"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY_ASSIGN(std::string text, r.str("message", kMaxErrorTextBytes));
  GCR_TRY(r.done());
  if (code == 0) return r.fail("code", 0, "an error reply with code ok");
  if (code > static_cast<std::uint32_t>(kLastErrc))
    return ErrorReply{Error{Errc::internal, "(error code " + std::to_string(code) + ") " + text}};
  return ErrorReply{Error{static_cast<Errc>(code), std::move(text)}};
}

std::vector<std::uint8_t> encode_ok(MsgType request) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(request));
  w.u32(0);
  return w.take();
}

Result<MsgType> decode_ok(std::span<const std::uint8_t> payload) {
  Reader r("ok", payload);
  GCR_TRY_ASSIGN(std::uint32_t type, r.u32("request"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(r.done());
  return static_cast<MsgType>(type);
}

std::vector<std::uint8_t> encode_status_reply(const StatusInfo& s) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(s.state));
  w.u32((s.conservative ? 1u : 0u) | (s.host_registered ? 2u : 0u));
  w.u64(s.regions);
  w.u64(s.region_bytes);
  w.u64(s.dirty_bytes);
  w.u64(s.requested_bytes);
  w.u64(s.epoch);
  std::string_view id = s.last_checkpoint;
  w.str(id.substr(0, kMaxCheckpointIdBytes));
  return w.take();
}

Result<StatusInfo> decode_status_reply(std::span<const std::uint8_t> payload) {
  Reader r("status_reply", payload);
  StatusInfo s;
  GCR_TRY_ASSIGN(std::uint32_t state, r.u32("state"));
  GCR_TRY_ASSIGN(s.state, to_state(r, state, 0));
  GCR_TRY_ASSIGN(std::uint32_t flags, r.u32("flags"));
  s.conservative = (flags & 1u) != 0;
  s.host_registered = (flags & 2u) != 0;  // other bits: added by a newer minor, ignored
  GCR_TRY_ASSIGN(s.regions, r.u64("regions"));
  GCR_TRY_ASSIGN(s.region_bytes, r.u64("region_bytes"));
  GCR_TRY_ASSIGN(s.dirty_bytes, r.u64("dirty_bytes"));
  GCR_TRY_ASSIGN(s.requested_bytes, r.u64("requested_bytes"));
  GCR_TRY_ASSIGN(s.epoch, r.u64("epoch"));
  GCR_TRY_ASSIGN(s.last_checkpoint, r.str("last_checkpoint", kMaxCheckpointIdBytes));
  GCR_TRY(r.done());
  return s;
}

Result<std::vector<std::uint8_t>> encode_regions_reply(std::span<const RegionRecord> regions) {
  if (regions.size() > kMaxRegions)
    return make_error(Errc::invalid_argument, "regions_reply: " + std::to_string(regions.size()) +
                                                  " regions exceed the protocol's limit of " +
                                                  std::to_string(kMaxRegions));
  Writer w;
  w.u32(static_cast<std::uint32_t>(regions.size()));
  w.u32(0);
  for (const RegionRecord& rec : regions) w.record(rec);
  return w.take();
}

Result<std::vector<RegionRecord>> decode_regions_reply(std::span<const std::uint8_t> payload) {
  Reader r("regions_reply", payload);
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY(r.reserved32("reserved"));
  if (count > kMaxRegions)
    return r.fail("count", 0,
                  std::to_string(count) + " exceeds the limit of " + std::to_string(kMaxRegions));
  if (r.left() != std::size_t{count} * kRegionRecordBytes)
    return r.fail("count", 0,
                  std::to_string(count) + " records need " +
                      std::to_string(std::size_t{count} * kRegionRecordBytes) +
                      " bytes, the payload has " + std::to_string(r.left()));
  std::vector<RegionRecord> out;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    GCR_TRY_ASSIGN(RegionRecord rec, r.record(i));
    out.push_back(rec);
  }
  GCR_TRY(r.done());
  return out;
}

std::vector<std::uint8_t> encode_quiesce(std::uint32_t timeout_ms) {
  Writer w;
  w.u32(timeout_ms);
  w.u32(0);
  return w.take();
}

Result<std::uint32_t> decode_quiesce(std::span<const std::uint8_t> payload) {
  Reader r("quiesce", payload);
  GCR_TRY_ASSIGN(std::uint32_t timeout_ms, r.u32("timeout_ms"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(r.done());
  return timeout_ms;
}

namespace {

// The rules a batch obeys on both sides (encode refuses what decode would reject).
Status check_batch(const char* name, std::uint32_t total, std::uint32_t first, std::size_t count) {
  auto fail = [&](const std::string& what) {
    return make_error(Errc::protocol, std::string(name) + ": " + what);
  };
  if (total > kMaxRegions)
    return fail("total " + std::to_string(total) + " exceeds the limit of " +
                std::to_string(kMaxRegions) + " regions");
  if (count > kMaxFdsPerMessage)
    return fail(std::to_string(count) + " records exceed the limit of " +
                std::to_string(kMaxFdsPerMessage) + " per batch");
  if (std::uint64_t{first} + count > total)
    return fail("records " + std::to_string(first) + "+" + std::to_string(count) +
                " exceed the total of " + std::to_string(total));
  if (count == 0 && total != 0) return fail("an empty batch in a non-empty transfer");
  return ok();
}

}  // namespace

Result<std::vector<std::uint8_t>> encode_region_batch(const RegionBatch& batch) {
  if (Status s = check_batch("region batch", batch.total, batch.first, batch.records.size()); !s)
    return Error{Errc::invalid_argument, std::move(s).error().message};
  Writer w;
  w.u32(batch.total);
  w.u32(batch.first);
  w.u32(static_cast<std::uint32_t>(batch.records.size()));
  w.u32(0);
  for (const RegionRecord& rec : batch.records) {
    if (rec.size == 0 || rec.address + rec.size < rec.address)
      return make_error(Errc::invalid_argument, "region batch: a region at " +
                                                    std::to_string(rec.address) +
                                                    " has size 0 or wraps the address space");
    w.record(rec);
  }
  return w.take();
}

Result<RegionBatch> decode_region_batch(MsgType type, std::span<const std::uint8_t> payload) {
  std::string name = msg_type_name(type);
  Reader r(name, payload);
  RegionBatch b;
  GCR_TRY_ASSIGN(b.total, r.u32("total"));
  GCR_TRY_ASSIGN(b.first, r.u32("first"));
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(check_batch(name.c_str(), b.total, b.first, count));
  if (r.left() != std::size_t{count} * kRegionRecordBytes)
    return r.fail("count", 8,
                  std::to_string(count) + " records need " +
                      std::to_string(std::size_t{count} * kRegionRecordBytes) +
                      " bytes, the payload has " + std::to_string(r.left()));
  b.records.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    GCR_TRY_ASSIGN(RegionRecord rec, r.record(b.first + i));
    b.records.push_back(rec);
  }
  GCR_TRY(r.done());
  return b;
}

Status check_checkpoint_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxCheckpointIdBytes)
    return make_error(Errc::invalid_argument, "checkpoint id of " + std::to_string(id.size()) +
                                                  " bytes; it must have 1 to " +
                                                  std::to_string(kMaxCheckpointIdBytes));
  for (char c : id)
    if (!id_char(c))
      return make_error(Errc::invalid_argument,
                        "checkpoint id contains a character outside [A-Za-z0-9._:-]");
  return ok();
}

Result<std::vector<std::uint8_t>> encode_new_epoch(std::string_view checkpoint_id) {
  GCR_TRY(check_checkpoint_id(checkpoint_id));
  Writer w;
  w.str(checkpoint_id);
  return w.take();
}

Result<std::string> decode_new_epoch(std::span<const std::uint8_t> payload) {
  Reader r("new_epoch", payload);
  GCR_TRY_ASSIGN(std::string id, r.str("checkpoint_id", kMaxCheckpointIdBytes));
  GCR_TRY(r.done());
  if (Status s = check_checkpoint_id(id); !s)
    return Error{Errc::protocol, "new_epoch: " + std::move(s).error().message};
  return id;
}

Result<std::vector<std::uint8_t>> encode_cow_begin(std::uint32_t entries) {
  if (entries == 0 || entries > cow::kMaxEntries)
    return make_error(Errc::invalid_argument, "cow_begin: " + std::to_string(entries) +
                                                  " entries; a table has 1 to " +
                                                  std::to_string(cow::kMaxEntries));
  Writer w;
  w.u32(entries);
  w.u32(0);
  return w.take();
}

Result<std::uint32_t> decode_cow_begin(std::span<const std::uint8_t> payload) {
  Reader r("cow_begin", payload);
  GCR_TRY_ASSIGN(std::uint32_t entries, r.u32("entries"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(r.done());
  if (entries == 0 || entries > cow::kMaxEntries)
    return r.fail(
        "entries", 0,
        std::to_string(entries) + " entries; a table has 1 to " + std::to_string(cow::kMaxEntries));
  return entries;
}

std::vector<std::uint8_t> encode_cow_take(std::uint32_t index) {
  Writer w;
  w.u32(index);
  w.u32(0);
  return w.take();
}

Result<std::uint32_t> decode_cow_take(std::span<const std::uint8_t> payload) {
  Reader r("cow_take", payload);
  GCR_TRY_ASSIGN(std::uint32_t index, r.u32("index"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(r.done());
  return index;
}

Result<std::vector<std::uint8_t>> encode_cow_snapshot(const CowSnapshot& snapshot) {
  if (snapshot.size == 0)
    return make_error(Errc::invalid_argument, "cow_snapshot: a copy of size 0");
  Writer w;
  w.u32(snapshot.index);
  w.u32(0);
  w.u64(snapshot.size);
  return w.take();
}

Result<CowSnapshot> decode_cow_snapshot(std::span<const std::uint8_t> payload) {
  Reader r("cow_snapshot", payload);
  CowSnapshot s;
  GCR_TRY_ASSIGN(s.index, r.u32("index"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY_ASSIGN(s.size, r.u64("size"));
  GCR_TRY(r.done());
  if (s.size == 0) return r.fail("size", 8, "a copy of size 0");
  return s;
}

Result<std::vector<std::uint8_t>> encode_touch_order_reply(
    std::span<const std::uint64_t> addresses) {
  if (addresses.size() > kMaxRegions)
    return make_error(Errc::invalid_argument,
                      "touch_order_reply: " + std::to_string(addresses.size()) +
                          " addresses exceed " + std::to_string(kMaxRegions));
  Writer w;
  w.u32(static_cast<std::uint32_t>(addresses.size()));
  w.u32(0);
  for (std::uint64_t a : addresses) w.u64(a);
  return w.take();
}

Result<std::vector<std::uint64_t>> decode_touch_order_reply(std::span<const std::uint8_t> payload) {
  Reader r("touch_order_reply", payload);
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY(r.reserved32("reserved"));
  if (count > kMaxRegions)
    return r.fail("count", 0, std::to_string(count) + " exceeds " + std::to_string(kMaxRegions));
  if (r.left() != std::size_t{count} * 8)
    return r.fail("count", 0,
                  std::to_string(count) + " addresses need " + std::to_string(count * 8ull) +
                      " bytes, the payload has " + std::to_string(r.left()));
  std::vector<std::uint64_t> out;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    GCR_TRY_ASSIGN(std::uint64_t a, r.u64("address"));
    out.push_back(a);
  }
  GCR_TRY(r.done());
  return out;
}

Result<std::vector<std::uint8_t>> encode_blockers_reply(std::span<const std::string> reasons) {
  if (reasons.size() > kMaxBlockers)
    return make_error(Errc::invalid_argument, "blockers_reply: " + std::to_string(reasons.size()) +
                                                  " reasons exceed " +
                                                  std::to_string(kMaxBlockers));
  Writer w;
  w.u32(static_cast<std::uint32_t>(reasons.size()));
  w.u32(0);
  for (const std::string& why : reasons) w.str(std::string_view(why).substr(0, kMaxBlockerBytes));
  return w.take();
}

Result<std::vector<std::string>> decode_blockers_reply(std::span<const std::uint8_t> payload) {
  Reader r("blockers_reply", payload);
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY(r.reserved32("reserved"));
  if (count > kMaxBlockers)
    return r.fail("count", 0, std::to_string(count) + " exceeds " + std::to_string(kMaxBlockers));
  std::vector<std::string> out;
  for (std::uint32_t i = 0; i < count; ++i) {
    GCR_TRY_ASSIGN(std::string why, r.str("reason", kMaxBlockerBytes));
    out.push_back(std::move(why));
  }
  GCR_TRY(r.done());
  return out;
}

Result<std::vector<std::uint8_t>> encode_host_dma_reply(const HostDmaRanges& ranges) {
  if (ranges.ranges.size() > kMaxHostDmaRanges)
    return make_error(Errc::invalid_argument,
                      "host_dma_reply: " + std::to_string(ranges.ranges.size()) +
                          " ranges exceed " + std::to_string(kMaxHostDmaRanges));
  Writer w;
  w.u32(static_cast<std::uint32_t>(ranges.ranges.size()));
  w.u32((ranges.overflow ? 1u : 0u) | (ranges.touched ? 2u : 0u));
  for (const HostDmaRange& r : ranges.ranges) {
    w.u64(r.address);
    w.u64(r.bytes);
  }
  return w.take();
}

Result<HostDmaRanges> decode_host_dma_reply(std::span<const std::uint8_t> payload) {
  Reader r("host_dma_reply", payload);
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY_ASSIGN(std::uint32_t flags, r.u32("flags"));
  if (count > kMaxHostDmaRanges)
    return r.fail("count", 0,
                  std::to_string(count) + " exceeds " + std::to_string(kMaxHostDmaRanges));
  if (r.left() != std::size_t{count} * 16)
    return r.fail("count", 0,
                  std::to_string(count) + " ranges need " + std::to_string(count * 16ull) +
                      " bytes, the payload has " + std::to_string(r.left()));
  HostDmaRanges out;
  out.overflow = (flags & 1u) != 0;
  out.touched = (flags & 2u) != 0;  // other bits: added by a newer minor, ignored
  out.ranges.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    HostDmaRange range;
    GCR_TRY_ASSIGN(range.address, r.u64("address"));
    GCR_TRY_ASSIGN(range.bytes, r.u64("bytes"));
    if (range.address + range.bytes < range.address)
      return r.fail("bytes", 8, "the range wraps around the address space");
    out.ranges.push_back(range);
  }
  GCR_TRY(r.done());
  return out;
}

Result<std::vector<std::uint8_t>> encode_shares_reply(std::span<const ShareRecord> shares) {
  if (shares.size() > kMaxRegions)
    return make_error(Errc::invalid_argument, "shares_reply: " + std::to_string(shares.size()) +
                                                  " records exceed " + std::to_string(kMaxRegions));
  Writer w;
  w.u32(static_cast<std::uint32_t>(shares.size()));
  w.u32(0);
  for (const ShareRecord& s : shares) {
    if (s.keys.size() > kMaxShareKeys)
      return make_error(Errc::invalid_argument, "shares_reply: " + std::to_string(s.keys.size()) +
                                                    " keys exceed " +
                                                    std::to_string(kMaxShareKeys));
    w.u64(s.address);
    w.u32(s.flags);
    w.u32(static_cast<std::uint32_t>(s.keys.size()));
    for (std::uint64_t k : s.keys) w.u64(k);
  }
  return w.take();
}

Result<std::vector<ShareRecord>> decode_shares_reply(std::span<const std::uint8_t> payload) {
  Reader r("shares_reply", payload);
  GCR_TRY_ASSIGN(std::uint32_t count, r.u32("count"));
  GCR_TRY(r.reserved32("reserved"));
  if (count > kMaxRegions)
    return r.fail("count", 0, std::to_string(count) + " exceeds " + std::to_string(kMaxRegions));
  std::vector<ShareRecord> out;
  for (std::uint32_t i = 0; i < count; ++i) {
    ShareRecord s;
    GCR_TRY_ASSIGN(s.address, r.u64("address"));
    GCR_TRY_ASSIGN(s.flags, r.u32("flags"));
    std::size_t at = r.pos();
    GCR_TRY_ASSIGN(std::uint32_t keys, r.u32("keys"));
    if (keys > kMaxShareKeys)
      return r.fail("keys", at, std::to_string(keys) + " exceeds " + std::to_string(kMaxShareKeys));
    for (std::uint32_t k = 0; k < keys; ++k) {
      GCR_TRY_ASSIGN(std::uint64_t key, r.u64("key"));
      s.keys.push_back(key);
    }
    out.push_back(std::move(s));
  }
  GCR_TRY(r.done());
  return out;
}

std::vector<std::uint8_t> encode_cut(const CutRequest& request) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(request.op));
  w.u32(0);
  w.u64(request.value);
  return w.take();
}

Result<CutRequest> decode_cut(std::span<const std::uint8_t> payload) {
  Reader r("cut", payload);
  CutRequest c;
  GCR_TRY_ASSIGN(std::uint32_t op, r.u32("op"));
  if (op < static_cast<std::uint32_t>(CutOp::begin) || op > static_cast<std::uint32_t>(CutOp::end))
    return r.fail("op", 0, "unknown cut operation " + std::to_string(op));
  c.op = static_cast<CutOp>(op);
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY_ASSIGN(c.value, r.u64("value"));
  GCR_TRY(r.done());
  return c;
}

std::vector<std::uint8_t> encode_cut_reply(const CutCounts& counts) {
  Writer w;
  w.u64(counts.admitted);
  w.u64(counts.issued);
  w.u64(counts.target);
  w.u32(counts.waiting);
  w.u32(0);
  return w.take();
}

Result<CutCounts> decode_cut_reply(std::span<const std::uint8_t> payload) {
  Reader r("cut_reply", payload);
  CutCounts c;
  GCR_TRY_ASSIGN(c.admitted, r.u64("admitted"));
  GCR_TRY_ASSIGN(c.issued, r.u64("issued"));
  GCR_TRY_ASSIGN(c.target, r.u64("target"));
  GCR_TRY_ASSIGN(c.waiting, r.u32("waiting"));
  GCR_TRY(r.reserved32("reserved"));
  GCR_TRY(r.done());
  return c;
}

Status decode_empty(MsgType type, std::span<const std::uint8_t> payload) {
  if (!payload.empty())
    return make_error(Errc::protocol, msg_type_name(type) + ": carries no payload, got " +
                                          std::to_string(payload.size()) + " bytes");
  return ok();
}

Status decode_payload(MsgType type, std::span<const std::uint8_t> payload) {
  switch (type) {
    case MsgType::hello:
      GCR_TRY(decode_hello(payload));
      return ok();
    case MsgType::error:
      GCR_TRY(decode_error(payload));
      return ok();
    case MsgType::ok:
      GCR_TRY(decode_ok(payload));
      return ok();
    case MsgType::status_reply:
      GCR_TRY(decode_status_reply(payload));
      return ok();
    case MsgType::regions_reply:
      GCR_TRY(decode_regions_reply(payload));
      return ok();
    case MsgType::quiesce:
      GCR_TRY(decode_quiesce(payload));
      return ok();
    case MsgType::parked:
    case MsgType::unpark:
      GCR_TRY(decode_region_batch(type, payload));
      return ok();
    case MsgType::new_epoch:
      GCR_TRY(decode_new_epoch(payload));
      return ok();
    case MsgType::cow_begin:
      GCR_TRY(decode_cow_begin(payload));
      return ok();
    case MsgType::cow_take:
      GCR_TRY(decode_cow_take(payload));
      return ok();
    case MsgType::cow_snapshot:
      GCR_TRY(decode_cow_snapshot(payload));
      return ok();
    case MsgType::touch_order_reply:
      GCR_TRY(decode_touch_order_reply(payload));
      return ok();
    case MsgType::blockers_reply:
      GCR_TRY(decode_blockers_reply(payload));
      return ok();
    case MsgType::shares_reply:
      GCR_TRY(decode_shares_reply(payload));
      return ok();
    case MsgType::cut:
      GCR_TRY(decode_cut(payload));
      return ok();
    case MsgType::cut_reply:
      GCR_TRY(decode_cut_reply(payload));
      return ok();
    case MsgType::host_dma_reply:
      GCR_TRY(decode_host_dma_reply(payload));
      return ok();
    case MsgType::host_dma:
    case MsgType::shares:
    case MsgType::blockers:
    case MsgType::cow_end:
    case MsgType::touch_order:
    case MsgType::status:
    case MsgType::regions:
    case MsgType::resume:
    case MsgType::park:
    case MsgType::park_done:
    case MsgType::bye:
      return decode_empty(type, payload);
  }
  return make_error(Errc::unsupported, "unknown message " + msg_type_name(type));
}

}  // namespace gcr::control
