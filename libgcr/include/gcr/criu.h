// Running CRIU: finding the binary and gcr's plugin, building the command lines gcr needs, and
// turning a failure into an error that quotes CRIU's own log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::criu {

class Capabilities;  // gcr/criu_capabilities.h

struct Tools {
  std::filesystem::path criu;        // the criu binary (GCR_CRIU, else .deps/criu/criu, else PATH)
  std::filesystem::path plugin_dir;  // a directory holding only gcr's plugin (GCR_CRIU_PLUGIN_DIR)
  // The CRIU has gcr's --cow-dump (scripts/criu-patches/0005-cow-dump.patch; Note [Pages written
  // after the resume]); GCR_CRIU_COW_DUMP=0 turns it off.
  bool cow_dump = false;
  // And --cow-track (0006-cow-track.patch; Note [Host memory tracked between checkpoints] in
  // daemon/host_tracking.h); GCR_CRIU_COW_TRACK=0 turns it off.
  bool cow_track = false;
  // And --cow-dma (0007-cow-dma.patch): pinned host memory copied in the freeze.
  bool cow_dma = false;
  // Without cow_track, the kernel keeps soft-dirty bits: live dumps use CRIU's own --track-mem
  // (Note [Incremental dumps made whole] in gcr/criu_pagemap.h); GCR_CRIU_TRACK_MEM=0 turns it off.
  bool track_mem = false;
  // All it can do of what gcr's patches add (gcr/criu_capabilities.h); never null once found.
  const Capabilities* can = nullptr;
};

// Finds CRIU and the plugin directory next to `self_dir` (the directory of the calling binary,
// used to find a build tree's .deps/ and criu-plugin/, or an install's lib/gcr/criu and
// lib/gcr/criu-plugin). Fails with what to install or set.
Result<Tools> find_tools(const std::filesystem::path& self_dir);

// Whether this kernel marks the pages a process writes after its soft-dirty bits are cleared
// (CONFIG_MEM_SOFT_DIRTY): tried once on a page of the caller's, then remembered.
bool kernel_tracks_soft_dirty();

struct DumpOptions {
  pid_t pid = 0;
  std::filesystem::path image_dir;
  bool leave_running = false;
  // Leave the tasks stopped (SIGSTOP) instead of ending them: the caller ends them once their
  // checkpoint is safe, or lets them go on if it is not.
  bool leave_stopped = false;
  std::map<std::string, std::string> env;  // extra environment for CRIU and its plugin
  // What the process tree needs (ProcessTree::dump_arguments): --shell-job, --external tty[...].
  std::vector<std::string> extra_args;
  // With leave_running and a CRIU that can: write the pages after the tasks run again.
  bool cow_dump = false;
  // With cow_dump and a CRIU that can: the socket on which the userfaultfds come and go
  // (--cow-track; the caller's, left open), and the previous dump's images to take pages not
  // written since from (--prev-images-dir).
  int cow_track_socket = -1;
  std::filesystem::path prev_images{};
  // CRIU's own tracking (--track-mem; Tools::track_mem): the kernel's soft-dirty bits are cleared
  // at the dump, and with prev_images, pages not written since are left in that dump (in_parent).
  bool track_mem = false;
  // With cow_dump and a CRIU that can (--cow-dma): a file (the caller's, left open; CRIU reads it
  // in the freeze) of lines "PID START END" (hex addresses), memory a device may write by DMA,
  // which CRIU then copies in the freeze instead of after the resume (Note [Pages written after
  // the resume]).
  int cow_dma_fd = -1;
};
Status dump(const Tools& tools, const DumpOptions& options);

