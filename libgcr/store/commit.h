// The commit sequence of docs §5, step by step, each step durable before the next:
//   seal_packs:      fsync every pack, write each index via tmp/ (fsync, rename), fsync packs/;
//   commit_manifest: write the manifest via tmp/ (fsync), rename it into manifests/, fsync
//                    manifests/ — the checkpoint exists from the rename on;
//   write_tag:       the same for tags/<name>.
// Crash points (fault.h) sit between the steps.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/result.h"
#include "store/layout.h"
#include "store/pack_writer.h"

namespace gcr::store {

Result<std::vector<std::shared_ptr<const PackIndex>>> seal_packs(
    const Layout& layout, std::vector<std::unique_ptr<PackWriter>>& packs);

Status commit_manifest(const Layout& layout, const Manifest& manifest);

// Points tags/<name> at id (replacing an older tag of that name).
Status write_tag(const Layout& layout, std::string_view name, const CheckpointId& id);

}  // namespace gcr::store
