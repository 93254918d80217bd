// Kernels of mp_train (data-parallel MLP training over a ring of processes).
//
// mp_train reuses mlp_train's forward, input-gradient and Adam kernels (included below) and adds
// what data parallelism needs. Gradients and the loss are summed as 64-bit fixed-point integers:
// each micro-batch's float sum (a fixed order within the micro-batch) is converted exactly once,
// and integer addition does not depend on order, so the ring all-reduce gives the same bits as a
// single process summing the same micro-batches, whatever the number of ranks. Unsigned
// arithmetic, so that a sum wraps instead of overflowing.
//
// The ring kernel is one thread: a twin runs the threads of a block one after another, so no
// thread may wait for another thread of its own grid; it waits only for its peers (simt.h).
#include "../mp_train/ring_layout.h"
#include "mlp_kernels.cu"

namespace {
constexpr float kFixedScale = 0x1p40f;
constexpr float kFixedUnscale = 0x1p-40f;
constexpr float kFixedLimit = 0x1p58f;  // 12 micro-batches of +-2^58 fit in a signed 64 bits
}  // namespace

SIMT_DEVICE unsigned long long to_fixed(float x) {
  float y = x * kFixedScale;                // exact: a power of two
  if (!(y < kFixedLimit)) y = kFixedLimit;  // also NaN
  if (y < -kFixedLimit) y = -kFixedLimit;
  return static_cast<unsigned long long>(static_cast<long long>(y));
}

SIMT_DEVICE float from_fixed(unsigned long long v) {
  return static_cast<float>(static_cast<long long>(v)) * kFixedUnscale;
}

// First sample of micro-batch m of a global batch of `batch` samples split into `micro` parts.
SIMT_DEVICE int micro_begin(int m, int batch, int micro) {
  return static_cast<int>(static_cast<long long>(m) * batch / micro);
}

// The parameter gradients of a layer over micro-batches [m_begin, m_end) of the global batch, of
// which this rank holds the samples from `sample0` on: thread (o, k) writes
// sum_m fixed(sum_{b in m} g_out[b][o] * in[b][k]) to fixed[o][k], k == n_in being the bias.
SIMT_KERNEL void mp_backward_params(unsigned long long* fixed, const float* g_out, const float* in,
                                    int n_in, int n_out, int batch, int micro, int m_begin,
                                    int m_end, int sample0) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n_out) * (n_in + 1)) return;
  int o = static_cast<int>(i / (n_in + 1)), k = static_cast<int>(i % (n_in + 1));
  unsigned long long total = 0;
  for (int m = m_begin; m < m_end; ++m) {
    int lo = micro_begin(m, batch, micro) - sample0,
        hi = micro_begin(m + 1, batch, micro) - sample0;
    float acc = 0.0f;
    for (int b = lo; b < hi; ++b) {
      float g = g_out[static_cast<long long>(b) * n_out + o];
      acc += k == n_in ? g : g * in[static_cast<long long>(b) * n_in + k];
    }
    total += to_fixed(acc);
  }
  long long at =
      k == n_in ? static_cast<long long>(n_out) * n_in + o : static_cast<long long>(o) * n_in + k;
  fixed[at] = total;
}
SIMT_TWIN(mp_backward_params)

// The summed squared error over micro-batches [m_begin, m_end), in fixed point, by one thread.
SIMT_KERNEL void mp_squared_error(unsigned long long* fixed, const float* out, const float* target,
                                  int n_out, int batch, int micro, int m_begin, int m_end,
                                  int sample0) {
  if (thread_index() != 0) return;
  unsigned long long total = 0;
  for (int m = m_begin; m < m_end; ++m) {
    long long lo = static_cast<long long>(micro_begin(m, batch, micro) - sample0) * n_out;
    long long hi = static_cast<long long>(micro_begin(m + 1, batch, micro) - sample0) * n_out;
    float acc = 0.0f;
    for (long long i = lo; i < hi; ++i) {
      float d = out[i] - target[i];
      acc += d * d;
    }
    total += to_fixed(acc);
  }
  fixed[0] = total;
}
SIMT_TWIN(mp_squared_error)

// The MSE's gradient on this rank's samples, scale being 2 / (elements of the global batch).
SIMT_KERNEL void mp_mse_grad(float* g, const float* out, const float* target, int n, float scale) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n)) return;
  g[i] = (out[i] - target[i]) * scale;
}
SIMT_TWIN(mp_mse_grad)

