#include "ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace dw {
namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "data_workers: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(2);
}

}  // namespace

Ring::Ring(int slots, std::size_t floats_per_slot) : floats_(floats_per_slot) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  slot_bytes_ = (sizeof(SlotHeader) + floats_ * sizeof(float) + page - 1) / page * page;
  total_bytes_ = slot_bytes_ * static_cast<std::size_t>(slots);
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const std::string name =
      "/gcr-data-workers-" + std::to_string(getpid()) + "-" + std::to_string(now.tv_nsec);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) die("shm_open " + name);
  if (ftruncate(fd, static_cast<off_t>(total_bytes_)) != 0) {
    shm_unlink(name.c_str());
    die("ftruncate " + name);
  }
  void* p = mmap(nullptr, total_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = errno;
  shm_unlink(name.c_str());
  close(fd);
  errno = saved;
  if (p == MAP_FAILED) die("mmap " + name);
  base_ = static_cast<unsigned char*>(p);
}

Ring::~Ring() {
  if (base_) munmap(base_, total_bytes_);
}

SlotHeader* Ring::header(int slot) const {
  return reinterpret_cast<SlotHeader*>(base_ + slot_bytes_ * static_cast<std::size_t>(slot));
}

float* Ring::data(int slot) const {
  return reinterpret_cast<float*>(header(slot) + 1);
}

Channel open_channel() {
  int ready[2], release[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(release, O_CLOEXEC) != 0) die("pipe2");
  return Channel{ready[0], ready[1], release[0], release[1]};
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

bool read_byte(int fd) {
  char c;
  for (;;) {
    ssize_t n = read(fd, &c, 1);
    if (n == 1) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

bool write_byte(int fd) {
  const char c = 1;
  for (;;) {
    ssize_t n = write(fd, &c, 1);
    if (n == 1) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

}  // namespace dw
