#include "tcp_ring.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tcp_socket.h"
#include "workload_util.h"

namespace mp {

namespace {

constexpr std::uint32_t kHelloMagic = 0x6d707472;  // "mptr"

struct Hello {
  std::uint32_t magic, rank, ranks;
};

[[noreturn]] void ring_fail(int rank, const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "mp_train: rank %d: %s\n", rank, what.c_str());
  std::exit(2);
}

struct Range {
  std::size_t at, words;
};

// Slice s of chunk c, of `words` words cut into `ranks` chunks (mp_ring_allreduce's chunks).
Range slice(std::size_t words, int ranks, int c, int s) {
  std::size_t c0 = words * c / ranks, c1 = words * (c + 1) / ranks;
  std::size_t s0 = c0 + (c1 - c0) * s / kSlices, s1 = c0 + (c1 - c0) * (s + 1) / kSlices;
  return {s0, s1 - s0};
}

// Every rank's all-reduce, piece by piece: message m of the ring is pieces m * kSlices on.
std::vector<TcpRingPiece> plan(std::size_t words, int rank, int ranks) {
  std::vector<TcpRingPiece> pieces;
  for (int m = 0; m < 2 * (ranks - 1); ++m) {
    const bool reducing = m < ranks - 1;
    const int k = reducing ? m : m - (ranks - 1);
    const int send_chunk = ((reducing ? rank : rank + 1) - k + 2 * ranks) % ranks;
    const int recv_chunk = (send_chunk - 1 + ranks) % ranks;
    for (int s = 0; s < kSlices; ++s) {
      Range out = slice(words, ranks, send_chunk, s), in = slice(words, ranks, recv_chunk, s);
      pieces.push_back({out.at, out.words, in.at, in.words, reducing});
    }
  }
  return pieces;
}

// The connections to the next rank and from the previous one, made through the store.
struct RingSockets {
  Peer next, prev;
};

RingSockets connect_ring(const Options& o, StoreClient& store) {
  const int timeout_ms = o.connect_timeout_s * 1000;
  const int next = (o.rank + 1) % o.ranks, prev = (o.rank + o.ranks - 1) % o.ranks;
  HostPort here = o.listen.empty() ? store.local_address() : HostPort{o.listen, 0};
  here.port = 0;
  std::string error;
  UniqueFd listener = tcp_listen(here, 4, &error);
  if (!listener) ring_fail(o.rank, error);
  here.port = tcp_local_address(listener).port;
  store.set("addr/" + std::to_string(o.rank), here.text());

  RingSockets ring{{UniqueFd(), next, ""}, {UniqueFd(), prev, "?"}};
  ring.next.address = store.get("addr/" + std::to_string(next), timeout_ms,
                                "rank " + std::to_string(next) + " sets it once it runs");
  HostPort there;
  if (!parse_host_port(ring.next.address, &there))
    ring_fail(o.rank, "rank " + std::to_string(next) + " published '" + ring.next.address + "'");
  ring.next.socket = tcp_connect(there, timeout_ms, &error, o.listen);
  if (!ring.next.socket) {
    ring_fail(o.rank, "cannot reach rank " + std::to_string(next) + " at " + there.text() + ": " +
                          error + " (tried for " + std::to_string(o.connect_timeout_s) + " s)");
  }
  Hello hello{kHelloMagic, static_cast<std::uint32_t>(o.rank), static_cast<std::uint32_t>(o.ranks)};
  if (!send_all(ring.next.socket.get(), &hello, sizeof hello))
    ring_fail(o.rank, "sending to rank " + std::to_string(next) + " at " + there.text() + ": " +
                          std::strerror(errno));

  ring.prev.socket = tcp_accept(listener, timeout_ms);
  if (!ring.prev.socket || !wait_readable(ring.prev.socket.get(), timeout_ms) ||
      !recv_all(ring.prev.socket.get(), &hello, sizeof hello)) {
    ring_fail(o.rank, "rank " + std::to_string(prev) + " did not connect to " + here.text() +
                          " within " + std::to_string(o.connect_timeout_s) + " s");
  }
  if (hello.magic != kHelloMagic || hello.rank != static_cast<std::uint32_t>(prev) ||
      hello.ranks != static_cast<std::uint32_t>(o.ranks)) {
    ring_fail(o.rank, "a stranger connected to " + here.text() + " (rank " +
                          std::to_string(hello.rank) + " of " + std::to_string(hello.ranks) +
                          "?) where rank " + std::to_string(prev) + " was due");
  }
  ring.prev.address = store.get("addr/" + std::to_string(prev), timeout_ms, "");
  return ring;
}

}  // namespace

