// The host side of a rank of the TCP ring (tcp_ring.h): pinned staging that the stream and the
// proxy threads share, and the two proxy threads that move pieces between it and the sockets, as
// NCCL's socket transport does.
//
// Staging: kStagingSlots send slots, kStagingSlots receive slots and four flags, in pinned memory
// the device reaches (pinned_buffer.h). Flags are 32-bit piece numbers (1, 2, ... over the whole
// run, compared cyclically as cuStreamWaitValue32's GEQ compares), each on a line of its own:
//   kSendReady  the stream has put piece q in send slot q % kStagingSlots (cuStreamWriteValue32)
//   kSendDone   the sender has sent piece q: its slot may be refilled (release store)
//   kRecvReady  the receiver has put piece q in receive slot q % kStagingSlots (release store)
//   kRecvDone   the stream has consumed piece q: its slot may be refilled (cuStreamWriteValue32)
// The sender sends piece q once kSendReady >= q (an acquire load); the receiver reads piece q from
// its socket into its slot once kRecvDone >= q - kStagingSlots. Neither calls CUDA, and each
// waits on one thing at a time, so a sender held by a slow peer never holds a receive up. A
// broken connection ends the process (exit 2), naming the peer.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "pinned_buffer.h"
#include "unique_fd.h"

namespace mp {

inline constexpr int kStagingSlots = 4;

enum class Flag { kSendReady = 0, kSendDone, kRecvReady, kRecvDone };

class Staging {
 public:
  explicit Staging(std::size_t slot_bytes);

  std::uint32_t* flag(Flag f) const;
  CUdeviceptr flag_device(Flag f) const;
  char* send_slot(std::uint64_t piece) const { return send_.host() + offset(piece); }
  CUdeviceptr send_slot_device(std::uint64_t piece) const { return send_.device() + offset(piece); }
  char* recv_slot(std::uint64_t piece) const { return recv_.host() + offset(piece); }
  CUdeviceptr recv_slot_device(std::uint64_t piece) const { return recv_.device() + offset(piece); }
  std::size_t slot_bytes() const { return slot_bytes_; }

 private:
  std::size_t offset(std::uint64_t piece) const { return piece % kStagingSlots * slot_bytes_; }

  std::size_t slot_bytes_;
  PinnedBuffer flags_, send_, recv_;
};

// One end of a ring connection, named for messages.
struct Peer {
  UniqueFd socket;
  int rank;
  std::string address;
};

// After every rank saved its state (--state, Note [A framework's checkpoint] in trainer.h) its
// peers hang up: a proxy that sees it then ends the process with `code` instead of failing.
void peers_may_leave(int code);

class TcpProxy {
 public:
  // Moves `allreduces` all-reduces of pieces.size() pieces each: piece i of each is send_bytes[i]
  // bytes for the next rank and recv_bytes[i] bytes from the previous one.
  TcpProxy(const Staging& staging, int rank, Peer next, Peer prev,
           std::vector<std::size_t> send_bytes, std::vector<std::size_t> recv_bytes,
           std::uint64_t allreduces);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // Waits for both threads, which end once every piece of the run has been sent and received.
  void join();

 private:
  void send_loop();
  void recv_loop();
  [[noreturn]] void fail(const Peer& peer, const std::string& what) const;

  const Staging& staging_;
  int rank_;
  Peer next_, prev_;
  std::vector<std::size_t> send_bytes_, recv_bytes_;
  std::uint64_t total_;  // pieces in the run
  std::thread sender_, receiver_;
};

}  // namespace mp
