// The layout of a ring link's mailbox, shared by the host code and the kernels (mp_kernels.cu).
//
// Link r carries messages from rank r - 1 to rank r (mod ranks); its mailbox lives in rank r's
// memory and rank r - 1 maps it. The mailbox is kMailboxParts separate allocations, so that each
// can reach the peer by a different transport (transport.h): part 0 holds the flags, parts
// 1..kSlots one message slot each.
//
// Flags (unsigned long long words of part 0, on lines of their own):
//   seq  written by the sender after a message is in slot seq % kSlots (release);
//   ack  written by the owner after it has consumed message seq (release), so the sender may
//        reuse that slot for message seq + kSlots.
// Both only grow, over the whole run (message numbers start at 1).
#pragma once

namespace mp {

inline constexpr int kSlots = 3;
inline constexpr int kMailboxParts = 1 + kSlots;
inline constexpr int kSeqWord = 0;
inline constexpr int kAckWord = 16;  // 128 bytes past seq
// --memop-barrier: written by the previous rank with cuStreamWriteValue64 (barrier round numbers,
// from 1), waited on by the owner with cuStreamWaitValue64. The kernels never touch it.
inline constexpr int kBarrierWord = 24;
inline constexpr unsigned long long kFlagsBytes = 256;

// Device addresses of one mailbox's flags and slots, as seen by the rank that launches the kernel.
struct MailboxView {
  unsigned long long* flags;
  unsigned long long* slot[kSlots];
};

}  // namespace mp
