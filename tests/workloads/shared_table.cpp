// shared_table: two processes sharing one device allocation that stays unchanged for most of the
// run, as a model's weights shared by an inference server's workers: the parent creates a
// cuMemCreate allocation (--table-bytes), fills it once, and sends its fd to a forked child
// (SCM_RIGHTS), which imports and maps it. Each step both read a part of the table and rewrite a
// private buffer of their own (--private-bytes); the parent prints "step K". With --write-at K the
// child, at its step K, writes the table's first MiB through its own mapping and then sends the
// parent a byte, which the parent waits for before its last step: that step reads the first MiB,
// so its result never depends on which process ran ahead. The child then prints "wrote the table
// at step K" (the parent's steps run ahead of the child's).
// At the end the child tells the parent it is done, and each prints "checksum <hex>" of the table
// and its own buffer (FNV-1a); an uninterrupted run prints the same two lines every time, at any
// speed. --delay-while FILE: the step delay only while FILE exists; --hold-while FILE: each
// process waits before its last step while FILE exists (a test that must still find the pair
// running removes it when done); --write-hold FILE: the child waits before its --write-at write
// while FILE exists (a test that needs the write after some point removes it there).
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "workload_util.h"

namespace {

std::uint64_t fnv(const std::vector<std::uint32_t>& words, std::uint64_t h) {
  const auto* p = reinterpret_cast<const unsigned char*>(words.data());
  for (std::size_t i = 0; i < words.size() * 4; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// One byte carrying one fd (SCM_RIGHTS), either way.
struct FdMessage {
  char byte = 't';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

void send_fd(int sock, int fd) {
  FdMessage m;
  cmsghdr* h = CMSG_FIRSTHDR(&m.msg);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(h), &fd, sizeof fd);
  if (sendmsg(sock, &m.msg, 0) != 1) {
    std::perror("shared_table: sendmsg");
    std::exit(2);
  }
}

int receive_fd(int sock) {
  FdMessage m;
  if (recvmsg(sock, &m.msg, 0) != 1 || !CMSG_FIRSTHDR(&m.msg)) {
    std::fprintf(stderr, "shared_table: no fd from the parent\n");
    std::exit(2);
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m.msg)), sizeof fd);
  return fd;
}

void wait_byte(int sock) {
  char byte;
  while (read(sock, &byte, 1) < 0) {
  }
}

CUmemAllocationProp table_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUdeviceptr map_table(CUmemGenericAllocationHandle handle, std::size_t bytes) {
  CUdeviceptr address = 0;
  CU_CHECK(cuMemAddressReserve(&address, bytes, 0, 0, 0));
  CU_CHECK(cuMemMap(address, bytes, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(cuMemSetAccess(address, bytes, &access, 1));
  return address;
}

}  // namespace

int main(int argc, char** argv) {
  wl::Flags flags(argc, argv,
                  "usage: shared_table [--steps N] [--step-delay-ms MS] [--table-bytes B] "
                  "[--private-bytes B] [--write-at K] [--write-hold FILE] [--delay-while FILE] "
                  "[--hold-while FILE]");
  const int steps = static_cast<int>(flags.integer("--steps", 100, 1, 1 << 20));
  const int delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 10, 0, 60000));
  std::uint64_t table_bytes = flags.bytes("--table-bytes", 16ull << 20);
  const std::uint64_t private_bytes = flags.bytes("--private-bytes", 4ull << 20);
  const int write_at = static_cast<int>(flags.integer("--write-at", 0, 0, 1 << 20));
  const std::string delay_while = flags.text("--delay-while", "");
  const std::string hold_while = flags.text("--hold-while", "");
  const std::string write_hold = flags.text("--write-hold", "");
  flags.finish();
  const bool writes = write_at > 0 && write_at <= steps;

  int socks[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks) != 0) {
    std::perror("shared_table: socketpair");
    return 2;
  }
  std::fflush(stdout);
  const pid_t child = fork();  // before any CUDA call: each process makes its own context
  const bool parent = child != 0;
  const int sock = parent ? socks[0] : socks[1];
  close(parent ? socks[1] : socks[0]);

  const wl::PrimaryContext primary;  // cuInit, device 0, its primary context
  CUmemAllocationProp prop = table_prop();
  std::size_t granularity = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  table_bytes = (table_bytes + granularity - 1) / granularity * granularity;

  CUmemGenericAllocationHandle handle = 0;
  if (parent) {
    CU_CHECK(cuMemCreate(&handle, table_bytes, &prop, 0));
  } else {
    int fd = receive_fd(sock);
    CU_CHECK(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<long>(fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
  }
  const CUdeviceptr table = map_table(handle, table_bytes);
  const std::size_t words = table_bytes / 4;
  if (parent) {
    std::vector<std::uint32_t> init(words);
    for (std::size_t i = 0; i < words; ++i) init[i] = static_cast<std::uint32_t>(i * 2654435761u);
    CU_CHECK(cuMemcpyHtoD(table, init.data(), table_bytes));
    int fd = -1;
    CU_CHECK(
        cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    send_fd(sock, fd);
    close(fd);
  }
  CUdeviceptr mine = 0;
  CU_CHECK(cuMemAlloc(&mine, private_bytes));
  std::vector<std::uint32_t> peek(1024);
  for (int step = 1; step <= steps; ++step) {
    if (step == steps) {
      wl::hold_while(hold_while);
      if (parent && writes) wait_byte(sock);  // the child's write is in the table
    }
    const std::size_t at = (static_cast<std::size_t>(step) * 4096) % (table_bytes - 4096);
    CU_CHECK(cuMemcpyDtoH(peek.data(), table + at, 4096));
    CU_CHECK(cuMemsetD32(mine, static_cast<unsigned>(step) ^ peek[0] ^ (parent ? 0u : 1u),
                         private_bytes / 4));
    if (!parent && step == write_at) {
      wl::hold_while(write_hold);
      CU_CHECK(cuMemsetD32(table, 0xC0FFEEu + static_cast<unsigned>(step), (1u << 20) / 4));
    }
    CU_CHECK(cuCtxSynchronize());
    if (!parent && step == write_at) {
      const char wrote = 'w';
      if (write(sock, &wrote, 1) != 1) return 2;
      std::printf("wrote the table at step %d\n", step);
      std::fflush(stdout);
    }
    if (parent) {
      std::printf("step %d\n", step);
      std::fflush(stdout);
    }
    wl::step_delay(delay_ms, delay_while);
  }
  // The table is read once both are done writing it.
  if (parent) {
    wait_byte(sock);
  } else {
    char done = 'd';
    if (write(sock, &done, 1) != 1) return 2;
  }
  std::vector<std::uint32_t> all(words), own(private_bytes / 4);
  CU_CHECK(cuMemcpyDtoH(all.data(), table, table_bytes));
  CU_CHECK(cuMemcpyDtoH(own.data(), mine, private_bytes));
  std::printf("checksum %016llx\n",
              static_cast<unsigned long long>(fnv(own, fnv(all, 0xcbf29ce484222325ull))));
  std::fflush(stdout);
  if (parent) {
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
  }
  return 0;
}
