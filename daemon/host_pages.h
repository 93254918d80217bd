// Host memory served from the store while the restored process runs.
//
// Note [Host memory from the store]
// With lazy pages (Note [Host memory restored lazily] in gcr/criu.h) CRIU's daemon reads the
// pages the restored tasks are missing from the images directory, so every page had to be
// materialized out of the store first: at 4 GiB of host memory most of the time before the process
// ran. Instead gcrd serves them itself: CRIU's lazy-pages daemon has a client for CRIU's page
// server protocol (meant for post-copy migration, criu/page-xfer.c: a request PS_IOV_GET
// {nr_pages, vaddr, id} is answered by a header with the pages it has there, then their bytes;
// PS_IOV_FORCE_CLOSE by an int32 status), and takes an already connected socket (--page-server
// --ps-socket FD). gcrd parses the tasks' pagemaps, materializes everything except the pages CRIU
// may restore lazily (their chunks are left as holes in the pages images: `criu restore
// --lazy-pages` skips them), and answers the daemon from the store on one end of a socket pair:
// the process runs as soon as CRIU has restored the rest, and a page comes from the store (checked
// against its chunk id) when touched or in the background.
//
// gcrd now holds the only source of those pages, so its death must not let the process run on: a
// daemon whose server hangs up gives up, and the kernel then fills what is left with zeros. The
// restore's keeper (keeper.h) holds a duplicate of gcrd's end: the daemon sees no hang-up while the
// keeper lives, and the keeper, told where CRIU runs and then the restored pid, ends CRIU's
// restore with its tasks, or the restored tree, before it lets go. A page gcrd cannot read (a
// damaged chunk) makes it end them first (CRIU and its tasks while CRIU restores: they have not
// run the program yet, and gcr's plugin, which restores the driver inside the process during
// CRIU's restore, would otherwise run on zeros) and hang up after. The server answers one request
// at a time, in order, from windows of whole chunks (4 MiB) read ahead on another thread; CRIU's
// daemon keeps up to four requests in flight with gcr's patch 0008. Where gcrd cannot serve a
// checkpoint (a pagemap with pages in a parent image, one it cannot read, or none that CRIU may
// restore lazily) the pages are materialized as before and CRIU's daemon reads them itself
// (GCR_HOST_PAGES_FROM_STORE=0 asks for that).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "gcr/criu_pagemap.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

class HostPages {
 public:
  // The lazily restorable pages of every task image of the checkpoint `reader` reads. Fails when
  // gcrd cannot serve them (say why); the caller then materializes them.
  static Result<std::unique_ptr<HostPages>> plan(store::CheckpointReader& reader);
  ~HostPages();
  HostPages(const HostPages&) = delete;
  HostPages& operator=(const HostPages&) = delete;

  // What materialize_files leaves out: the lazy pages' byte ranges of each pages image.
  const store::CheckpointReader::LeftOut& left_out() const { return left_out_; }
  std::uint64_t lazy_bytes() const { return lazy_bytes_; }

  // Starts serving on one end of a new socket pair, reading through `reader` (its own: used by
  // the server's thread alone). Returns the daemon's end (for --ps-socket).
  Result<UniqueFd> serve(std::unique_ptr<store::CheckpointReader> reader);
  // gcrd's end, for the keeper to hold a duplicate of.
  int server_fd() const { return server_.get(); }
  // Called (from the server's thread) before it hangs up on a page it cannot read: ends the
  // restored tasks. Settable at any time.
  void on_failure(std::function<void()> end_tasks);
  // The error that made the server stop, if any.
  std::optional<Error> failure() const;
  // Waits for the server's thread (after the daemon has gone).
  void join();
  // After join(): requests answered, bytes served, and the time spent reading the store and
  // sending.
  struct Stats {
    std::uint64_t requests = 0, bytes = 0;
    std::int64_t read_ns = 0, send_ns = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Task {
    const store::ObjectEntry* pages = nullptr;  // the pages image in the checkpoint
    std::vector<criu::PagemapEntry> lazy;       // lazy and present, by address
  };
  HostPages() = default;
  void run();
  Status answer(std::uint64_t id, std::uint64_t vaddr, std::uint64_t nr_pages);
  // [offset, offset + size) of a pages image, from the cache (read into it when not there).
  Result<std::span<const std::byte>> read_pages(const store::ObjectEntry& o, std::uint64_t offset,
                                                std::uint64_t size);
  void fail(Error e);

  std::map<std::uint64_t, Task> tasks_;  // by CRIU's image id (the task's pid in the image)
  store::CheckpointReader::LeftOut left_out_;
  std::uint64_t lazy_bytes_ = 0;
  std::unique_ptr<store::CheckpointReader> reader_;
  UniqueFd server_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::function<void()> end_tasks_;
  std::optional<Error> failure_;
  Stats stats_;
  bool background_ = false;  // a request for more than a page has come
  // Whole chunks of a pages image, read from the store.
  struct Window {
    const store::ObjectEntry* object = nullptr;
    std::uint64_t from = 0, size = 0;
    std::unique_ptr<std::byte[]> bytes;
    bool holds(const store::ObjectEntry& o, std::uint64_t offset, std::uint64_t n) const {
      return object == &o && offset >= from && offset + n <= from + size;
    }
  };
  // The chunks from the one holding `offset` on, to at least offset + size and, with read_ahead,
  // kReadAhead past the first. Uses reader_: never two at once.
  Result<Window> read_window(const store::ObjectEntry& o, std::uint64_t offset, std::uint64_t size,
                             bool read_ahead);
  void keep(Window w);
  // Windows read, newest last (a few: the background's current and next, a fault's), and the
  // next background window being read by another thread meanwhile.
  std::vector<Window> windows_;
  std::future<Result<Window>> next_;
};

}  // namespace gcr::gcrd
