// A ring link's mailbox (ring_layout.h), from both ends.
//
// OwnedMailbox: the receiving rank creates the parts, each by the allocation its transport needs
// (transport.h), zeroes them, and answers the sending rank's requests (serve()).
// PeerMailbox: the sending rank obtains each part from the owner over a socket and maps it.
#pragma once

#include <functional>

#include <array>
#include <memory>

#include "peer_protocol.h"
#include "ring_layout.h"
#include "shared_buffer.h"
#include "transport.h"
#include "unique_fd.h"

namespace mp {

MailboxView view_of(const std::array<std::unique_ptr<SharedBuffer>, kMailboxParts>& parts);

class OwnedMailbox {
 public:
  OwnedMailbox(TransportChoice choice, int link, std::size_t slot_bytes);
  MailboxView view() const { return view_of(parts_); }
  // Answers one peer's requests on `peer` until it says goodbye or hangs up; `handed` is called
  // once the peer has every part (each exported to it by then).
  void serve(const UniqueFd& peer, const std::function<void()>& handed) const;

 private:
  struct Part {
    Transport transport;
    VmmBuffer* vmm = nullptr;  // kScm, kPidfd, kProxy
    UniqueFd kept_fd;          // kPidfd: the export the peer takes with pidfd_getfd
  };
  PartReply describe(int part) const;

  std::array<std::unique_ptr<SharedBuffer>, kMailboxParts> parts_;
  std::array<Part, kMailboxParts> info_;
};

class PeerMailbox {
 public:
  explicit PeerMailbox(const UniqueFd& owner);  // requests and maps every part
  MailboxView view() const { return view_of(parts_); }
  // Unmaps every part, then tells the owner, which may free them.
  void close(const UniqueFd& owner);

 private:
  std::array<std::unique_ptr<SharedBuffer>, kMailboxParts> parts_;
};

}  // namespace mp
