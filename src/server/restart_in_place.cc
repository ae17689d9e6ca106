#include "server/restart_in_place.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace meridian::server {

base::Status RestartInPlace(int listener) {
  // The arguments this process started with, NUL-separated.
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < cmdline.size();) {
    const size_t end = cmdline.find('\0', at);
    args.push_back(cmdline.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (args.empty()) return base::Status::Io("cannot read /proc/self/cmdline");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Every descriptor past stderr closes at the exec (the store's connections, the data dir's
  // lock, clients' connections), except the listener, which moves to 3.
  if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 65536; ++fd) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (listener >= 0) {
    if (listener == 3) {
      if (fcntl(3, F_SETFD, 0) != 0) return base::Status::Io(std::strerror(errno));
    } else if (dup2(listener, 3) != 3) {
      return base::Status::Io(std::string("cannot hand the listener over: ") +
                              std::strerror(errno));
    }
    setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
    setenv("LISTEN_FDS", "1", 1);
    unsetenv("LISTEN_FDNAMES");
  }
  std::fflush(nullptr);
  execv("/proc/self/exe", argv.data());
  return base::Status::Io(std::string("exec of /proc/self/exe: ") + std::strerror(errno));
}

}  // namespace meridian::server
