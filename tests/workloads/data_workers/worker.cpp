#include "worker.h"

#include <cstdio>

#include "workload_util.h"

namespace dw {

void make_batch(std::uint64_t seed, std::uint64_t index, BatchShape shape, float* out) {
  std::uint64_t state = seed * 0x100000001b3ull ^ (index + 1) * 0x9e3779b97f4a7c15ull;
  const std::size_t n = static_cast<std::size_t>(shape.rows) * shape.width;
  for (std::size_t i = 0; i < n; ++i) out[i] = wl::uniform_pm1(state);
}

int run_worker(const Ring& ring, Channel channel, int worker, int workers, int steps,
               std::uint64_t seed, BatchShape shape) {
  SlotHeader* header = ring.header(worker);
  float* data = ring.data(worker);
  bool first = true;
  for (int index = worker; index < steps; index += workers) {
    // The slot starts free; afterwards it is ours again once the trainer released the last batch.
    if (!first && !read_byte(channel.release_read)) return 3;
    first = false;
    make_batch(seed, static_cast<std::uint64_t>(index), shape, data);
    header->batch_index = static_cast<std::uint64_t>(index);
    header->worker = static_cast<std::uint32_t>(worker);
    header->rows = static_cast<std::uint32_t>(shape.rows);
    if (!write_byte(channel.ready_write)) return 3;
  }
  // Wait for the release of the last batch (or the end of the trainer), so that the trainer
  // reaps a worker that has finished rather than one it must stop.
  if (!first && !read_byte(channel.release_read)) return 3;
  return 0;
}

}  // namespace dw
