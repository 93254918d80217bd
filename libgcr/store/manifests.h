// Manifest files in a store: loading one by id (checked against its file name), listing the
// committed checkpoints, the tags that name them, and how an object is named in messages.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/result.h"
#include "store/layout.h"

namespace gcr::store {

// Reads and decodes manifests/<id>.manifest; not_found when it does not exist.
Result<Manifest> load_manifest(const Layout& layout, const CheckpointId& id);

// Ids of every committed checkpoint (manifests/<id>.manifest), sorted.
Result<std::vector<CheckpointId>> list_checkpoint_ids(const Layout& layout);

// tag name -> checkpoint id, for every readable tag file.
Result<std::map<std::string, CheckpointId>> read_tags(const Layout& layout);

// "region 0x7f0000000000 (device 0)", "file pages-1.img", "blob gcr.state".
std::string object_label(const ObjectEntry& o);

// "3f2a…" or "3f2a… (job-7)".
std::string checkpoint_label(const CheckpointId& id, const std::vector<std::string>& tags);

}  // namespace gcr::store
