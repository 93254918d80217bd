// ScratchDir: a test's own directory, made fresh by mkdtemp under $TMPDIR (or /tmp) and removed,
// with everything in it, when the ScratchDir goes. Tests leave odd trees behind on purpose
// (read-only files and directories, symlinks to /etc or out of the tree, other owners' entries
// when run as root), so removal:
//   - gives each directory back its owner's rwx before emptying it (a 0500 directory still goes);
//   - never follows a symlink: a link is unlinked, never entered, so nothing outside the tree is
//     touched, whatever it points at;
//   - stays on the scratch directory's filesystem: a mount a test left inside is neither entered
//     nor removed, and the leftover is reported on stderr.
// Every directory is opened by name with O_NOFOLLOW and from then on used through its fd
// (chmod through /proc/self/fd), so a link swapped in for a directory while removal runs is not
// followed either. Header-only: tests/ is on the include path of every target linking gcr_catch.
#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

class ScratchDir {
 public:
  // "$TMPDIR/gcr-<program>.XXXXXX" (/tmp when TMPDIR is unset or empty), mode 0700, named for the
  // test program so that a leftover says whose it is. Throws std::system_error if it cannot be
  // made.
  ScratchDir() {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") +
                       "/gcr-" + program_invocation_short_name + ".XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
    }
    path_ = tmpl;
  }
  ~ScratchDir() { remove_tree(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  // Opens the directory `name` of `dir` itself (O_PATH: no permission on it needed), never a link
  // to one; -1 for anything else.
  static int open_dir(int dir, const char* name) {
    return ::openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }

  // Makes the directory open as `fd` (O_PATH) its owner's to list and empty; false when it is on
  // another filesystem than `dev` (a mount: left alone).
  static bool make_removable(int fd, dev_t dev) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_dev != dev) return false;
    if ((st.st_mode & 0700) != 0700) {
      // fchmod refuses an O_PATH fd; the fd's /proc link names the directory itself, not a path.
      ::chmod(("/proc/self/fd/" + std::to_string(fd)).c_str(), 0700);
    }
    return true;
  }

  // Removes everything in the directory open as `dir` (O_PATH, already made removable).
  static void empty_dir(int dir, dev_t dev) {
    std::vector<std::string> names;  // read whole first: a directory changing while read may skip
    int list_fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (list_fd < 0) return;
    DIR* listing = ::fdopendir(list_fd);
    if (listing == nullptr) {
      ::close(list_fd);
      return;
    }
    while (const dirent* e = ::readdir(listing)) {
      std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(listing);
    for (const std::string& name : names) {
      int sub = open_dir(dir, name.c_str());
      if (sub < 0) {  // a file, a link, a socket: unlinked, never followed
        ::unlinkat(dir, name.c_str(), 0);
        continue;
      }
      if (make_removable(sub, dev)) {
        empty_dir(sub, dev);
        ::unlinkat(dir, name.c_str(), AT_REMOVEDIR);
      }
      ::close(sub);
    }
  }

  static void remove_tree(const std::filesystem::path& root) {
    struct stat st {};
    int fd = open_dir(AT_FDCWD, root.c_str());
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      return;
    }
    if (make_removable(fd, st.st_dev)) empty_dir(fd, st.st_dev);
    ::close(fd);
    if (::rmdir(root.c_str()) != 0) {
      std::fprintf(stderr, "ScratchDir: %s left behind: %s\n", root.c_str(), std::strerror(errno));
    }
  }

  std::filesystem::path path_;
};
