// The control protocol's messages (docs/protocol.md §3-§4): the 24-byte frame header and every
// payload, encoded and decoded as plain bytes. Pure functions, no I/O, no fds: channel.cpp moves
// the bytes and the fds, session.cpp and client.cpp give them meaning. Every decoder treats its
// input as hostile (it is fuzzed: tests/fuzz/control_messages_fuzz.cpp) and names the message and
// field it rejects.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/control.h"
#include "gcr/result.h"

namespace gcr::control {

inline constexpr std::uint32_t kMessageMagic = 0x50524347;  // "GCRP" as bytes on the wire
inline constexpr std::uint16_t kProtocolMajor = 1;
// 1.1: soft copy-on-write (cow_*); 1.2: blockers; 1.3: shares and cut (jobs); 1.4: host_dma;
// 1.5: host_dma_reply's flag bit 1 (pinned memory written before device writes)
inline constexpr std::uint16_t kProtocolMinor = 6;
inline constexpr std::size_t kHeaderBytes = 24;
inline constexpr std::uint64_t kMaxPayloadBytes = 16u << 20;
inline constexpr std::size_t kMaxFdsPerMessage = 250;   // the kernel's SCM_MAX_FD is 253
inline constexpr std::uint32_t kMaxRegions = 1u << 19;  // a regions_reply stays under 16 MiB
inline constexpr std::size_t kRegionRecordBytes = 24;
inline constexpr std::size_t kMaxErrorTextBytes = 4096;
inline constexpr std::size_t kMaxSoftwareBytes = 256;
inline constexpr std::size_t kMaxCheckpointIdBytes = 128;
inline constexpr std::uint32_t kMaxBlockers = 64;
inline constexpr std::size_t kMaxBlockerBytes = 512;

// Values are fixed and only appended (docs/protocol.md §4).
enum class MsgType : std::uint32_t {
  hello = 1,               // server -> caller, first message of every connection
  error = 2,               // reply: Errc + text
  ok = 3,                  // reply: the request type it answers
  status = 16,             // -> status_reply
  status_reply = 17,       // server -> caller
  regions = 18,            // -> regions_reply
  regions_reply = 19,      // server -> caller
  quiesce = 20,            // -> ok | error
  resume = 21,             // -> ok | error
  park = 22,               // -> parked... | error
  parked = 23,             // server -> caller: a batch of parked regions, with their fds
  park_done = 24,          // caller -> server: every parked batch received -> ok
  unpark = 25,             // caller -> server: a batch of regions to map back, with their fds
  new_epoch = 26,          // -> ok | error
  bye = 27,                // -> ok, then the server closes the connection
  cow_begin = 28,          // caller -> server, with the table's fd -> ok | error (1.1)
  cow_take = 29,           // -> cow_snapshot | error (1.1)
  cow_snapshot = 30,       // server -> caller: the process's copy of one region, with its fd (1.1)
  cow_end = 31,            // -> ok (1.1)
  touch_order = 32,        // -> touch_order_reply (1.1)
  touch_order_reply = 33,  // server -> caller (1.1)
  blockers = 34,           // -> blockers_reply (1.2)
  blockers_reply = 35,     // server -> caller (1.2)
  shares = 36,             // -> shares_reply (1.3)
  shares_reply = 37,       // server -> caller (1.3)
  cut = 38,                // -> cut_reply | error (1.3)
  cut_reply = 39,          // server -> caller (1.3)
  host_dma = 40,           // -> host_dma_reply (1.4)
  host_dma_reply = 41,     // server -> caller (1.4)
};

// "status", "parked", ...; "type 99" for a value this side does not know.
std::string msg_type_name(MsgType type);

struct Header {
  MsgType type = MsgType::error;
  std::uint16_t major = kProtocolMajor;
  std::uint16_t minor = kProtocolMinor;
  std::uint64_t payload_bytes = 0;
};

// The frame header of a message of `type` whose payload is payload_bytes long.
std::array<std::uint8_t, kHeaderBytes> encode_header(MsgType type, std::uint64_t payload_bytes);
// Checks magic, major version, the reserved field and the payload limit; any type passes (a newer
// minor may add types: the dispatcher answers those). `bytes` must hold kHeaderBytes.
// Fails with Errc::unsupported for another major version, naming both, else Errc::protocol.
Result<Header> decode_header(std::span<const std::uint8_t> bytes);

// What the server says first.
struct Hello {
  std::uint32_t pid = 0;  // the server's pid in its own pid namespace (informational)
  ProcessState state = ProcessState::running;
  std::uint32_t uid = 0;  // the server process's effective uid
  std::string software;   // e.g. "gcr 0.1.0 interposer"
};

// One batch of a park reply or an unpark request; exactly records.size() fds travel with it.
struct RegionBatch {
  std::uint32_t total = 0;  // regions in the whole park / unpark
  std::uint32_t first = 0;  // index of records[0] in it
  std::vector<RegionRecord> records;
};

// Payload codecs. encode_* never fail on values that decode_* accepts; decode_* fail with
// Errc::protocol naming the message and field (a truncated, oversized or trailing payload, a
// non-zero reserved field, an unknown enum value).
std::vector<std::uint8_t> encode_hello(const Hello& hello);
Result<Hello> decode_hello(std::span<const std::uint8_t> payload);

// An error reply. A code this side does not know decodes as Errc::internal with the number in the
// text; code ok is rejected.
struct ErrorReply {
  Error error;
};
std::vector<std::uint8_t> encode_error(const Error& error);
Result<ErrorReply> decode_error(std::span<const std::uint8_t> payload);

std::vector<std::uint8_t> encode_ok(MsgType request);
Result<MsgType> decode_ok(std::span<const std::uint8_t> payload);

std::vector<std::uint8_t> encode_status_reply(const StatusInfo& status);
Result<StatusInfo> decode_status_reply(std::span<const std::uint8_t> payload);

// Fails (Errc::invalid_argument) with more than kMaxRegions records.
Result<std::vector<std::uint8_t>> encode_regions_reply(std::span<const RegionRecord> regions);
Result<std::vector<RegionRecord>> decode_regions_reply(std::span<const std::uint8_t> payload);

std::vector<std::uint8_t> encode_quiesce(std::uint32_t timeout_ms);
Result<std::uint32_t> decode_quiesce(std::span<const std::uint8_t> payload);

// For both parked and unpark. Checks count <= kMaxFdsPerMessage, first + count <= total <=
// kMaxRegions, count > 0 unless total is 0, and each record (size > 0, no address overflow).
Result<std::vector<std::uint8_t>> encode_region_batch(const RegionBatch& batch);
Result<RegionBatch> decode_region_batch(MsgType type, std::span<const std::uint8_t> payload);

// Checkpoint ids: 1..kMaxCheckpointIdBytes of [A-Za-z0-9._:-]. Fails with invalid_argument.
Status check_checkpoint_id(std::string_view id);
Result<std::vector<std::uint8_t>> encode_new_epoch(std::string_view checkpoint_id);
Result<std::string> decode_new_epoch(std::span<const std::uint8_t> payload);

// Soft copy-on-write (gcr/cow_table.h). cow_begin names the table's entry count (1..kMaxEntries of
// gcr/cow_table.h) and carries its fd; cow_take names an entry; cow_snapshot answers it with the
// size of the copy and carries its fd.
struct CowSnapshot {
  std::uint32_t index = 0;
  std::uint64_t size = 0;
  friend bool operator==(const CowSnapshot&, const CowSnapshot&) = default;
};
Result<std::vector<std::uint8_t>> encode_cow_begin(std::uint32_t entries);
Result<std::uint32_t> decode_cow_begin(std::span<const std::uint8_t> payload);
std::vector<std::uint8_t> encode_cow_take(std::uint32_t index);
Result<std::uint32_t> decode_cow_take(std::span<const std::uint8_t> payload);
Result<std::vector<std::uint8_t>> encode_cow_snapshot(const CowSnapshot& snapshot);
Result<CowSnapshot> decode_cow_snapshot(std::span<const std::uint8_t> payload);

// The first-touch order: region addresses (at most kMaxRegions).
Result<std::vector<std::uint8_t>> encode_touch_order_reply(
    std::span<const std::uint64_t> addresses);
Result<std::vector<std::uint64_t>> decode_touch_order_reply(std::span<const std::uint8_t> payload);
// blockers_reply: why the process cannot be checkpointed now (none: it can).
Result<std::vector<std::uint8_t>> encode_blockers_reply(std::span<const std::string> reasons);
Result<std::vector<std::string>> decode_blockers_reply(std::span<const std::uint8_t> payload);

// shares_reply: u32 count, u32 0, then per record u64 address, u32 flags, u32 keys, keys x u64.
Result<std::vector<std::uint8_t>> encode_shares_reply(std::span<const ShareRecord> shares);
Result<std::vector<ShareRecord>> decode_shares_reply(std::span<const std::uint8_t> payload);

// cut: u32 op, u32 0, u64 value. cut_reply: u64 admitted, u64 issued, u64 target, u32 waiting,
// u32 0.
struct CutRequest {
  CutOp op = CutOp::read;
  std::uint64_t value = 0;
};
std::vector<std::uint8_t> encode_cut(const CutRequest& request);
Result<CutRequest> decode_cut(std::span<const std::uint8_t> payload);
std::vector<std::uint8_t> encode_cut_reply(const CutCounts& counts);
Result<CutCounts> decode_cut_reply(std::span<const std::uint8_t> payload);

// host_dma_reply: u32 count (<= kMaxHostDmaRanges), u32 flags (bit 0: more ranges than fit; bit 1,
// 1.5: the process writes these pages itself before a device does), then per range u64 address,
// u64 bytes.
Result<std::vector<std::uint8_t>> encode_host_dma_reply(const HostDmaRanges& ranges);
Result<HostDmaRanges> decode_host_dma_reply(std::span<const std::uint8_t> payload);

// For messages without a payload (status, regions, resume, park, park_done, bye, cow_end,
// touch_order, blockers, shares, host_dma).
Status decode_empty(MsgType type, std::span<const std::uint8_t> payload);

// Decodes a payload of any known type and drops the result (the fuzzer's entry, and a check that
// a message is well formed). Unknown types fail with Errc::unsupported.
Status decode_payload(MsgType type, std::span<const std::uint8_t> payload);

}  // namespace gcr::control
