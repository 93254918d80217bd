#include "mailbox.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "socket.h"
#include "workload_util.h"

namespace mp {

namespace {

// pidfd_getfd needs ptrace attach rights over the owner: same user and, under Yama's
// ptrace_scope 1, a PR_SET_PTRACER from the owner (rank.cpp allows its ring neighbours).
UniqueFd take_fd_of(std::int64_t pid, std::int64_t fd_number) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
  if (!pidfd) fail_errno("pidfd_open(" + std::to_string(pid) + ")");
  UniqueFd fd(
      static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), static_cast<int>(fd_number), 0)));
  if (!fd)
    fail_errno("pidfd_getfd(pid " + std::to_string(pid) + ", fd " + std::to_string(fd_number) +
               ")");
  return fd;
}

std::size_t part_bytes(int part, std::size_t slot_bytes) {
  return part == 0 ? kFlagsBytes : slot_bytes;
}

}  // namespace

MailboxView view_of(const std::array<std::unique_ptr<SharedBuffer>, kMailboxParts>& parts) {
  MailboxView v{};
  v.flags = reinterpret_cast<unsigned long long*>(parts[0]->address());
  for (int s = 0; s < kSlots; ++s) {
    v.slot[s] = reinterpret_cast<unsigned long long*>(parts[1 + s]->address());
  }
  return v;
}

OwnedMailbox::OwnedMailbox(TransportChoice choice, int link, std::size_t slot_bytes) {
  for (int p = 0; p < kMailboxParts; ++p) {
    Part& info = info_[p];
    info.transport = transport_for(choice, link, p);
    std::size_t bytes = part_bytes(p, slot_bytes);
    if (info.transport == Transport::kIpc) {
      parts_[p] = std::make_unique<IpcBuffer>(bytes);
    } else {
      auto vmm = std::make_unique<VmmBuffer>(bytes);
      info.vmm = vmm.get();
      if (info.transport == Transport::kPidfd) info.kept_fd = vmm->export_fd();
      parts_[p] = std::move(vmm);
    }
    CU_CHECK(cuMemsetD8(parts_[p]->address(), 0, parts_[p]->size()));
  }
  CU_CHECK(cuCtxSynchronize());  // zeroed flags before any peer can see them
}

PartReply OwnedMailbox::describe(int part) const {
  const Part& info = info_[part];
  PartReply reply{};
  reply.transport = static_cast<std::uint32_t>(info.transport);
  reply.size = parts_[part]->size();
  switch (info.transport) {
    case Transport::kScm:
      break;
    case Transport::kPidfd:
      reply.owner_pid = ::getpid();
      reply.fd_number = info.kept_fd.get();
      break;
    case Transport::kProxy:
      reply.handle = info.vmm->handle();
      break;
    case Transport::kIpc:
      reply.ipc = static_cast<const IpcBuffer&>(*parts_[part]).ipc_handle();
      break;
  }
  return reply;
}

void OwnedMailbox::serve(const UniqueFd& peer, const std::function<void()>& handed) const {
  Request request;
  int parts_handed = 0;
  auto one_handed = [&] {
    if (++parts_handed == kMailboxParts) handed();
  };
  while (receive_message(peer, &request, sizeof(request))) {
    PartReply reply{};
    switch (request.kind) {
      case RequestKind::kGetPart: {
        if (request.part >= kMailboxParts) {
          std::fprintf(stderr, "mp_train: peer asked for mailbox part %u\n", request.part);
          std::exit(2);
        }
        reply = describe(static_cast<int>(request.part));
        UniqueFd fd;
        if (info_[request.part].transport == Transport::kScm)
          fd = info_[request.part].vmm->export_fd();
        send_message(peer, &reply, sizeof(reply), fd.get());
        if (info_[request.part].transport != Transport::kProxy) one_handed();
        break;
      }
      case RequestKind::kProxyExport: {
        // The proxy's job: export, in this process, a handle value only this process can use.
        const VmmBuffer* found = nullptr;
        for (const Part& info : info_) {
          if (info.vmm && info.vmm->handle() == request.handle) found = info.vmm;
        }
        if (!found) {
          std::fprintf(stderr, "mp_train: proxy asked to export unknown handle 0x%llx\n",
                       static_cast<unsigned long long>(request.handle));
          std::exit(2);
        }
        reply.transport = static_cast<std::uint32_t>(Transport::kProxy);
        reply.size = found->size();
        UniqueFd fd = found->export_fd();
        send_message(peer, &reply, sizeof(reply), fd.get());
        one_handed();
        break;
      }
      case RequestKind::kBye:
        send_message(peer, &reply, sizeof(reply));
        return;
      default:
        std::fprintf(stderr, "mp_train: unknown request %u from peer\n",
                     static_cast<unsigned>(request.kind));
        std::exit(2);
    }
  }
}

PeerMailbox::PeerMailbox(const UniqueFd& owner) {
  for (int p = 0; p < kMailboxParts; ++p) {
    Request request{RequestKind::kGetPart, static_cast<std::uint32_t>(p), 0};
    send_message(owner, &request, sizeof(request));
    PartReply reply;
    UniqueFd fd;
    if (!receive_message(owner, &reply, sizeof(reply), &fd)) {
      errno = EPIPE;
      fail_errno("mailbox owner hung up");
    }
    switch (static_cast<Transport>(reply.transport)) {
      case Transport::kScm:
        break;
      case Transport::kPidfd:
        fd = take_fd_of(reply.owner_pid, reply.fd_number);
        break;
      case Transport::kProxy: {
        Request ask{RequestKind::kProxyExport, static_cast<std::uint32_t>(p), reply.handle};
        send_message(owner, &ask, sizeof(ask));
        if (!receive_message(owner, &reply, sizeof(reply), &fd)) {
          errno = EPIPE;
          fail_errno("mailbox owner's proxy hung up");
        }
        break;
      }
      case Transport::kIpc:
        parts_[p] = std::make_unique<IpcMapping>(reply.ipc, reply.size);
        continue;
    }
    if (!fd) {
      errno = EPROTO;
      fail_errno("mailbox part " + std::to_string(p) + " came without its fd");
    }
    parts_[p] = std::make_unique<VmmBuffer>(fd, reply.size);
  }
}

void PeerMailbox::close(const UniqueFd& owner) {
  for (auto& part : parts_) part.reset();
  Request bye{RequestKind::kBye, 0, 0};
  send_message(owner, &bye, sizeof(bye));
  PartReply reply;
  if (!receive_message(owner, &reply, sizeof(reply))) {
    errno = EPIPE;
    fail_errno("mailbox owner hung up before goodbye");
  }
}

}  // namespace mp
