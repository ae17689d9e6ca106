#pragma once

#include <string>

#include "base/status.h"

namespace meridian::base {

// The exclusive lock on a folder one process owns, held until it stops (the kernel drops it when
// the process dies, however it dies). A server's data dir: two servers on one store would each
// expire the nodes missing from their own heartbeat map and fail the other's jobs (the tools
// that replace or copy a data dir's database whole, restore and store migrate, take it too). A
// Slurm connector's work dir: two connectors would each submit and fence the same runs.
class DirLock {
 public:
  DirLock() = default;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  // Takes the lock on dir/LOCK without waiting and writes this process's pid there. Fails at
  // once when another process holds it, naming the dir (as `flag` DIR), who holds such a folder
  // (`owner`, "meridian server"), the holder's pid when it is known, and `advice`.
  base::Status Acquire(
      const std::string& dir, const std::string& flag = "--data-dir",
      const std::string& owner = "meridian server",
      const std::string& advice = "one server per data dir; stop it or choose another data dir");
  // A filesystem that takes no locks (a shared one mounted without them) answers kUnavailable;
  // the caller may go on without the lock, and say so.
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace meridian::base
