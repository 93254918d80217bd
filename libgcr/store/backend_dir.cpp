// The local-directory Backend (gcr/store_backend.h): today's store layout, written the way the
// store's own writer writes (docs/image-format.md §5): a file is complete and fsynced in tmp/
// before it gets its name, and its directory is fsynced after. create_only names a file with
// link(2), which fails when the name exists, where rename(2) would replace it.
#include <fcntl.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "gcr/chunk_id.h"
#include "gcr/file.h"
#include "gcr/store_backend.h"
#include "store/bytes.h"
#include "store/gc_lock.h"
#include "store/layout.h"

namespace gcr::store {
namespace {

class DirBackend final : public Backend {
 public:
  DirBackend(Layout layout, GcLock lock)
      : layout_(std::move(layout)), lock_(std::move(lock)), name_(layout_.root.string()) {}

  const std::string& name() const override { return name_; }

  Result<std::vector<std::string>> list(const std::string& dir) override {
    auto path = layout_.root / dir;
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) return std::vector<std::string>{};
      return io::file_error("cannot list", path, errno);
    }
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) return io::file_error("cannot list", path, err);
    return names;
  }

  Result<DirListing> list_detailed(const std::string& dir) override {
    DirListing out;
    // The fine clock, not time()'s coarse one: a file's mtime (taken from the fine clock on
    // recent kernels) may otherwise read a second ahead of "now" (a pack marked just now would
    // not be old enough for a grace of 0).
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    out.now_unix = static_cast<std::int64_t>(now.tv_sec);
    GCR_TRY_ASSIGN(auto names, list(dir));
    for (auto& n : names) {
      struct stat st {};
      if (::stat((layout_.root / dir / n).c_str(), &st) != 0) continue;  // gone meanwhile
      out.objects.push_back(ObjectInfo{std::move(n), static_cast<std::uint64_t>(st.st_size),
                                       static_cast<std::int64_t>(st.st_mtime)});
    }
    return out;
  }

  Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max_bytes) override {
    return io::read_file(layout_.root / key, max_bytes);
  }

  Result<Versioned> get_versioned(const std::string& key, std::uint64_t max_bytes) override {
    GCR_TRY_ASSIGN(auto bytes, get(key, max_bytes));
    std::string version = chunk_id_of(bytes).hex();
    return Versioned{std::move(bytes), std::move(version)};
  }

  // The compare and the swap under an exclusive flock of the object's directory.
  Status put_if(const std::string& key, std::span<const std::byte> bytes,
                const std::string& version) override {
    auto dir = (layout_.root / key).parent_path();
    GCR_TRY(io::make_dir(dir));
    GCR_TRY_ASSIGN(UniqueFd dir_fd, io::open_file(dir, O_RDONLY | O_DIRECTORY));
    while (::flock(dir_fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return io::file_error("cannot lock", dir, errno);
    }
    auto now = get_versioned(key, bytes.size() + (1 << 20));
    std::string current;
    if (now) {
      current = now->version;
    } else if (now.error().code != Errc::not_found) {
      return std::move(now).error();
    }
    if (current != version) {
      return make_error(Errc::busy,
                        "'" + (layout_.root / key).string() + "' changed while gcr was writing it");
    }
    return put(key, bytes, PutMode::replace);
  }

  Status get_range(const std::string& key, std::uint64_t offset,
                   std::span<std::byte> out) override {
    auto path = layout_.root / key;
    GCR_TRY_ASSIGN(UniqueFd fd, io::open_file(path, O_RDONLY));
    std::size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io::file_error("cannot read", path, errno);
      if (n == 0) {
        return make_error(Errc::corrupt_image, "'" + path.string() + "' ends at " +
                                                   std::to_string(offset + done) +
                                                   ", before the range read from it");
      }
      done += static_cast<std::size_t>(n);
    }
    return ok();
  }

  Status put(const std::string& key, std::span<const std::byte> bytes, PutMode mode) override {
    const std::span<const std::byte> whole[] = {bytes};
    return put_parts(key, whole, mode);
  }

  // Each part written in turn where it is: a pulled pack goes from the buffers it arrived in to
  // the file, never joined in memory first.
  Status put_parts(const std::string& key, std::span<const std::span<const std::byte>> parts,
                   PutMode mode) override {
    auto final_path = layout_.root / key;
    auto dir = final_path.parent_path();
    GCR_TRY(io::make_dir(dir));
    auto tmp = layout_.tmp_file("put");
    std::uint64_t size = 0;
    {
      GCR_TRY_ASSIGN(UniqueFd fd, io::open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600));
      Status s = ok();
      for (std::span<const std::byte> p : parts) {
        if (s) s = io::write_all(fd.get(), p, size, tmp);
        size += p.size();
      }
      if (s) s = io::sync_fd(fd.get(), tmp);
      if (!s) {
        (void)io::remove_file(tmp);
        return s;
      }
    }
    if (mode == PutMode::replace) {
      if (Status s = io::rename_file(tmp, final_path); !s) {
        (void)io::remove_file(tmp);
        return s;
      }
      return io::sync_dir(dir);
    }
    int rc = ::link(tmp.c_str(), final_path.c_str());
    int err = errno;
    (void)io::remove_file(tmp);
    if (rc != 0 && err == EEXIST) {
      // The same object from a concurrent writer (two pulls of one checkpoint): written.
      auto there = io::read_file(final_path, size);
      if (there && is_concatenation(*there, parts)) return ok();
      return make_error(Errc::already_exists, "'" + final_path.string() + "' exists");
    }
    if (rc != 0) return io::file_error("cannot create", final_path, err);
    return io::sync_dir(dir);
  }

  Status remove(const std::string& key) override { return io::remove_file(layout_.root / key); }

  unsigned parallelism() const override { return 4; }

 private:
  Layout layout_;
  GcLock lock_;
  std::string name_;
};

}  // namespace

Result<std::unique_ptr<Backend>> open_dir_backend(const std::filesystem::path& root,
                                                  const BackendOptions& options) {
  Layout layout{root};
  GCR_TRY(prepare_store(layout, options.create));
  GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
  return std::unique_ptr<Backend>(new DirBackend(std::move(layout), std::move(lock)));
}

Result<std::unique_ptr<Backend>> open_backend(const StoreLocation& location,
                                              const BackendOptions& options) {
  if (location.is_s3()) return open_s3_backend(location, options);
  return open_dir_backend(location.directory, options);
}

}  // namespace gcr::store
