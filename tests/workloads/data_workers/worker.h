// A data worker: a forked process that never calls CUDA. It fills its ring slot with batches
// worker, worker + workers, worker + 2 * workers, ... and hands each one over (ring.h).
#pragma once

#include <cstdint>

#include "ring.h"

namespace dw {

struct BatchShape {
  int rows;
  int width;
};

// Batch `index` of a run: rows x width floats in [-1, 1) from splitmix64, seeded by the run's
// seed and the batch index only (so the data does not depend on how many workers there are).
void make_batch(std::uint64_t seed, std::uint64_t index, BatchShape shape, float* out);

// The worker's main loop, in the forked child; returns its exit code: 0 after its last batch was
// released, 3 if the trainer went away first.
int run_worker(const Ring& ring, Channel channel, int worker, int workers, int steps,
               std::uint64_t seed, BatchShape shape);

}  // namespace dw