// Note [CRIU started before the cut]
// A live checkpoint's stall used to include CRIU's own start: exec, its libraries, kernel feature
// detection (56 ms here, where /run is no tmpfs and CRIU keeps no cache of it), loading gcr's
// plugin and the driver, setting up: time in which the process's CUDA calls wait at the closed
// gate (gcr checkpoint --trace shows it). So gcrd starts `criu dump` before the cut. gcr's plugin,
// at its first PAUSE_DEVICES (the last step before CRIU freezes the process), says it is ready
// and waits for go: one byte each way on a socket CRIU inherits as GCR_DUMP_GO_FD. gcrd quiesces
// and parks only once CRIU is ready, so that none of CRIU's start is in the stall, and a CRIU that
// refuses early (a tree it cannot dump) refuses before anything is stopped. Dropped without go,
// the handle closes the socket: the plugin fails the dump with nothing frozen, and the handle
// reaps CRIU. CRIU's --timeout covers the wait, so it is set from how long gcrd may take.
//
// Note [Pages written after the resume]
// CRIU writes a live checkpoint's host memory into its images while the process is frozen: a
// freeze as long as the write (0.4-0.5 s per GiB on this VM). gcr's CRIU carries --cow-dump
// (scripts/criu-patches/0005-cow-dump.patch): pages are spliced into pipes while the process is
// frozen (~75 ms per GiB) and written after it runs again, kept those of the cut by userfaultfd
// write protection (a first write to a page waits while CRIU saves it). gcrd then gives the
// process its device memory back as soon as CRIU lets it go, not when CRIU exits: it watches the
// process's tracer (CRIU's ptrace seize, then its release) while CRIU runs, and waits for CRIU's
// exit before it stores the images. A dump that fails after the release leaves the process running
// and the checkpoint failed, like any failure after a live checkpoint's resume. Write protection
// does not stop a device's DMA into pinned host memory once the GPU runs again, so the ranges the
// program pinned (control protocol 1.4, host_dma) go to CRIU in a --cow-dma file
// (0007-cow-dma.patch), asked for once the process is parked: their pages are copied while the
// process is frozen, not written after.
class StartedDump {
 public:
  static Result<StartedDump> start(const Tools& tools, const DumpOptions& options,
                                   std::chrono::seconds timeout);
  StartedDump(StartedDump&& other) noexcept;
  StartedDump& operator=(StartedDump&&) = delete;
  StartedDump(const StartedDump&) = delete;
  ~StartedDump();

  // Waits until CRIU is ready to freeze the process; CRIU's error if it ended first.
  Status wait_ready(std::chrono::milliseconds limit);
  // Lets CRIU freeze and dump the process, then waits for it: dump()'s result.
  Status go_and_wait();
  // Lets CRIU go and returns once it has let the process run again (Note [Pages written after the
  // resume]), which it may do before it has finished: true then, and go_and_wait() (go is sent
  // already) waits for CRIU and says how the dump ended; false when CRIU ended first, with
  // go_and_wait()'s result in *ended.
  bool go_until_released(Status* ended);

 private:
  StartedDump(pid_t criu, UniqueFd go, DumpOptions options);
  pid_t criu_ = 0;  // 0 once reaped
  UniqueFd go_;     // the plugin's socket; closed without a go, it fails the dump
  DumpOptions options_;
};

struct RestoreOptions {
  std::filesystem::path image_dir;
  std::map<std::string, std::string> env;
  pid_t* restored_pid = nullptr;  // the restored root task, as this process sees it
  // Restore into a PID namespace of its own (`unshare --pid --fork --mount-proc criu restore`,
  // criu staying on as the namespace's init and reaper): for a restore while the original still
  // holds its pid, or several restores of one image. The restored process keeps its pid inside;
  // *restored_pid is its pid out here.
  bool new_pid_namespace = false;
  // With new_pid_namespace: CRIU runs in this network namespace (/run/netns/NAME,
  // /proc/PID/ns/net), and the tasks, whose own network namespace is not in the image, are
  // restored in it with their sockets (a clone: Note [A clone's network] in
  // daemon/clone_network.h). Empty: gcrd's.
  std::filesystem::path netns;
  // With new_pid_namespace: a UTS namespace of its own with this hostname (empty: gcrd's).
  std::string hostname;
  bool shell_job = false;  // the dump was a --shell-job one
  bool tcp_close = false;  // established TCP connections were dumped as closed
  // Established TCP connections were dumped (--tcp-established); the caller locks them
  // (--network-lock skip).
  bool tcp_established = false;
  // Files the restored tasks get instead of what the image names (criu --inherit-fd): `fd` (the
  // caller's, left open) stands for the connection CRIU knows by `key` (gcr/process_tree.h).
  struct Inherited {
    std::string key;
    int fd = -1;
  };
  std::vector<Inherited> inherit;
  // Called with the pid of the process the restore runs in (criu; unshare with new_pid_namespace)
  // as soon as it runs, before CRIU restores anything: the restored tasks are its descendants until
  // it is done (a guard that outlives the caller finds the restored task from there). Called again
  // for a second CRIU when the first ended before it restored anything (Note [Lazy-pages daemon
  // started beside the restore] in criu_run.cpp).
  std::function<void(pid_t)> on_spawned;
  // Set: Note [Host memory restored lazily]. The tasks run before their private memory is back;
  // CRIU's lazy-pages daemon, started first, brings it in on demand and in the background, then
  // exits. The restore hands the daemon to *lazy_pages (left as it was when the call fails); the
  // image directory must outlive it.
  class LazyPages* lazy_pages = nullptr;
  // With lazy_pages: the daemon asks for the pages on this connected socket (CRIU's page-server
  // protocol; criu lazy-pages --page-server --ps-socket) instead of reading the images'
  // (Note [Host memory from the store] in daemon/host_pages.h). The caller's, left open.
  int lazy_pages_socket = -1;
  // Called right before CRIU's restore starts, or goes on (with lazy_pages, once the daemon
  // listens; started beside it, CRIU then waits at gcr's plugin's init: Note [Lazy-pages daemon
  // started beside the restore] in criu_run.cpp).
  std::function<void()> before_criu;
};
Status restore(const Tools& tools, const RestoreOptions& options);

