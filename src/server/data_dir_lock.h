#pragma once

#include <string>

#include "base/status.h"

namespace meridian::server {

// The exclusive lock on a data dir, held from before the store opens until the server stops
// (the kernel drops it when the process dies, however it dies). Two servers on one store would
// each expire the nodes missing from their own heartbeat map and fail the other's jobs; the
// tools that replace or copy a data dir's database whole (restore, store migrate) take it too.
class DataDirLock {
 public:
  DataDirLock() = default;
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;
  ~DataDirLock();

  // Takes the lock on dir/LOCK without waiting and writes this process's pid there. Fails at
  // once when another process holds it, naming the dir (as `flag` DIR) and the holder's pid
  // when it is known.
  base::Status Acquire(const std::string& dir, const std::string& flag = "--data-dir");

 private:
  int fd_ = -1;
};

}  // namespace meridian::server
