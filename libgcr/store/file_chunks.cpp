// Windowed reading and chunking of source files: see file_chunks.h.
//
// Each buffer is [carry area | window]. Content-defined cutting leaves the tail after the last cut
// of a window uncut (< kCdcMaxBytes); it is copied into the carry area of the next buffer, just in
// front of that buffer's freshly read window, and cutting restarts there with the same result as
// if the file had been cut in one piece. Fixed chunking uses windows that are a multiple of the
// chunk size, so it never carries.
#include "store/file_chunks.h"

#include <cstring>
#include <vector>

#include "gcr/file.h"
#include "store/chunker.h"

namespace gcr::store {
namespace {

constexpr std::uint64_t kWindowBytes = 16ull << 20;
constexpr std::uint32_t kReadBytes = 1u << 20;  // one request

struct Buffer {
  std::vector<std::byte> mem;
  std::size_t window = 0;  // bytes of the file in this buffer's window
  std::uint64_t end = 0;   // file offset just past the window
  std::size_t reads = 0;   // reads in flight into it
  std::size_t writes = 0;  // writes in flight from it
  int read_error = 0;
};

}  // namespace

Status chunk_file(io::IoQueue& io, int fd, const std::filesystem::path& path, std::uint64_t size,
                  bool page_image, std::uint32_t chunk_bytes, const ChunkConsumer& consume) {
  if (size == 0) return ok();
  const std::size_t carry_room = page_image ? kCdcMaxBytes : 0;
  const std::uint64_t window =
      page_image ? kWindowBytes : (kWindowBytes + chunk_bytes - 1) / chunk_bytes * chunk_bytes;
  const std::size_t per_buffer =
      carry_room + static_cast<std::size_t>(std::min<std::uint64_t>(window, size));

  Buffer bufs[2];
  for (auto& b : bufs) b.mem.resize(per_buffer);
  io::DrainGuard guard(io);  // after bufs: no read or write outlives them

  std::uint64_t next_read = 0;
  auto start_read = [&](Buffer& b) -> Status {
    b.window = static_cast<std::size_t>(std::min<std::uint64_t>(window, size - next_read));
    b.end = next_read + b.window;
    b.read_error = 0;
    for (std::size_t at = 0; at < b.window; at += kReadBytes) {
      std::size_t n = std::min<std::size_t>(kReadBytes, b.window - at);
      ++b.reads;
      GCR_TRY(
          io.read(fd, next_read + at, std::span(b.mem.data() + carry_room + at, n), [&b](int err) {
            --b.reads;
            if (err != 0 && b.read_error == 0) b.read_error = err;
          }));
    }
    next_read = b.end;
    return ok();
  };

  GCR_TRY(start_read(bufs[0]));
  std::span<const std::byte> carry;
  for (int cur = 0;; cur ^= 1) {
    Buffer& b = bufs[cur];
    Buffer& other = bufs[cur ^ 1];
    GCR_TRY(io::wait_until_zero(io, b.reads));
    if (b.read_error != 0) {
      return io::file_error(b.read_error == EIO ? "cannot read (file shrank?)" : "cannot read",
                            path, b.read_error);
    }
    std::byte* begin = b.mem.data() + carry_room - carry.size();
    if (!carry.empty()) std::memmove(begin, carry.data(), carry.size());
    std::span<const std::byte> data(begin, carry.size() + b.window);
    bool final = b.end == size;
    if (!final) {
      // The other buffer is free once its writes are done (its carry was copied just above).
      GCR_TRY(io::wait_until_zero(io, other.writes));
      GCR_TRY(start_read(other));
    }
    std::vector<std::uint32_t> sizes =
        page_image ? cut_pages(data, final) : cut_fixed(data.size(), chunk_bytes);
    std::uint64_t cut = 0;
    for (auto s : sizes) cut += s;
    GCR_TRY(consume(data.first(cut), sizes, b.writes));
    carry = data.subspan(cut);
    if (final) break;
  }
  GCR_TRY(io::wait_until_zero(io, bufs[0].writes));
  GCR_TRY(io::wait_until_zero(io, bufs[1].writes));
  return ok();
}

}  // namespace gcr::store
