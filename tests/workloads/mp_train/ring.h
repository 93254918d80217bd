// This rank's place in the ring: the mailbox it owns (link `rank`, written by the previous rank),
// the helper thread that hands it out and exports on request, and the next rank's mailbox,
// mapped here. allreduce() launches the ring kernel (mp_kernels.cu) on a stream.
#pragma once

#include <cuda.h>

#include <future>
#include <memory>
#include <string>
#include <thread>

#include "mailbox.h"
#include "options.h"
#include "unique_fd.h"

namespace mp {

class Ring {
 public:
  // Connects to the neighbours (blocking until they are up). `words`: the length of every
  // all-reduce.
  Ring(const Options& options, CUfunction allreduce_kernel, std::size_t words);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Sums `data` (`words` unsigned 64-bit integers) over the ranks, in place, on `stream`.
  void allreduce(CUstream stream, CUdeviceptr data);
  // A barrier of stream memory operations on `stream`: tells the next rank this rank got here,
  // then waits (the host too) until the previous rank did.
  void barrier(CUstream stream);
  // After the last allreduce has completed: unmaps the next rank's mailbox, and waits for the
  // previous rank to do the same with ours before it is freed.
  void close();

 private:
  const Options& o_;
  CUfunction kernel_;
  std::size_t words_;
  unsigned long long seq_ = 0;
  unsigned long long barrier_round_ = 0;
  std::unique_ptr<OwnedMailbox> mine_;
  UniqueFd listener_;
  std::thread helper_;
  std::promise<void> handed_;  // set by the helper once the previous rank has the whole mailbox
  UniqueFd next_socket_;
  std::unique_ptr<PeerMailbox> next_;
};

std::string ring_socket_name(const std::string& job, int rank);

}  // namespace mp