SIMT_KERNEL void mp_from_fixed(float* out, const unsigned long long* in, int n) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n)) return;
  out[i] = from_fixed(in[i]);
}
SIMT_TWIN(mp_from_fixed)

namespace {

// Sends message `seq` (n words from src) into the next rank's mailbox, once it has freed the slot.
SIMT_DEVICE void ring_send(const mp::MailboxView& next, unsigned long long seq,
                           const unsigned long long* src, unsigned long long n) {
  simt_spin_geq(next.flags + mp::kAckWord, seq - mp::kSlots);
  unsigned long long* slot = next.slot[seq % mp::kSlots];
  for (unsigned long long i = 0; i < n; ++i) slot[i] = src[i];
  simt_store_release_sys(next.flags + mp::kSeqWord, seq);
}

// Waits for message `seq` in this rank's mailbox; returns its slot (call ring_consumed after).
SIMT_DEVICE const unsigned long long* ring_receive(const mp::MailboxView& mine,
                                                   unsigned long long seq) {
  simt_spin_geq(mine.flags + mp::kSeqWord, seq);
  return mine.slot[seq % mp::kSlots];
}

SIMT_DEVICE void ring_consumed(const mp::MailboxView& mine, unsigned long long seq) {
  simt_store_release_sys(mine.flags + mp::kAckWord, seq);
}

SIMT_DEVICE unsigned long long chunk_begin(int c, unsigned long long n, int ranks) {
  return n * static_cast<unsigned long long>(c) / static_cast<unsigned long long>(ranks);
}

}  // namespace

// Sums `data` (n words) over the ranks, in place, with a ring reduce-scatter then all-gather:
// 2 (ranks - 1) messages, numbered seq0 + 1 on. Rank r receives from r - 1 into `mine` and sends
// to r + 1 through `next`. Launch with one thread.
SIMT_KERNEL void mp_ring_allreduce(unsigned long long* data, unsigned long long n, int rank,
                                   int ranks, unsigned long long seq0, mp::MailboxView mine,
                                   mp::MailboxView next) {
  if (thread_index() != 0) return;
  unsigned long long seq = seq0;
  for (int step = 0; step < 2 * (ranks - 1); ++step) {
    bool reducing = step < ranks - 1;
    int k = reducing ? step : step - (ranks - 1);
    int send_chunk = ((reducing ? rank : rank + 1) - k + 2 * ranks) % ranks;
    int recv_chunk = (send_chunk - 1 + ranks) % ranks;
    ++seq;
    unsigned long long s0 = chunk_begin(send_chunk, n, ranks);
    ring_send(next, seq, data + s0, chunk_begin(send_chunk + 1, n, ranks) - s0);
    unsigned long long r0 = chunk_begin(recv_chunk, n, ranks);
    unsigned long long count = chunk_begin(recv_chunk + 1, n, ranks) - r0;
    const unsigned long long* slot = ring_receive(mine, seq);
    for (unsigned long long i = 0; i < count; ++i) {
      data[r0 + i] = reducing ? data[r0 + i] + slot[i] : slot[i];
    }
    ring_consumed(mine, seq);
  }
}
SIMT_TWIN(mp_ring_allreduce)

// --transport tcp: folds a received piece (in pinned staging) into the data: adds it in during the
// reduce-scatter (add != 0), copies it during the all-gather.
SIMT_KERNEL void mp_accumulate(unsigned long long* data, const unsigned long long* in,
                               unsigned long long n, int add) {
  unsigned long long i = thread_index();
  if (i >= n) return;
  data[i] = add ? data[i] + in[i] : in[i];
}
SIMT_TWIN(mp_accumulate)

// --ballast-mib: p[i] = splitmix64's finalizer of seed + (first + i) * golden, for i < n (p being
// word `first` of the ballast): a function of the seed and the word's place only.
SIMT_KERNEL void mp_ballast_write(unsigned long long* p, unsigned long long n,
                                  unsigned long long first, unsigned long long seed) {
  unsigned long long i = thread_index();
  if (i >= n) return;
  unsigned long long z = seed + (first + i) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  p[i] = z ^ (z >> 31);
}
SIMT_TWIN(mp_ballast_write)
