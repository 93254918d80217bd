// A job: the processes of one tree that run under gcr, checkpointed as one (DESIGN §9 "Jobs, not
// processes"). A tree of one such process is the single-process case; the protocol is the same.
//
// Note [Job checkpoint]
// - Members: every process of the dumped tree whose interposer answers (root first). Each
//   member's regions are named in the checkpoint by its owner name: empty for the tree's root,
//   "pid:N" for another (N: its pid as CRIU dumps it, which a restore gives it back).
// - Shared allocations: members report the keys of what they share (Note [Shared regions] in
//   interpose/vmm_handles.h); views whose keys meet are one allocation, stored once under its
//   canonical view (the exporter's) and recorded in META `shared_views`. Memory shared with a
//   process outside the tree is refused before anything stops, naming that process.
// - The cut (Note [A consistent cut] in interpose/cut.h) runs over each group of members that
//   share memory, then every member is quiesced at once, and parked; one CRIU dump takes the tree.
// - Any failure before the dump gives every member its memory back and lets it run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "gcr/process_tree.h"
#include "gcr/result.h"

namespace gcr::gcrd {

struct Member {
  pid_t pid = 0;      // as gcrd sees it
  std::string owner;  // the name of its regions in the checkpoint
  control::Client client;
};

// The pid a process has in its own (innermost) pid namespace: the one CRIU records.
pid_t innermost_pid(pid_t pid);
// "" for the root of the tree, else "pid:N".
std::string owner_name(pid_t pid, pid_t root);
// The pid an owner name stands for, given the checkpoint's root pid; 0 if malformed.
pid_t owner_pid(const std::string& owner, pid_t root_pid);

// Connects to every process of the tree that runs under gcr, root first. None: an empty list.
Result<std::vector<Member>> connect_members(const criu::ProcessTree& tree,
                                            std::chrono::milliseconds timeout);

struct View {
  std::size_t member = 0;
  std::uint64_t address = 0;
};
// One allocation mapped by several members; views[0] is where it is stored.
struct SharedAllocation {
  std::vector<View> views;
};

// Joins the members' shared regions by key. Refuses (Errc::unsupported) memory shared with a
// process outside the tree, naming it; sharing whose peer is gone is no sharing.
Result<std::vector<SharedAllocation>> find_shared(std::vector<Member>& members,
                                                  const criu::ProcessTree& tree);

// Brings every group of members that share memory to a consistent cut (Note [A consistent cut]);
// on timeout the cut ends and the error names the members that did not arrive.
Status reach_cut(std::vector<Member>& members, const std::vector<SharedAllocation>& shared,
                 std::chrono::milliseconds timeout,
                 const std::function<void(const std::string&)>& progress);
// Lets every member's held launches go (they meet the gate if it is closed).
void end_cut(std::vector<Member>& members);

// Quiesces every member at once; on a failure the others are resumed and the first error returned.
Status quiesce_members(std::vector<Member>& members, std::chrono::milliseconds timeout);

// META job_members: the members' owner names, comma-separated, "-" for the root's (empty) name.
std::string encode_job_members(const std::vector<std::string>& owners);
std::vector<std::string> decode_job_members(const std::string& text);

// META shared_views: one line per view that is not where its allocation is stored,
// "OWNER ADDRESS OWNER ADDRESS" (the view, then the stored region; addresses in hex).
struct SharedView {
  std::string owner;
  std::uint64_t address = 0;
  std::string stored_owner;
  std::uint64_t stored_address = 0;
};
std::string encode_shared_views(const std::vector<SharedView>& views);
Result<std::vector<SharedView>> decode_shared_views(const std::string& text);

}  // namespace gcr::gcrd