TcpRing::TcpRing(const Options& o, StoreClient& store, CUfunction accumulate, std::size_t words,
                 std::uint64_t allreduces)
    : o_(o), accumulate_(accumulate), pieces_(plan(words, o.rank, o.ranks)) {
  std::size_t slot_words = 1;
  std::vector<std::size_t> send_bytes, recv_bytes;
  for (const Piece& p : pieces_) {
    slot_words = std::max({slot_words, p.send_words, p.recv_words});
    send_bytes.push_back(p.send_words * sizeof(unsigned long long));
    recv_bytes.push_back(p.recv_words * sizeof(unsigned long long));
  }
  staging_ = std::make_unique<Staging>(slot_words * sizeof(unsigned long long));
  RingSockets ring = connect_ring(o, store);
  proxy_ = std::make_unique<TcpProxy>(*staging_, o.rank, std::move(ring.next), std::move(ring.prev),
                                      std::move(send_bytes), std::move(recv_bytes), allreduces);
}

TcpRing::~TcpRing() {
  close();
}

void TcpRing::allreduce(CUstream stream, CUdeviceptr data) {
  const std::uint64_t q0 = issued_;
  const std::size_t n = pieces_.size();
  for (std::size_t i = 0; i < kSlices; ++i) stage(stream, data, q0 + 1 + i, pieces_[i]);
  for (std::size_t i = 0; i < n; ++i) {
    consume(stream, data, q0 + 1 + i, pieces_[i]);
    if (i + kSlices < n) stage(stream, data, q0 + 1 + i + kSlices, pieces_[i + kSlices]);
  }
  issued_ += n;
}

void TcpRing::stage(CUstream stream, CUdeviceptr data, std::uint64_t q, const Piece& piece) {
  CU_CHECK(cuStreamWaitValue32(stream, staging_->flag_device(Flag::kSendDone),
                               static_cast<cuuint32_t>(q - kStagingSlots),
                               CU_STREAM_WAIT_VALUE_GEQ));
  if (piece.send_words > 0) {
    CU_CHECK(cuMemcpyDtoHAsync(staging_->send_slot(q),
                               data + piece.send_at * sizeof(unsigned long long),
                               piece.send_words * sizeof(unsigned long long), stream));
  }
  CU_CHECK(cuStreamWriteValue32(stream, staging_->flag_device(Flag::kSendReady),
                                static_cast<cuuint32_t>(q), 0));
}

void TcpRing::consume(CUstream stream, CUdeviceptr data, std::uint64_t q, const Piece& piece) {
  CU_CHECK(cuStreamWaitValue32(stream, staging_->flag_device(Flag::kRecvReady),
                               static_cast<cuuint32_t>(q), CU_STREAM_WAIT_VALUE_GEQ));
  if (piece.recv_words > 0) {
    CU_CHECK(wl::launch(accumulate_, wl::cover(piece.recv_words), stream,
                        data + piece.recv_at * sizeof(unsigned long long),
                        staging_->recv_slot_device(q),
                        static_cast<unsigned long long>(piece.recv_words), piece.add ? 1 : 0));
  }
  CU_CHECK(cuStreamWriteValue32(stream, staging_->flag_device(Flag::kRecvDone),
                                static_cast<cuuint32_t>(q), 0));
}

void TcpRing::close() {
  if (proxy_) proxy_->join();
}

}  // namespace mp
