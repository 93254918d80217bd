// Creating, mapping and checking the gcr-control mailbox, and the shared futex on it
// (Note [Why a mailbox] in mailbox.h; docs/protocol.md §2).
#include "mailbox.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <new>
#include <string>

namespace gcr::control {

MailboxMap& MailboxMap::operator=(MailboxMap&& o) noexcept {
  if (this != &o) {
    reset();
    box_ = o.release();
  }
  return *this;
}

MailboxLayout* MailboxMap::release() noexcept {
  MailboxLayout* b = box_;
  box_ = nullptr;
  return b;
}

void MailboxMap::reset() noexcept {
  if (box_) munmap(box_, kMailboxBytes);
  box_ = nullptr;
}

Result<MailboxMap> MailboxMap::map(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno_error("mailbox: fstat");
  if (st.st_size < static_cast<off_t>(kMailboxBytes))
    return make_error(Errc::protocol, "mailbox: " + std::to_string(st.st_size) +
                                          " bytes, a gcr mailbox has " +
                                          std::to_string(kMailboxBytes));
  // The process may be hostile: a mailbox it could shrink after we map it would kill us with
  // SIGBUS (gcrd, root). create_mailbox() seals it; anything else is refused.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return make_error(Errc::protocol, "mailbox: not sealed against shrinking (seals " +
                                          std::to_string(seals) + "); not a gcr mailbox, refused");
  void* p = mmap(nullptr, kMailboxBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_error("mailbox: mmap");
  MailboxMap m;
  m.box_ = static_cast<MailboxLayout*>(p);
  return m;
}

Result<UniqueFd> create_mailbox(MailboxMap* map) {
  UniqueFd fd(memfd_create(kMailboxName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return errno_error("memfd_create(\"gcr-control\")");
  if (ftruncate(fd.get(), kMailboxBytes) != 0) return errno_error("mailbox: ftruncate");
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return errno_error("mailbox: F_ADD_SEALS");
  GCR_TRY_ASSIGN(MailboxMap m, MailboxMap::map(fd.get()));
  // The page is zero; the atomics and counters start at zero as the protocol wants.
  MailboxLayout* box = new (m.get()) MailboxLayout{};
  box->magic = kMailboxMagic;
  box->major = kMailboxMajor;
  box->minor = kMailboxMinor;
  *map = std::move(m);
  return fd;
}

Status check_mailbox(const MailboxLayout& box, pid_t pid) {
  std::string who = "process " + std::to_string(pid);
  if (box.magic != kMailboxMagic)
    return make_error(Errc::protocol, who +
                                          " has a memfd named gcr-control that is not a gcr "
                                          "control mailbox (bad magic)");
  if (box.major != kMailboxMajor)
    return make_error(Errc::unsupported,
                      who + " has a gcr control mailbox of version " + std::to_string(box.major) +
                          "." + std::to_string(box.minor) + ", this gcr speaks " +
                          std::to_string(kMailboxMajor) + "." + std::to_string(kMailboxMinor) +
                          "; use the gcr that started the process");
  return ok();
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, int timeout_ms) noexcept {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
  // Not FUTEX_PRIVATE_FLAG: the other side is another process mapping the same memfd.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected,
          timeout_ms < 0 ? nullptr : &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace gcr::control
