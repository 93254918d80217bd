// PackReader: see pack_reader.h.
#include "store/pack_reader.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "gcr/file.h"

namespace gcr::store {

Result<std::shared_ptr<PackReader>> PackReader::open(const Layout& layout, const PackId& id,
                                                     std::uint64_t pack_bytes) {
  auto path = layout.pack(id);
  auto opened = io::open_file(path, O_RDONLY);
  if (!opened && opened.error().code == Errc::not_found) {
    // Its index is there (the catalog found it), and gc removes an index before its pack: the
    // pack was lost, which makes every checkpoint with a chunk in it damaged, not missing.
    return make_error(Errc::corrupt_image, "pack " + id.hex() + " (" + path.string() +
                                               ") is missing, though its index names it; the "
                                               "store is damaged, run 'gcr image verify'");
  }
  GCR_TRY_ASSIGN(UniqueFd fd, std::move(opened));
  auto r = std::make_shared<PackReader>();
  r->id_ = id;
  r->origin_ = "pack " + id.hex() + " (" + path.string() + ")";
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io::file_error("cannot stat", path, errno);
  r->size_ = static_cast<std::uint64_t>(st.st_size);
  std::array<std::byte, kPackHeaderBytes> header{};
  ssize_t n = ::pread(fd.get(), header.data(), header.size(), 0);
  if (n < 0) return io::file_error("cannot read", path, errno);
  GCR_TRY(check_pack_header(std::span(header.data(), static_cast<std::size_t>(n)), id, r->origin_));
  if (r->size_ < pack_bytes) {
    return make_error(Errc::corrupt_image, r->origin_ + ": " + std::to_string(r->size_) +
                                               " bytes, but its index says " +
                                               std::to_string(pack_bytes) + " (truncated pack)");
  }
  r->fd_ = std::move(fd);
  return r;
}

}  // namespace gcr::store
