// Messages between a rank and the helper thread of the next rank (the owner of the mailbox the
// rank sends into), over one Unix stream socket per link. Fixed-size, host byte order: both ends
// are the same binary on the same machine.
//
//   kGetPart {part}       -> PartReply; for kScm with the part's fd attached
//   kProxyExport {handle} -> PartReply {size}, with the fd of the owner's export of `handle`
//   kBye                  -> PartReply {}: the sender has unmapped everything; the helper ends
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mp {

enum class RequestKind : std::uint32_t { kGetPart = 1, kProxyExport = 2, kBye = 3 };

struct Request {
  RequestKind kind;
  std::uint32_t part;
  std::uint64_t handle;  // kProxyExport: a CUmemGenericAllocationHandle value of the owner
};

struct PartReply {
  std::uint32_t transport;  // Transport
  std::uint32_t reserved;
  std::uint64_t size;      // bytes of the part
  std::int64_t owner_pid;  // kPidfd
  std::int64_t fd_number;  // kPidfd: the fd in the owner's table
  std::uint64_t handle;    // kProxy: the owner's allocation handle
  CUipcMemHandle ipc;      // kIpc
};

}  // namespace mp
