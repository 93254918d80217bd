// --transport tcp: the ring all-reduce of NCCL's socket transport, for ranks that share no memory
// (started apart, as on several hosts). Each rank listens on TCP, publishes "addr/<rank>" in the
// store (tcp_store.h), connects to rank + 1 and accepts rank - 1 (for 2 ranks: two connections,
// one each way). An all-reduce is mp_ring_allreduce's reduce-scatter then all-gather (the same
// chunks), 2 (ranks - 1) messages each way, each cut into kSlices pieces that go through pinned
// staging and the proxy threads (tcp_proxy.h). The stream copies a piece into a send slot and
// raises a flag; it waits on a flag for a received piece, then a kernel adds (or copies) it into
// the data. Sums are of 64-bit integers, so the result does not depend on arrival order.
//
// Note [TCP ring memory operations]
// Every dependency of one rank's device on another rank is a stream memory operation on pinned
// host memory, which gcr counts as communication (Note [A consistent cut] in interpose/cut.h).
// For gcr's cut each rank must issue the same sequence of them, and a wait a rank issues as its
// k-th must be satisfiable once every rank has issued its first k and the proxies run.
//
// Pieces are numbered over the whole run; piece q that rank r - 1 sends is piece q that rank r
// receives. Per all-reduce of P = 2 (ranks - 1) kSlices pieces q0 + 1 .. q0 + P, K = kStagingSlots:
//   stage(q):   wait32(SendDone >= q - K)  copy data -> send slot   write32(SendReady = q)
//   consume(q): wait32(RecvReady >= q)     kernel slot -> data       write32(RecvDone = q)
// issued as stage(q0 + 1 .. q0 + kSlices), then for each piece consume(q), stage(q + kSlices)
// (stage only while q + kSlices <= q0 + P): four memory operations a piece, in the same order on
// every rank. Why each wait is satisfiable:
// - consume(q) waits for this rank's receiver to take piece q, which needs RecvDone >= q - K
//   (consume(q - K), issued before) and rank r - 1's sender to send it, which needs r - 1's
//   SendReady >= q: its stage(q), which comes before consume(q) in the order.
// - stage(q) waits for this rank's sender to have sent piece q - K: SendReady >= q - K (stage(q -
//   K), issued before) and, should the socket buffers be full, rank r + 1's receiver to take it,
//   which needs r + 1's consume(q - 2K): before stage(q) in the order since stage(q) follows
//   consume(q - kSlices), and kSlices <= 2K.
// A stream runs its operations in order, so by induction each one issued is also executed. The
// proxies wait only on their own flag and socket, never on the main thread or on CUDA.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "options.h"
#include "tcp_proxy.h"
#include "tcp_store.h"

namespace mp {

inline constexpr int kSlices = 2;  // pieces per message
static_assert(kSlices <= 2 * kStagingSlots, "Note [TCP ring memory operations]");

// A piece's place in the data, in words, on this rank.
struct TcpRingPiece {
  std::size_t send_at, send_words;
  std::size_t recv_at, recv_words;
  bool add;  // reduce-scatter: add it in; all-gather: copy it
};

class TcpRing {
 public:
  // Meets the neighbours through `store` and connects the ring (exits 2 naming the peer or
  // address that cannot be reached within --connect-timeout-s), then starts the proxy threads
  // for `allreduces` all-reduces of `words` unsigned 64-bit integers.
  TcpRing(const Options& o, StoreClient& store, CUfunction accumulate, std::size_t words,
          std::uint64_t allreduces);
  ~TcpRing();
  TcpRing(const TcpRing&) = delete;
  TcpRing& operator=(const TcpRing&) = delete;

  // Sums `data` over the ranks, in place, on `stream`.
  void allreduce(CUstream stream, CUdeviceptr data);
  // After the last allreduce has completed: waits for the proxies to finish.
  void close();

 private:
  using Piece = TcpRingPiece;

  void stage(CUstream stream, CUdeviceptr data, std::uint64_t q, const Piece& piece);
  void consume(CUstream stream, CUdeviceptr data, std::uint64_t q, const Piece& piece);

  const Options& o_;
  CUfunction accumulate_;
  std::vector<Piece> pieces_;
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<TcpProxy> proxy_;
  std::uint64_t issued_ = 0;  // pieces issued so far
};

}  // namespace mp
