// The shared futex calls of the soft copy-on-write table (gcr/cow_table.h).
#include "gcr/cow_table.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace gcr::cow {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::milliseconds timeout) noexcept {
  long long ms = timeout.count() < 0 ? 0 : timeout.count();
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000L)};
  // Not FUTEX_PRIVATE_FLAG: the other side is another process mapping the same memfd.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace gcr::cow
