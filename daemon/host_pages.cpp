// HostPages: see host_pages.h, Note [Host memory from the store].
#include "host_pages.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "pause_point.h"

namespace gcr::gcrd {
namespace {

// CRIU's struct page_server_iov (criu/page-xfer.c), as its compiler lays it out: a u32 and three
// u64s, 32 bytes.
struct PageServerIov {
  std::uint32_t cmd;
  std::uint64_t nr_pages;
  std::uint64_t vaddr;
  std::uint64_t dst_id;
};
static_assert(sizeof(PageServerIov) == 32);

constexpr std::uint32_t kIovAddF = 6;             // PS_IOV_ADD_F: pages follow
constexpr std::uint32_t kIovGet = 7;              // PS_IOV_GET
constexpr std::uint32_t kIovClose = 0x1023;       // PS_IOV_CLOSE
constexpr std::uint32_t kIovForceClose = 0x1024;  // PS_IOV_FORCE_CLOSE
constexpr std::uint32_t kCmdBits = 16;            // PS_CMD_BITS: flags above the command
// How much a background request reads at least (whole chunks): the daemon's requests grow to
// 4 MiB and follow one another, so each chunk is read once.
constexpr std::uint64_t kReadAhead = 4ull << 20;

bool task_pagemap(const std::string& name, std::uint64_t* id) {
  constexpr std::string_view prefix = "pagemap-", suffix = ".img";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return false;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 10 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;  // pagemap-shmem-N.img and the like
  *id = std::stoull(digits);
  return true;
}

Status send_all(int fd, std::span<const std::byte> a, std::span<const std::byte> b) {
  iovec iov[2] = {{const_cast<std::byte*>(a.data()), a.size()},
                  {const_cast<std::byte*>(b.data()), b.size()}};
  int at = 0;
  while (at < 2) {
    msghdr msg{};
    msg.msg_iov = iov + at;
    msg.msg_iovlen = static_cast<std::size_t>(2 - at);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("sending pages to criu lazy-pages");
    auto left = static_cast<std::size_t>(n);
    while (at < 2 && left >= iov[at].iov_len) left -= iov[at++].iov_len;
    if (at < 2) {
      iov[at].iov_base = static_cast<std::byte*>(iov[at].iov_base) + left;
      iov[at].iov_len -= left;
    }
  }
  return ok();
}

}  // namespace

Result<std::unique_ptr<HostPages>> HostPages::plan(store::CheckpointReader& reader) {
  std::unique_ptr<HostPages> hp(new HostPages());
  const store::Manifest& m = reader.manifest();
  std::map<std::string, const store::ObjectEntry*> files;
  for (const store::ObjectEntry& o : m.objects)
    if (o.kind == store::ObjectKind::file) files[o.name] = &o;
  for (const auto& [name, o] : files) {
    std::uint64_t id = 0;
    if (!task_pagemap(name, &id)) continue;
    if (o->size > (64ull << 20))
      return Error{Errc::unsupported, name + " is " + std::to_string(o->size >> 20) + " MiB"};
    std::vector<std::byte> image(o->size);
    GCR_TRY(reader.read(*o, 0, image));
    GCR_TRY_ASSIGN(criu::Pagemap pm, criu::parse_pagemap(image).context(name));
    Task task;
    std::string pages_name = "pages-" + std::to_string(pm.pages_id) + ".img";
    auto pages = files.find(pages_name);
    if (pm.pages_bytes > 0 && pages == files.end())
      return Error{Errc::corrupt_image, name + " names " + pages_name + ", which is missing"};
    if (pages != files.end() && pages->second->size != pm.pages_bytes)
      return Error{Errc::corrupt_image, pages_name + " holds " +
                                            std::to_string(pages->second->size) + " bytes, " +
                                            name + " says " + std::to_string(pm.pages_bytes)};
    if (pages != files.end()) task.pages = pages->second;
    auto& ranges = hp->left_out_[pages_name];
    for (const criu::PagemapEntry& e : pm.entries) {
      if (e.flags & criu::kPagesInParent)
        return Error{Errc::unsupported, name + " has pages in a parent image"};
      if ((e.flags & criu::kPagesLazy) == 0 || (e.flags & criu::kPagesPresent) == 0) continue;
      std::uint64_t bytes = e.nr_pages * criu::kPageSize;
      task.lazy.push_back(e);
      hp->lazy_bytes_ += bytes;
      if (!ranges.empty() && ranges.back().first + ranges.back().second == e.offset)
        ranges.back().second += bytes;
      else
        ranges.emplace_back(e.offset, bytes);
    }
    if (ranges.empty()) hp->left_out_.erase(pages_name);
    if (!task.lazy.empty()) hp->tasks_.emplace(id, std::move(task));
  }
  if (hp->tasks_.empty())
    return Error{Errc::not_found, "no task has pages CRIU may restore lazily"};
  return hp;
}

HostPages::~HostPages() {
  if (thread_.joinable()) {
    ::shutdown(server_.get(), SHUT_RDWR);
    thread_.join();
  }
}

Result<UniqueFd> HostPages::serve(std::unique_ptr<store::CheckpointReader> reader) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return errno_error("creating the socket pair for criu lazy-pages");
  server_ = UniqueFd(sv[0]);
  UniqueFd daemon(sv[1]);
  reader_ = std::move(reader);
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "gcrd-hostpages");
  return daemon;
}

