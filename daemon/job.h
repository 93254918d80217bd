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
//
// Note [A job of several trees]
// `gcr checkpoint --job PID PID...` takes processes started on their own (from a shell, by a
// scheduler: no launcher above them all) that share device memory and talk over unix sockets, as
// one job. Its members are those of every PID's tree, cut, quiesced and parked together as above.
// - CRIU dumps one tree at a time: each PID's tree gets its own dump, into the checkpoint's
//   images (the first) or images under trees/PID (the others), each leaving its tasks stopped
//   until every tree is dumped. Each tree's CRIU is started before the cut (Note [CRIU started
//   before the cut] in gcr/criu.h) and let go, one after the other, once the job is parked.
//   META job_trees lists the trees.
// - A unix socket that connects two of the trees is external to each dump (--external
//   unix[INODE] on both sides); META job_sockets pairs them, and the restore connects each pair
//   again with a socketpair handed to both CRIUs (--inherit-fd). Bytes in flight on such a socket
//   would be lost (CRIU restores a queue from its sender's image only): with every tree stopped,
//   a socket with bytes queued fails the checkpoint, which gives every process back.
// - The restore brings the trees back one after the other, each with its original pids (a PID
//   namespace holds one restore's tree), then gives the job its memory as for one tree.
// Left out of this first version: a restore into a new PID namespace, host memory brought in
// lazily on restore, and --cow-dump and host-memory tracking at the checkpoint (each tree is
// frozen while CRIU writes its host memory).
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
#include "job_tcp.h"

namespace gcr::gcrd {

struct Member {
  pid_t pid = 0;      // as gcrd sees it
  std::string owner;  // the name of its regions in the checkpoint
  control::Client client;
  // Its start time, read once its session was open: a member that dies during the checkpoint
  // frees its pid for another process (a restore of the same job takes it back at once), and
  // nothing done by pid after that may reach the newcomer. 0: unknown.
  std::uint64_t started = 0;
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

// A unix socket connecting two trees of a job: `ino` held in trees[tree], its peer `peer_ino` in
// trees[peer_tree].
struct CrossSocket {
  std::uint64_t ino = 0, peer_ino = 0;
  std::size_t tree = 0, peer_tree = 0;
  int type = 0;  // SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
};
struct JobTrees {
  std::vector<criu::ProcessTree> trees;  // one per pid asked, in that order
  criu::ProcessTree all;                 // their union: root trees[0].root, every pid and file
  std::vector<CrossSocket> sockets;      // each connection once
  CarriedTcp tcp;                        // Note [TCP within a job] (job_tcp.h)
};
// Reads each root's tree. Refuses a root that is in another's tree (naming both). A unix socket
// to another tree of the job is not external to its own (CrossSocket).
Result<JobTrees> inspect_job_trees(const std::vector<pid_t>& roots);
// Note [TCP within a job] (job_tcp.h): the TCP connections both of whose ends the job holds are
// carried (job.tcp), no longer external.
void carry_tcp(JobTrees& job);
// The connections whose far end is on another host of the job (Note [A job across hosts] in
// job_link.h): what this host's trees hold of them, and their carrying once the job agreed.
std::vector<TcpConnection> outward_tcp(const JobTrees& job);
void carry_tcp_listed(JobTrees& job, const std::vector<TcpConnection>& listed);
// What `criu dump` of trees[k] needs beyond ProcessTree::dump_arguments: --external unix[INODE]
// for each of its sockets to another tree.
std::vector<std::string> cross_socket_arguments(const JobTrees& job, std::size_t k);
// With every tree stopped: fails, naming both processes, when bytes wait on a socket between two
// trees (Note [A job of several trees]).
Status check_nothing_in_flight(const JobTrees& job);

// META job_trees: one line per tree, "PID" or "PID shell_job" (PID as CRIU dumped it; the first
// line is META pid's tree). META job_sockets: one line per connection, "INODE PEER_INODE TYPE",
// TYPE stream, dgram or seqpacket.
struct JobTree {
  pid_t pid = 0;
  bool shell_job = false;
};
std::string encode_job_trees(const JobTrees& job);
Result<std::vector<JobTree>> decode_job_trees(const std::string& text);
std::string encode_job_sockets(const JobTrees& job);
struct JobSocket {
  std::uint64_t ino = 0, peer_ino = 0;
  int type = 0;
};
Result<std::vector<JobSocket>> decode_job_sockets(const std::string& text);
// Where trees[k]'s CRIU images are, under the checkpoint's images (k > 0; tree 0's are there).
std::string tree_images_dir(pid_t tree_pid);

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
// `scope` names the tree (or trees) in a refusal: "the tree of process N" when empty.
Result<std::vector<SharedAllocation>> find_shared(std::vector<Member>& members,
                                                  const criu::ProcessTree& tree,
                                                  const std::string& scope = {});

// Brings every group of members that share memory, or a TCP connection (`tcp`), to a consistent
// cut (Note [A consistent cut]); on timeout the cut ends and the error names the members that did
// not arrive.
Status reach_cut(std::vector<Member>& members, const std::vector<SharedAllocation>& shared,
                 const CarriedTcp& tcp, class JobLink* link, std::chrono::milliseconds timeout,
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
