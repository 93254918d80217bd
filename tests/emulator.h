// Tests of a cross build run under qemu-user (docs/arm64.md): ctest starts each test program
// through CMAKE_CROSSCOMPILING_EMULATOR, which tests/CMakeLists.txt hands the test programs as
// GCR_TEST_EMULATOR. qemu-user does not follow an execve into another program of the emulated
// architecture (that takes a binfmt_misc handler, which a container or CI runner seldom has), so a
// test that starts such a program itself puts the emulator in front (emulated_argv), and a test
// of what qemu-user does not emulate (ptrace, userfaultfd, another process's /proc maps) skips
// with the reason (kUnderEmulator). Header-only: tests/ is on the include path of every target
// linking gcr_catch.
#pragma once

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace gcr::test {

#ifdef GCR_TEST_EMULATOR
inline constexpr bool kUnderEmulator = true;
inline constexpr const char* kEmulator = GCR_TEST_EMULATOR;
#else
inline constexpr bool kUnderEmulator = false;
inline constexpr const char* kEmulator = "";
#endif

// qemu-user runs posix_spawn's vfork as a fork that does not wait for the exec: the parent goes on
// while the child still holds copies of its fds (simgpu's mailbox memfd: the child looks like a
// CUDA process). Made before the spawn, an ExecFence's wait() returns once the child has called
// execve (or died): its copy of the close-on-exec pipe is then closed. Natively it does nothing.
class ExecFence {
 public:
  ExecFence() {
    if (kUnderEmulator && pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~ExecFence() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  ExecFence(const ExecFence&) = delete;
  ExecFence& operator=(const ExecFence&) = delete;
  void wait() {
    if (fds_[1] < 0) return;
    close(fds_[1]);
    fds_[1] = -1;
    char c;
    while (read(fds_[0], &c, 1) < 0 && errno == EINTR) {
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

// True if path is an ELF file for the architecture this program was built for.
inline bool is_own_architecture(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf64_Ehdr h{};
  bool ok = read(fd, &h, sizeof h) == static_cast<ssize_t>(sizeof h);
  close(fd);
#if defined(__aarch64__)
  const unsigned own = EM_AARCH64;
#else
  const unsigned own = EM_X86_64;
#endif
  return ok && h.e_ident[EI_MAG0] == ELFMAG0 && h.e_ident[EI_MAG1] == ELFMAG1 &&
         h.e_ident[EI_MAG2] == ELFMAG2 && h.e_ident[EI_MAG3] == ELFMAG3 && h.e_machine == own;
}

// argv to start a program with: under the emulator, a program of this architecture named by path
// gets the emulator in front; anything else (the host's /bin/true) runs as it is.
inline std::vector<std::string> emulated_argv(std::vector<std::string> argv) {
  if (!kUnderEmulator || argv.empty() || argv[0].find('/') == std::string::npos ||
      !is_own_architecture(argv[0]))
    return argv;
  argv.insert(argv.begin(), kEmulator);
  return argv;
}

}  // namespace gcr::test
