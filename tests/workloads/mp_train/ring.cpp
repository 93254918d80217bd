#include "ring.h"

#include <sys/prctl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "socket.h"
#include "workload_util.h"

namespace mp {

namespace {
constexpr int kConnectTimeoutMs = 60'000;

// Lets the peer on `socket` take fds from this process with pidfd_getfd where Yama's
// ptrace_scope 1 would otherwise forbid it (a no-op without Yama).
void allow_peer_to_take_fds(const UniqueFd& socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(cred.pid), 0, 0, 0);
  }
}
}  // namespace

std::string ring_socket_name(const std::string& job, int rank) {
  return "mp_train." + job + "." + std::to_string(rank);
}

Ring::Ring(const Options& o, CUfunction allreduce_kernel, std::size_t words)
    : o_(o), kernel_(allreduce_kernel), words_(words) {
  std::size_t max_chunk_words = (words + o.ranks - 1) / o.ranks;
  mine_ = std::make_unique<OwnedMailbox>(o.transport, o.rank,
                                         max_chunk_words * sizeof(unsigned long long));
  listener_ = listen_abstract(ring_socket_name(o.job, o.rank));
  CUcontext context = nullptr;
  CU_CHECK(cuCtxGetCurrent(&context));
  // The helper thread: serves the previous rank (hands out the mailbox, exports handles for it
  // as NCCL's proxy thread does) until it says goodbye.
  std::future<void> handed = handed_.get_future();
  helper_ = std::thread([this, context] {
    CU_CHECK(cuCtxSetCurrent(context));
    UniqueFd peer = accept_one(listener_);
    allow_peer_to_take_fds(peer);
    mine_->serve(peer, [this] { handed_.set_value(); });
  });
  next_socket_ =
      connect_abstract(ring_socket_name(o.job, (o.rank + 1) % o.ranks), kConnectTimeoutMs);
  next_ = std::make_unique<PeerMailbox>(next_socket_);
  // Set up as NCCL's init is: every buffer of the ring is shared (exported and imported) before
  // any rank communicates through it, so every rank sees the same launches as communication.
  if (handed.wait_for(std::chrono::milliseconds(kConnectTimeoutMs)) != std::future_status::ready) {
    std::fprintf(stderr, "mp_train: rank %d: the previous rank did not take this rank's mailbox\n",
                 o.rank);
    std::exit(2);
  }
}

Ring::~Ring() {
  if (helper_.joinable()) close();
}

void Ring::allreduce(CUstream stream, CUdeviceptr data) {
  MailboxView mine = mine_->view(), next = next_->view();
  CU_CHECK(wl::launch(kernel_, wl::Dims{1, 1}, stream, data,
                      static_cast<unsigned long long>(words_), o_.rank, o_.ranks, seq_, mine,
                      next));
  seq_ += 2 * static_cast<unsigned long long>(o_.ranks - 1);
}

void Ring::barrier(CUstream stream) {
  auto word = [](const MailboxView& v) {
    return reinterpret_cast<CUdeviceptr>(v.flags + kBarrierWord);
  };
  ++barrier_round_;
  CU_CHECK(cuStreamWriteValue64(stream, word(next_->view()), barrier_round_, 0));
  CU_CHECK(
      cuStreamWaitValue64(stream, word(mine_->view()), barrier_round_, CU_STREAM_WAIT_VALUE_GEQ));
}

void Ring::close() {
  next_->close(next_socket_);
  next_.reset();
  helper_.join();
  mine_.reset();
}

}  // namespace mp
