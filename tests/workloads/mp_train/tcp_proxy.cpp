#include "tcp_proxy.h"

#include <sys/socket.h>
#include <unistd.h>

#include <sched.h>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "tcp_socket.h"

namespace mp {

namespace {

constexpr std::size_t kFlagStride = 128;  // bytes: one line per flag

// Ahead of every piece on the wire (host byte order: both ends are this program).
struct PieceHeader {
  std::uint32_t piece;  // its number, mod 2^32
  std::uint32_t bytes;
};

// Spinning on a flag: busy first, then yielding, then sleeping up to 50 us between looks (as
// simgpu's stream waits do), so that a proxy waiting for its stream leaves the CPU to others.
void backoff(unsigned& spins) {
  if (++spins < 64) return;
  if (spins < 128) {
    sched_yield();
    return;
  }
  timespec pause{0, spins - 127 < 50 ? 1000L * (spins - 127) : 50'000L};
  nanosleep(&pause, nullptr);
}

// Waits until *flag >= value, cyclically (as CU_STREAM_WAIT_VALUE_GEQ compares).
void wait_geq(std::uint32_t* flag, std::uint32_t value) {
  std::atomic_ref<std::uint32_t> word(*flag);
  for (unsigned spins = 0;
       static_cast<std::int32_t>(word.load(std::memory_order_acquire) - value) < 0;)
    backoff(spins);
}

void raise(std::uint32_t* flag, std::uint64_t piece) {
  std::atomic_ref<std::uint32_t>(*flag).store(static_cast<std::uint32_t>(piece),
                                              std::memory_order_release);
}

}  // namespace

Staging::Staging(std::size_t slot_bytes)
    : slot_bytes_(slot_bytes),
      flags_(4 * kFlagStride),
      send_(kStagingSlots * slot_bytes),
      recv_(kStagingSlots * slot_bytes) {}

std::uint32_t* Staging::flag(Flag f) const {
  return reinterpret_cast<std::uint32_t*>(flags_.host() + static_cast<int>(f) * kFlagStride);
}

CUdeviceptr Staging::flag_device(Flag f) const {
  return flags_.device() + static_cast<int>(f) * kFlagStride;
}

TcpProxy::TcpProxy(const Staging& staging, int rank, Peer next, Peer prev,
                   std::vector<std::size_t> send_bytes, std::vector<std::size_t> recv_bytes,
                   std::uint64_t allreduces)
    : staging_(staging),
      rank_(rank),
      next_(std::move(next)),
      prev_(std::move(prev)),
      send_bytes_(std::move(send_bytes)),
      recv_bytes_(std::move(recv_bytes)),
      total_(allreduces * send_bytes_.size()) {
  sender_ = std::thread([this] { send_loop(); });
  receiver_ = std::thread([this] { recv_loop(); });
}

TcpProxy::~TcpProxy() {
  join();
}

void TcpProxy::join() {
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
}

void TcpProxy::send_loop() {
  const int fd = next_.socket.get();
  for (std::uint64_t q = 1; q <= total_; ++q) {
    wait_geq(staging_.flag(Flag::kSendReady), static_cast<std::uint32_t>(q));
    const std::size_t bytes = send_bytes_[(q - 1) % send_bytes_.size()];
    PieceHeader header{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(bytes)};
    // MSG_MORE: the header goes out with the piece, not in a segment of its own.
    if (!send_all(fd, &header, sizeof header, MSG_MORE) ||
        !send_all(fd, staging_.send_slot(q), bytes))
      fail(next_, std::string("sending failed: ") + std::strerror(errno));
    raise(staging_.flag(Flag::kSendDone), q);
  }
}

void TcpProxy::recv_loop() {
  const int fd = prev_.socket.get();
  for (std::uint64_t q = 1; q <= total_; ++q) {
    wait_geq(staging_.flag(Flag::kRecvDone), static_cast<std::uint32_t>(q - kStagingSlots));
    const std::size_t bytes = recv_bytes_[(q - 1) % recv_bytes_.size()];
    PieceHeader header;
    if (!recv_all(fd, &header, sizeof header) || !recv_all(fd, staging_.recv_slot(q), bytes)) {
      fail(prev_, errno ? std::string("receiving failed: ") + std::strerror(errno)
                        : "closed by rank " + std::to_string(prev_.rank));
    }
    if (header.piece != static_cast<std::uint32_t>(q) || header.bytes != bytes) {
      fail(prev_, "out of step: piece " + std::to_string(header.piece) + " of " +
                      std::to_string(header.bytes) + " bytes where piece " +
                      std::to_string(static_cast<std::uint32_t>(q)) + " of " +
                      std::to_string(bytes) + " was due");
    }
    raise(staging_.flag(Flag::kRecvReady), q);
  }
}

namespace {
std::atomic<int> leave_code{0};
}  // namespace

void peers_may_leave(int code) {
  leave_code = code;
}

void TcpProxy::fail(const Peer& peer, const std::string& what) const {
  std::fflush(stdout);
  if (int code = leave_code.load()) ::_exit(code);
  std::fprintf(stderr, "mp_train: rank %d: the connection with rank %d (%s): %s\n", rank_,
               peer.rank, peer.address.c_str(), what.c_str());
  // From a proxy thread: no exit handlers while the main thread may be inside the driver.
  ::_exit(2);
}

}  // namespace mp
