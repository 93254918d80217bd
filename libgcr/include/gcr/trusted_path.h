// Paths root may trust: what only root can change. A root process that runs a program, loads a
// library or opens a file named by a path someone else could change (a link made, a directory
// renamed, the file rewritten) does that someone's bidding.
#pragma once

#include <filesystem>
#include <optional>

namespace gcr {

// Whether only root can change what `path` names: the file, every directory on the way and every
// link followed owned by root and writable by no one else (root's group aside), but for sticky
// directories (/tmp), whose entries of root's others cannot replace. A name that does not exist
// yet counts when only root could make it.
bool only_root_can_change(const std::filesystem::path& path);

// `value`, the path the environment variable `name` gave (GCR_CRIU, GCR_GCRD, GCR_REAL_LIBCUDA,
// ...: Settings keeps them as set, gcr/settings.h): a program, library or file gcr would run, load
// or read. As root, taken only when only root can change it; else left out, with one line on
// stderr saying why, once per name (under `sudo -E` a user's variable would otherwise run that
// user's code as root). nullopt when `value` is nullopt or empty.
std::optional<std::filesystem::path> path_for_root(
    const char* name, const std::optional<std::filesystem::path>& value);

// path_for_root(name, the variable `name` read now), for programs that read their own
// environment (the interposer, the CRIU plugin) and for variables not in Settings.
std::optional<std::filesystem::path> env_path_for_root(const char* name);

}  // namespace gcr
