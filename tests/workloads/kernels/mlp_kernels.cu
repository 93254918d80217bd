// Kernels of mlp_train. Every output element is computed by one thread that sums in a fixed
// order, and there are no transcendental functions, so the results do not depend on the launch
// shape, the stream a kernel runs on, or (built with --fmad=false and -ffp-contract=off) whether
// it runs on a GPU or as a CPU twin.
//
// Matrices are row-major. A layer maps n_in to n_out features: w is [n_out][n_in], activations
// are [batch][features].
#include <math.h>

#include "simt.h"

SIMT_DEVICE unsigned long long thread_index() {
  return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// out[b][o] = bias[o] + sum_k in[b][k] * w[o][k], then max(0, .) when relu is set.
SIMT_KERNEL void linear_forward(float* out, const float* in, const float* w, const float* bias,
                                int batch, int n_in, int n_out, int relu) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(batch) * n_out) return;
  int b = static_cast<int>(i / n_out), o = static_cast<int>(i % n_out);
  const float* x = in + static_cast<long long>(b) * n_in;
  const float* wo = w + static_cast<long long>(o) * n_in;
  float acc = bias[o];
  for (int k = 0; k < n_in; ++k) acc += x[k] * wo[k];
  out[i] = relu && acc < 0.0f ? 0.0f : acc;
}
SIMT_TWIN(linear_forward)

// Accumulates the parameter gradients of a layer: thread (o, k) for k < n_in adds
// sum_b g_out[b][o] * in[b][k] to grad_w[o][k]; thread (o, n_in) adds sum_b g_out[b][o] to
// grad_b[o].
SIMT_KERNEL void linear_backward_params(float* grad_w, float* grad_b, const float* g_out,
                                        const float* in, int batch, int n_in, int n_out) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n_out) * (n_in + 1)) return;
  int o = static_cast<int>(i / (n_in + 1)), k = static_cast<int>(i % (n_in + 1));
  float acc = 0.0f;
  if (k == n_in) {
    for (int b = 0; b < batch; ++b) acc += g_out[static_cast<long long>(b) * n_out + o];
    grad_b[o] += acc;
  } else {
    for (int b = 0; b < batch; ++b) {
      acc +=
          g_out[static_cast<long long>(b) * n_out + o] * in[static_cast<long long>(b) * n_in + k];
    }
    grad_w[static_cast<long long>(o) * n_in + k] += acc;
  }
}
SIMT_TWIN(linear_backward_params)

// The gradient flowing into a layer whose input `in` is a ReLU output:
// g_in[b][k] = in[b][k] > 0 ? sum_o g_out[b][o] * w[o][k] : 0.
SIMT_KERNEL void linear_backward_input(float* g_in, const float* g_out, const float* w,
                                       const float* in, int batch, int n_in, int n_out) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(batch) * n_in) return;
  int b = static_cast<int>(i / n_in), k = static_cast<int>(i % n_in);
  float acc = 0.0f;
  if (in[i] > 0.0f) {
    const float* g = g_out + static_cast<long long>(b) * n_out;
    for (int o = 0; o < n_out; ++o) acc += g[o] * w[static_cast<long long>(o) * n_in + k];
  }
  g_in[i] = acc;
}
SIMT_TWIN(linear_backward_input)

// Mean squared error: loss[0] = sum_i (out[i] - target[i])^2 / n, by one thread in index order.
SIMT_KERNEL void mse_loss(float* loss, const float* out, const float* target, int n) {
  if (thread_index() != 0) return;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    float d = out[i] - target[i];
    acc += d * d;
  }
  loss[0] = acc / static_cast<float>(n);
}
SIMT_TWIN(mse_loss)

// The loss's gradient: g[i] = (out[i] - target[i]) * (2 / n).
SIMT_KERNEL void mse_grad(float* g, const float* out, const float* target, int n) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n)) return;
  g[i] = (out[i] - target[i]) * (2.0f / static_cast<float>(n));
}
SIMT_TWIN(mse_grad)

// One Adam step. correction1/2 are 1 - beta1^t and 1 - beta2^t, computed by the host.
SIMT_KERNEL void adam_step(float* param, float* m, float* v, const float* grad, int n, float lr,
                           float beta1, float beta2, float eps, float correction1,
                           float correction2) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(n)) return;
  float g = grad[i];
  float mi = beta1 * m[i] + (1.0f - beta1) * g;
  float vi = beta2 * v[i] + (1.0f - beta2) * (g * g);
  m[i] = mi;
  v[i] = vi;
  float m_hat = mi / correction1;
  float v_hat = vi / correction2;
  param[i] -= lr * m_hat / (sqrtf(v_hat) + eps);
}
SIMT_TWIN(adam_step)

// The ballast table: table[i] uniform in [-1, 1), from a hash of (seed, i).
extern "C" SIMT_KERNEL void mlp_fill_table(float* table, unsigned long long n,
                                           unsigned long long seed) {
  unsigned long long i = thread_index();
  if (i >= n) return;
  unsigned long long z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;  // output i of splitmix64(seed)
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  table[i] = static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
}
SIMT_TWIN(mlp_fill_table)

// x[b][k] += scale * table[row + k] for every sample b: one row of the ballast per step. A C++
// kernel (not extern "C"), so that gcr's write tracking can see from its mangled name that the
// table is only read: the ballast is then not stored again by incremental checkpoints.
SIMT_KERNEL void mlp_add_row(float* x, const float* table, unsigned long long row, int batch,
                             int dim, float scale) {
  unsigned long long i = thread_index();
  if (i >= static_cast<unsigned long long>(batch) * dim) return;
  x[i] += scale * table[row + i % dim];
}
SIMT_TWIN(mlp_add_row)