// Note [Host memory restored lazily]
// CRIU restores a process's private anonymous memory eagerly by default: the restored tasks run
// only after every page is read from the image and faulted in (about 1.4 s for 2 GiB here). With
// lazy pages (criu restore --lazy-pages, Linux userfaultfd with the non-cooperative events) CRIU
// registers that memory with a userfaultfd and hands it to `criu lazy-pages`, a daemon reading the
// same images: the tasks run at once, a page they touch first is copied in when touched, and the
// daemon copies the rest in the background and exits when all is in. The daemon holds the only
// copy of those pages until then: should it die early, the kernel fills what is left with zeros,
// so its end is watched and the restored tasks are killed when it failed (daemon/restore_txn.cpp).
// Used when `criu check --feature uffd-noncoop` passes; GCR_CRIU_LAZY_PAGES=0 turns it off. gcrd
// has the daemon ask it for the pages instead of reading images (RestoreOptions::lazy_pages_socket;
// Note [Host memory from the store] in daemon/host_pages.h).
bool lazy_pages_available(const Tools& tools);

// The daemon of a lazy restore: reaped by wait(), killed and reaped by the destructor otherwise.
class LazyPages {
 public:
  LazyPages() = default;
  LazyPages(const LazyPages&) = delete;
  LazyPages& operator=(const LazyPages&) = delete;
  ~LazyPages();
  bool running() const { return pid_ > 0; }
  // Waits until every page is in (the daemon exits 0); an error quoting its log otherwise.
  Status wait();
  // The same without waiting: nothing while the daemon runs.
  std::optional<Status> poll();

 private:
  friend Status restore(const Tools& tools, const RestoreOptions& options);
  Status ended_with(int exit_code);
  pid_t pid_ = 0;
  std::filesystem::path log_;
};

// For a gcrd that is not root (CRIU runs with --unprivileged): fails, saying what to do, unless the
// kernel has CAP_CHECKPOINT_RESTORE and `criu` carries it and CAP_SYS_PTRACE as file capabilities.
// Root passes.
Status check_unprivileged_criu(const std::filesystem::path& criu);

// The restored root task of a restore into a new PID namespace, as this process sees it, once
// CRIU has resumed it: unshare -> criu -> the task whose pid in the namespace `ready_file` names
// (the action script writes it). 0 while there is none.
pid_t find_restored_in_namespace(pid_t unshare_pid, const std::filesystem::path& ready_file);

// Where the CRIU gcr starts keeps its kernel probe (Note [CRIU's kernel probe cached] in
// criu_run.cpp): a private directory on /dev/shm, made on first use; empty when it cannot be had.
const std::string& kdat_cache_dir();

// Runs a command (argv[0] a path) with extra environment, waits, and returns its exit status;
// stdout/stderr go to `log` (appended) when not empty.
Result<int> run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const std::filesystem::path& log);
// The same, the files `inherit` (the caller's, left open) at fds 3, 4, ... in order, and with
// `new_session`, in a session of its own.
Result<int> run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const std::filesystem::path& log, const std::vector<int>& inherit,
                bool new_session = false);
// --cow-track's socket (0006-cow-track.patch): reads one message of CRIU's; false when none is
// waiting. *pid 0: the end of CRIU's list (or of CRIU); -1: CRIU takes the list handed in (the
// caller answers -2 once it has stopped serving it); else a task's pid, with its userfaultfd in
// *fd.
bool receive_cow_track(int sock, std::int32_t* pid, UniqueFd* fd);
// A CRIU command line's start as gcr runs it: the binary, the command, and --unprivileged where
// gcr is not root.
std::vector<std::string> criu_command(const std::filesystem::path& criu, const char* command);

}  // namespace gcr::criu
