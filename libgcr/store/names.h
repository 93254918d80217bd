// Which names the store's files may hold (docs §1, §4): tags, META/STATS keys, object names.
// Shared by the writers that produce them and the readers that must reject anything else.
#pragma once

#include <string_view>

namespace gcr::store {

// A META or STATS key: [a-z0-9_.]+, at most 255 bytes.
bool valid_key(std::string_view key);

// A file or blob name: a relative path, 1..4096 bytes, no NUL, no leading '/', no empty, "." or
// ".." component. It becomes a path under the materialized image directory, so this is the check
// that keeps an image from writing outside it.
bool valid_relative_name(std::string_view name);

}  // namespace gcr::store
