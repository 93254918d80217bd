// A source file (a CRIU image file) read window by window through the IoQueue and cut into chunks:
// content-defined for page images, fixed otherwise (chunker.h). Two window buffers alternate, so
// the next window is read while the current one is hashed and written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>

#include "gcr/result.h"
#include "io/io_queue.h"

namespace gcr::store {

// Called per window with whole chunks only; writes that read from data must decrement
// `in_flight` when done (the buffer is reused once it is zero).
using ChunkConsumer = std::function<Status(
    std::span<const std::byte> data, std::span<const std::uint32_t> sizes, std::size_t& in_flight)>;

// Reads size bytes of fd (path names it in errors) and hands them to consume in chunks.
Status chunk_file(io::IoQueue& io, int fd, const std::filesystem::path& path, std::uint64_t size,
                  bool page_image, std::uint32_t chunk_bytes, const ChunkConsumer& consume);

}  // namespace gcr::store