void HostPages::on_failure(std::function<void()> end_tasks) {
  std::lock_guard lock(mu_);
  end_tasks_ = std::move(end_tasks);
}

std::optional<Error> HostPages::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void HostPages::join() {
  if (thread_.joinable()) thread_.join();
}

void HostPages::fail(Error e) {
  std::function<void()> end;
  {
    std::lock_guard lock(mu_);
    if (!failure_) failure_ = e;
    end = end_tasks_;
  }
  // The tasks first: once the daemon sees the hang-up it gives up, and what it has not brought in
  // reads as zeros.
  if (end) end();
  ::shutdown(server_.get(), SHUT_RDWR);
}

void HostPages::run() {
  for (;;) {
    PageServerIov iov{};
    ssize_t n;
    do n = ::recv(server_.get(), &iov, sizeof iov, MSG_WAITALL);
    while (n < 0 && errno == EINTR);
    if (n == 0) return;  // the daemon is gone (or we were shut down)
    if (n != static_cast<ssize_t>(sizeof iov)) {
      if (n < 0 && (errno == EINVAL || errno == ENOTCONN)) return;  // shut down
      fail(Error{Errc::io_error, "criu lazy-pages sent half a request"});
      return;
    }
    const std::uint32_t cmd = iov.cmd & ((1u << kCmdBits) - 1);
    if (cmd == kIovClose || cmd == kIovForceClose) {
      std::int32_t status = 0;
      (void)::send(server_.get(), &status, sizeof status, MSG_NOSIGNAL);
      return;
    }
    if (cmd != kIovGet) {
      fail(Error{Errc::protocol, "criu lazy-pages sent command " + std::to_string(iov.cmd) +
                                     ", not a page request"});
      return;
    }
    if (iov.nr_pages > 1 && !background_) {
      background_ = true;  // CRIU's restore is done: the daemon brings in the rest
      pause_point("host-pages");
    }
    if (Status s = answer(iov.dst_id, iov.vaddr, iov.nr_pages); !s) {
      fail(std::move(s)
               .context("serving the host memory of task " + std::to_string(iov.dst_id))
               .error());
      return;
    }
  }
}

