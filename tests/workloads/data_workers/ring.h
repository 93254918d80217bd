// The batch ring between data_workers' trainer and its worker processes: one slot per worker in a
// POSIX shared-memory object (/dev/shm), mapped before the workers are forked, and two pipes per
// worker that say when a slot is full (worker -> trainer) and free again (trainer -> worker).
//
// The object is unlinked as soon as it is mapped, as PyTorch's DataLoader does with its shared
// tensors: nothing is left in /dev/shm if a process dies, and the mapping lives as long as the
// processes that hold it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace dw {

// A slot: which batch it holds (the trainer checks it), then rows x width floats.
struct SlotHeader {
  std::uint64_t batch_index;
  std::uint32_t worker;
  std::uint32_t rows;
};

class Ring {
 public:
  // Creates, maps and unlinks the object; exits 2 with a message on failure.
  Ring(int slots, std::size_t floats_per_slot);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  SlotHeader* header(int slot) const;
  float* data(int slot) const;
  std::size_t data_bytes() const { return floats_ * sizeof(float); }

 private:
  unsigned char* base_ = nullptr;
  std::size_t slot_bytes_ = 0;
  std::size_t total_bytes_ = 0;
  std::size_t floats_ = 0;
};

// One worker's two pipes, from the side that holds them. A byte on `ready` means the worker's
// slot holds the next batch; a byte on `release` gives the slot back.
struct Channel {
  int ready_read = -1, ready_write = -1;
  int release_read = -1, release_write = -1;
};
Channel open_channel();  // exits 2 on failure
void close_fd(int& fd);

// Reads or writes exactly one byte, retrying on EINTR. False on EOF or error.
bool read_byte(int fd);
bool write_byte(int fd);

}  // namespace dw
