// The four ways a mailbox part (ring_layout.h) reaches the rank that maps it, as real programs
// pass device memory between processes:
//   kScm    cuMemCreate (POSIX fd handle type); the owner exports the fd and sends it over the
//           Unix socket with SCM_RIGHTS.
//   kPidfd  cuMemCreate; the owner exports the fd, keeps it open and sends its number; the
//           importer takes it with pidfd_open + pidfd_getfd (PyTorch's expandable segments).
//   kProxy  cuMemCreate; the owner sends the raw allocation handle value; the importer asks the
//           owner's helper thread to export that handle, which answers with the fd over
//           SCM_RIGHTS (NCCL's cuMem path through its proxy thread).
//   kIpc    cuMemAlloc memory; cuIpcGetMemHandle in the owner, cuIpcOpenMemHandle in the peer.
// With --transport rotate (the default), part p of link l goes by transport (p + l) % 4: every
// link uses all four in every run.
#pragma once

#include <string>

namespace mp {

enum class Transport { kScm = 0, kPidfd = 1, kProxy = 2, kIpc = 3 };
inline constexpr int kTransports = 4;

// kTcp is no mailbox transport: the ranks share no memory and talk over TCP (tcp_ring.h).
enum class TransportChoice { kRotate, kScm, kPidfd, kProxy, kIpc, kTcp };

bool parse_transport_choice(const std::string& text, TransportChoice* out);
const char* transport_name(Transport t);
Transport transport_for(TransportChoice choice, int link, int part);

}  // namespace mp
