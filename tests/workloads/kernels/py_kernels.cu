// Kernels of py_train.py, built into the kernel library libpy_kernels.so (gcr_add_workload
// SHARED): a linear model y = W x trained with SGD against a teacher, and an iterated integer map
// over a "state" buffer that makes every step dirty a known amount of device memory.
//
// Every output element is computed by one thread summing in a fixed order, with no transcendental
// functions, so the results are bit-identical on a GPU and as CPU twins. The names are extern "C"
// (py_train.py looks them up by these plain names) and prefixed py_, since the library exports
// them.
#include "simt.h"

SIMT_DEVICE unsigned long long thread_index() {
  return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// out[b][o] = sum_k x[b][k] * w[o][k]; w is [n_out][n_in], x [batch][n_in], out [batch][n_out].
extern "C" SIMT_KERNEL void py_linear(float* out, const float* x, const float* w, int batch,
                                      int n_in, int n_out) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(batch) * n_out) return;
  int b = static_cast<int>(i / n_out), o = static_cast<int>(i % n_out);
  const float* xb = x + static_cast<long long>(b) * n_in;
  const float* wo = w + static_cast<long long>(o) * n_in;
  float acc = 0.0f;
  for (int k = 0; k < n_in; ++k) acc += xb[k] * wo[k];
  out[i] = acc;
}
SIMT_TWIN(py_linear)

// One SGD step on the squared error: thread (o, k) computes
// g = sum_b (pred[b][o] - y[b][o]) * x[b][k] and sets w[o][k] -= scale * g.
extern "C" SIMT_KERNEL void py_sgd_update(float* w, const float* pred, const float* y,
                                          const float* x, int batch, int n_in, int n_out,
                                          float scale) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n_out) * n_in) return;
  int o = static_cast<int>(i / n_in), k = static_cast<int>(i % n_in);
  float g = 0.0f;
  for (int b = 0; b < batch; ++b) {
    long long r = static_cast<long long>(b) * n_out + o;
    g += (pred[r] - y[r]) * x[static_cast<long long>(b) * n_in + k];
  }
  w[i] -= scale * g;
}
SIMT_TWIN(py_sgd_update)

// loss[0] = mean over n of (pred - y)^2, summed in index order by a single thread.
extern "C" SIMT_KERNEL void py_mse(float* loss, const float* pred, const float* y, int n) {
  if (thread_index() != 0) return;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    float d = pred[i] - y[i];
    acc += d * d;
  }
  loss[0] = acc / static_cast<float>(n);
}
SIMT_TWIN(py_mse)

// An iterated map over n words: s[i] = (s[i] ^ (salt + i)) * 0x9e3779b1 + (s[i] >> 15). With
// salt = 0 on a zeroed buffer it also fills the state.
extern "C" SIMT_KERNEL void py_mix(unsigned* s, unsigned long long n, unsigned salt) {
  unsigned long long i = thread_index();
  if (i >= n) return;
  unsigned v = s[i];
  s[i] = (v ^ (salt + static_cast<unsigned>(i))) * 0x9e3779b1u + (v >> 15);
}
SIMT_TWIN(py_mix)
