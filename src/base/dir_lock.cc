#include "base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/strings.h"

namespace meridian::base {

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

Status DirLock::Acquire(const std::string& dir, const std::string& flag, const std::string& owner,
                        const std::string& advice) {
  const std::string path = dir + "/LOCK";
  const std::string named = flag + (!flag.empty() && flag.back() == ':' ? "" : " ") + dir;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return Status::Io(named + ": cannot open " + path);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[32] = {};
    if (::pread(fd_, buf, sizeof buf - 1, 0) > 0) holder = std::string(Trim(buf));
    ::close(fd_);
    fd_ = -1;
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      return Status(StatusCode::kUnavailable,
                    named + ": its filesystem takes no locks (" + strerror(err) + ")");
    }
    if (err != EWOULDBLOCK) return Status::Io(named + ": cannot lock " + path);
    return Status(StatusCode::kFailedPrecondition,
                  named + " is in use by another " + owner +
                      (holder.empty() ? std::string() : " (pid " + holder + ")") + ": " + advice);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    return Status::Io(named + ": cannot write " + path);
  }
  return Status::Ok();
}

}  // namespace meridian::base
