#include "data.h"

#include <cmath>

#include "options.h"
#include "workload_util.h"

// Only exactly rounded arithmetic here (no libm but sqrt), so every machine generates the same
// bits.
namespace mlp {

std::uint64_t draw_state(std::uint64_t seed, Draw what, std::uint64_t i) {
  std::uint64_t s = seed;
  s = wl::splitmix64(s) ^ static_cast<std::uint64_t>(what);
  s = wl::splitmix64(s) ^ i;
  return wl::splitmix64(s);
}

Teacher::Teacher(std::uint64_t seed) : seed_(seed) {
  std::uint64_t s = draw_state(seed, Draw::kTeacher, 0);
  w1_.resize(kHidden * kInputDim);
  b1_.resize(kHidden);
  w2_.resize(kOutputDim * kHidden);
  // Scaled so that hidden units and targets have roughly unit variance.
  for (float& w : w1_) w = 0.375f * wl::uniform_pm1(s);
  for (float& b : b1_) b = 0.1f * wl::uniform_pm1(s);
  for (float& w : w2_) w = 0.433f * wl::uniform_pm1(s);
}

void Teacher::make_batch(std::uint64_t step, int batch, float* x, float* y) const {
  std::uint64_t s = draw_state(seed_, Draw::kBatch, step);
  float h[kHidden];
  for (int b = 0; b < batch; ++b) {
    float* xb = x + static_cast<std::size_t>(b) * kInputDim;
    for (int k = 0; k < kInputDim; ++k) xb[k] = wl::uniform_pm1(s);
    for (int j = 0; j < kHidden; ++j) {
      float acc = b1_[j];
      for (int k = 0; k < kInputDim; ++k) acc += w1_[j * kInputDim + k] * xb[k];
      h[j] = acc > 0.0f ? acc : 0.0f;
    }
    float* yb = y + static_cast<std::size_t>(b) * kOutputDim;
    for (int o = 0; o < kOutputDim; ++o) {
      float acc = 0.0f;
      for (int j = 0; j < kHidden; ++j) acc += w2_[o * kHidden + j] * h[j];
      yb[o] = acc;
    }
  }
}

std::vector<float> initial_layer(std::uint64_t seed, int layer, int n_in, int n_out) {
  std::uint64_t s = draw_state(seed, Draw::kInit, static_cast<std::uint64_t>(layer));
  const float bound = static_cast<float>(std::sqrt(6.0 / n_in));  // He-uniform, for ReLU
  std::vector<float> p(static_cast<std::size_t>(n_out) * (n_in + 1), 0.0f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n_out) * n_in; ++i) {
    p[i] = bound * wl::uniform_pm1(s);
  }
  return p;
}

}  // namespace mlp