Status HostPages::answer(std::uint64_t id, std::uint64_t vaddr, std::uint64_t nr_pages) {
  auto t = tasks_.find(id);
  if (t == tasks_.end())
    return Error{Errc::invalid_argument, "the checkpoint has no lazy pages for it"};
  const std::vector<criu::PagemapEntry>& lazy = t->second.lazy;
  auto it =
      std::upper_bound(lazy.begin(), lazy.end(), vaddr,
                       [](std::uint64_t v, const criu::PagemapEntry& e) { return v < e.vaddr; });
  if (it == lazy.begin() || vaddr % criu::kPageSize != 0 ||
      vaddr >= std::prev(it)->vaddr + std::prev(it)->nr_pages * criu::kPageSize || nr_pages == 0)
    return Error{Errc::invalid_argument, "asked for pages at 0x" + [&] {
                   char b[32];
                   std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(vaddr));
                   return std::string(b);
                 }() + " that the image does not hold as lazy"};
  const criu::PagemapEntry& e = *std::prev(it);
  // Never more than the entry holds from there (the daemon takes fewer pages than it asked for).
  std::uint64_t first = (vaddr - e.vaddr) / criu::kPageSize;
  std::uint64_t n = std::min(nr_pages, e.nr_pages - first);
  auto t0 = std::chrono::steady_clock::now();
  GCR_TRY_ASSIGN(
      std::span<const std::byte> data,
      read_pages(*t->second.pages, e.offset + first * criu::kPageSize, n * criu::kPageSize));
  auto t1 = std::chrono::steady_clock::now();
  PageServerIov reply{};
  reply.cmd = (criu::kPagesPresent << kCmdBits) | kIovAddF;
  reply.nr_pages = n;
  reply.vaddr = vaddr;
  reply.dst_id = id;
  GCR_TRY(send_all(server_.get(),
                   std::span(reinterpret_cast<const std::byte*>(&reply), sizeof reply), data));
  ++stats_.requests;
  stats_.bytes += data.size();
  stats_.read_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  stats_.send_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t1)
          .count();
  return ok();
}

Result<HostPages::Window> HostPages::read_window(const store::ObjectEntry& o, std::uint64_t offset,
                                                 std::uint64_t size, bool read_ahead) {
  const auto& chunks = reader_->manifest().chunks;
  std::uint64_t at = 0, k = 0;
  for (; k < o.chunk_count; ++k) {
    std::uint64_t n = chunks[o.first_chunk + k].raw_bytes;
    if (at + n > offset) break;
    at += n;
  }
  Window w;
  w.object = &o;
  w.from = at;
  const std::uint64_t want = std::max(offset + size, read_ahead ? at + kReadAhead : 0);
  for (; k < o.chunk_count && at < want; ++k) at += chunks[o.first_chunk + k].raw_bytes;
  w.size = at - w.from;
  w.bytes.reset(new std::byte[w.size]);  // not zeroed: every byte is read into
  GCR_TRY(reader_->read(o, w.from, std::span(w.bytes.get(), w.size)));
  return w;
}

void HostPages::keep(Window w) {
  constexpr std::size_t kWindows = 3;
  if (windows_.size() == kWindows) windows_.erase(windows_.begin());
  windows_.push_back(std::move(w));
}

Result<std::span<const std::byte>> HostPages::read_pages(const store::ObjectEntry& o,
                                                         std::uint64_t offset, std::uint64_t size) {
  auto held = [&]() -> const Window* {
    for (const Window& w : windows_)
      if (w.holds(o, offset, size)) return &w;
    return nullptr;
  };
  const Window* w = held();
  if (!w && next_.valid()) {
    // The reader is free again once the read ahead is in; it may well be the one wanted.
    GCR_TRY_ASSIGN(Window ahead, next_.get());
    keep(std::move(ahead));
    w = held();
  }
  // A fault asks for one page: only its chunks, to answer soon. The background reads ahead.
  const bool background = size > criu::kPageSize;
  if (!w) {
    GCR_TRY_ASSIGN(Window read, read_window(o, offset, size, background));
    keep(std::move(read));
    w = &windows_.back();
  }
  std::span<const std::byte> out(w->bytes.get() + (offset - w->from), size);
  // The window after this one, read while this one is sent and copied in, unless it is here.
  const std::uint64_t after = w->from + w->size;
  if (background && !next_.valid() && after < o.size) {
    bool have = false;
    for (const Window& x : windows_) have = have || x.holds(o, after, 1);
    if (!have)
      next_ = std::async(std::launch::async,
                         [this, obj = &o, after] { return read_window(*obj, after, 1, true); });
  }
  return out;
}

}  // namespace gcr::gcrd
