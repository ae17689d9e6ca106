#include "slurm/job_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace meridian::slurm {

using base::Status;

std::optional<std::string> ReadJobFile(const std::string& path, uint32_t owner, int64_t offset,
                                       int64_t limit, int64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner) {
    if (size) *size = st.st_size;
    std::string data(
        static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(limit, st.st_size - offset))),
        '\0');
    const ssize_t n = data.empty() ? 0 : ::pread(fd, data.data(), data.size(), offset);
    if (n >= 0) {
      data.resize(static_cast<size_t>(n));
      out = std::move(data);
    }
  }
  ::close(fd);
  return out;
}

Status WriteFileAs(const std::string& path, const std::string& content, uint32_t uid, uint32_t gid,
                   mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (fd < 0) return Status::Io(tmp + ": " + std::strerror(errno));
  Status s = Status::Ok();
  if (::fchown(fd, uid, gid) != 0 || ::fchmod(fd, mode) != 0)
    s = Status::Io(tmp + ": " + std::strerror(errno));
  for (size_t done = 0; s.ok() && done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      s = Status::Io(tmp + ": " + std::strerror(errno));
    } else {
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::Io(path + ": " + std::strerror(errno));
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

namespace {

// Deeper than this, a folder is left (and said so): each level holds a descriptor and a frame.
constexpr int kMaxDepth = 128;

// Empties the folder open as `dir` (whose descriptor it takes; `st` is its fstat), `depth`
// levels down, spending `budget` on each entry it meets; true once it is empty. Entries are
// removed as they are read, so that a folder of millions holds neither memory nor the round.
// A folder is gone into only on the same filesystem as the top (no mount a user made is
// walked), and only when it is its parent's owner's or its parent is root's: a folder of root's
// (or of another user's) that a user moved into its own is not the user's to have removed.
base::Result<bool> Empty(int dir, const struct stat& st, dev_t top_dev, const std::string& where,
                         int depth, int64_t* budget) {
  DIR* d = ::fdopendir(dir);
  if (!d) {
    const int e = errno;
    ::close(dir);
    return Status::Io(where + ": " + std::strerror(e));
  }
  bool empty = true;
  Status failed = Status::Ok();
  while (failed.ok()) {
    if (*budget <= 0) {
      empty = false;
      break;
    }
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (!entry) {
      if (errno != 0) failed = Status::Io(where + ": " + std::strerror(errno));
      break;
    }
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    --*budget;
    if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      failed = Status::Io(where + "/" + name + ": " + std::strerror(errno));
      break;
    }
    // A folder: opened from here, never through a link (a link swapped in is removed above, or
    // fails to open here as one).
    const int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      if (errno == ENOENT) continue;
      if (errno == ELOOP || errno == ENOTDIR) {  // swapped meanwhile: removed next call
        empty = false;
        continue;
      }
      failed = Status::Io(where + "/" + name + ": " + std::strerror(errno));
      break;
    }
    struct stat sub_st {};
    if (::fstat(sub, &sub_st) != 0 || sub_st.st_dev != top_dev ||
        (sub_st.st_uid != st.st_uid && st.st_uid != 0)) {
      ::close(sub);
      failed = Status::Io(where + "/" + name + ": " +
                          (sub_st.st_dev != top_dev
                               ? "another filesystem"
                               : "uid " + std::to_string(sub_st.st_uid) +
                                     "'s, in a folder of uid " + std::to_string(st.st_uid)));
      break;
    }
    if (depth >= kMaxDepth) {
      ::close(sub);
      failed = Status::Io(where + "/" + name + ": more than " + std::to_string(kMaxDepth) +
                          " folders deep");
      break;
    }
    auto done = Empty(sub, sub_st, top_dev, where + "/" + name, depth + 1, budget);
    if (!done.ok()) {
      failed = done.status();
      break;
    }
    if (!*done) {
      empty = false;
      break;
    }
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      if (errno == ENOTEMPTY || errno == EEXIST) {  // refilled meanwhile
        empty = false;
        continue;
      }
      failed = Status::Io(where + "/" + name + ": " + std::strerror(errno));
      break;
    }
  }
  ::closedir(d);  // closes `dir`
  if (!failed.ok()) return failed;
  return empty;
}

}  // namespace

base::Result<bool> RemoveTree(const std::string& path, int64_t* budget) {
  const int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    if (errno == ENOENT) return true;
    if (errno == ELOOP || errno == ENOTDIR) {  // not a folder: removed as what it is
      if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
    }
    return Status::Io(path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(dir, &st) != 0) {
    const int e = errno;
    ::close(dir);
    return Status::Io(path + ": " + std::strerror(e));
  }
  auto done = Empty(dir, st, st.st_dev, path, 0, budget);
  if (!done.ok() || !*done) return done;
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
    if (errno == ENOTEMPTY || errno == EEXIST) return false;
    return Status::Io(path + ": " + std::strerror(errno));
  }
  return true;
}

}  // namespace meridian::slurm
