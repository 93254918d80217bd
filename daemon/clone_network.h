// The network a clone is restored into (gcr restore --clone).
//
// Note [A clone's network]
// A clone is a second instance of a checkpointed process, restored while the original (and other
// clones) still run. Its pid is taken care of by a PID namespace of its own; what it listens on
// needs a network namespace of its own, or its listening socket would collide with the
// original's (CRIU binds it again at restore). The image holds no network namespace (the process
// shared the host's), so CRIU restores the sockets in whatever namespace it runs in: gcrd runs
// CRIU there (criu::RestoreOptions::netns).
// - --netns PATH: the caller's namespace (`ip netns add`, a container's /proc/PID/ns/net), set up
//   as the caller likes.
// - --address A.B.C.D/N --bridge BR [--gateway G]: gcrd makes one: loopback up, and eth0, one end
//   of a veth pair whose other end joins the bridge BR (the caller's, already up), with the
//   address, and a MAC made of it (02:67:A:B:C:D, as Docker does): a clone restored on the
//   address of one that ended is reached at once, not after the neighbours' ARP entries for the
//   old one time out. The clone is reached at A.B.C.D on the port it listens on (a server bound
//   to a wildcard address, or to A.B.C.D itself).
// - neither: a namespace with loopback alone, reached with `nsenter -t PID -n`.
// gcrd names the namespace it makes (/run/netns/gcr-clone-GCRDPID-XXXXXXXX) only while CRIU
// restores: then the name goes, the namespace lives as long as the clone, and the veth pair goes
// with it. A gcrd killed meanwhile leaves the name: the next gcrd to start removes the names of
// gcrds that are gone (never another live gcrd's, which may be restoring into it).
#pragma once

#include <filesystem>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

struct CloneNetworkSpec {
  std::string netns;    // an existing network namespace (a path); or gcrd makes one, with
  std::string address;  // A.B.C.D/N on eth0 (optional; needs bridge)
  std::string bridge;   // the bridge the veth's other end joins
  std::string gateway;  // optional: the default route's
};

// Checks a spec's form before anything is made (a field at a time, saying what is wrong).
Status check_clone_network(const CloneNetworkSpec& spec);

// Removes /run/netns/gcr-clone-PID-* whose gcrd PID is gone (Note [A clone's network]).
void remove_stale_clone_names();

class CloneNetwork {
 public:
  // The caller's namespace, or a new one set up as the spec says.
  static Result<CloneNetwork> make(const CloneNetworkSpec& spec);
  CloneNetwork(CloneNetwork&& o) noexcept;
  CloneNetwork& operator=(CloneNetwork&&) = delete;
  ~CloneNetwork();  // the name of a namespace gcrd made goes (Note [A clone's network])

  const std::filesystem::path& path() const { return path_; }
  // "10.88.0.11/24 on bridge gcr0", "/run/netns/mine", "loopback only".
  const std::string& description() const { return description_; }

 private:
  CloneNetwork() = default;
  Status set_up(const CloneNetworkSpec& spec, const std::string& ip);

  std::filesystem::path path_;
  std::string description_;
  std::string made_;  // the name of the namespace gcrd made, if it did
};

}  // namespace gcr::gcrd
