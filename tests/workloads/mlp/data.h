// The synthetic task of mlp_train, generated on the host from the seed alone: inputs uniform in
// [-1, 1)^kInputDim, targets from a fixed random "teacher" network (64 -> 32 ReLU -> 16).
#pragma once

#include <cstdint>
#include <vector>

namespace mlp {

// Independent generator states for the parts of a run, so that each depends on (seed, what, i)
// only, not on the order the program draws them in.
enum class Draw : std::uint64_t { kTeacher = 1, kInit, kBatch, kTableRow, kTable };
std::uint64_t draw_state(std::uint64_t seed, Draw what, std::uint64_t i);

class Teacher {
 public:
  explicit Teacher(std::uint64_t seed);
  // The batch of a step: x is [batch][kInputDim], y is [batch][kOutputDim].
  void make_batch(std::uint64_t step, int batch, float* x, float* y) const;

 private:
  static constexpr int kHidden = 32;
  std::uint64_t seed_;
  std::vector<float> w1_, b1_, w2_;
};

// A layer's initial parameters, laid out as on the device: w [n_out][n_in], then bias [n_out].
std::vector<float> initial_layer(std::uint64_t seed, int layer, int n_in, int n_out);

}  // namespace mlp
