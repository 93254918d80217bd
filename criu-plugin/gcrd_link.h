// The plugin's side of gcrd's socket: for a process running under gcr, gcrd parks and stores its
// device memory and gives it back on restore, while the runtime's CRIU does the rest (Note [CRIU
// run by someone else] in daemon/checkpoint.h; docs/containers.md). The plugin's driver
// steps still checkpoint and restore the process's control state.
//
// What the images directory gets: the reference to the checkpoint (kImagesReferenceName, its
// format in gcrd_protocol.h) and, self-contained, the store itself (kImagesStoreName).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "config.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"

namespace gcr::criu_plugin {

using gcrd::decode_reference;  // the reference's format: gcrd_protocol.h
using gcrd::encode_reference;
using gcrd::ImagesReference;

class GcrdLink {
 public:
  // Dump, at the first PAUSE_DEVICES: gcrd cuts, parks and stores the device memory of every
  // process under gcr in the tree of `pid`, and the reference is written into `images_dir`. None:
  // nothing there runs under gcr, gcrd is off, or not running (logged): the driver's checkpoint
  // alone (the baseline).
  static Result<std::optional<GcrdLink>> begin_dump(const Config& config, int pid, int images_dir);
  // Restore, at init: none when `images_dir` holds no reference (a baseline image). Else gcrd
  // allocates the checkpoint's device memory and starts loading it before CRIU forks anything; a
  // gcrd that is down or cannot fails the restore here, before any process exists.
  static Result<std::optional<GcrdLink>> begin_restore(const Config& config, int images_dir);

  const std::string& checkpoint_id() const { return id_; }
  // Restore: CRIU restored task `pid` (host pid) and the driver its control state.
  void restored(int pid);
  // The exit hook: the root of what CRIU restored (restore, when known), CRIU's result, then the
  // link ends (gcrd finishes on its own).
  void finish(int ret, std::optional<int> root = std::nullopt);

 private:
  GcrdLink(UniqueFd fd, std::string id) : fd_(std::move(fd)), id_(std::move(id)) {}
  UniqueFd fd_;
  std::string id_;
};

}  // namespace gcr::criu_plugin
