// Who a restored process will be: the credentials in CRIU's core images (core-TID.img, one per
// thread: core_entry.thread_core = 5 -> thread_core_entry.creds = 10 -> creds_entry { uid = 1,
// gid = 2, euid = 3, egid = 4, suid = 5, sgid = 6, fsuid = 7, fsgid = 8, cap_inh = 9, cap_prm = 10,
// cap_eff = 11, cap_bnd = 12, groups = 14, cap_amb = 19 }, images/creds.proto and core.proto).
// CRIU restores each thread with exactly these: whoever wrote the images chose them.
//
// Note [Who a peer may run]
// A migration's destination gcrd restores, as root, CRIU images another host wrote: a token holder
// could send images of a process that runs as root, or as any user of this host, with any
// capabilities. So gcrd --listen restores for a peer only processes whose every thread's real,
// effective, saved and file-system uids are among those its operator allowed (--allow-uids), with
// no capability unless uid 0 is allowed, and no gid 0 (real, effective, saved, fs or
// supplementary) unless uid 0 is allowed. Nothing is allowed by default.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::criu {

struct ThreadCreds {
  std::string image;           // core-TID.img, relative to the directory read
  std::uint32_t uids[4] = {};  // real, effective, saved, fs
  std::uint32_t gids[4] = {};
  std::vector<std::uint32_t> groups;
  bool capabilities = false;  // any bit in the inheritable, permitted, effective or ambient set
};

// The credentials of every core-*.img below `dir` (a job's trees sit in subdirectories).
Result<std::vector<ThreadCreds>> read_image_creds(const std::filesystem::path& dir);

// "0,1000-1999" -> {0, 1000, ..., 1999}; an error names what is wrong.
Result<std::set<uid_t>> parse_uid_list(const std::string& text);

// Note [Who a peer may run]: ok, or permission_denied naming the first thread that is not allowed.
Status check_peer_may_run(const std::vector<ThreadCreds>& threads, const std::set<uid_t>& allowed);

}  // namespace gcr::criu
