#include "server/restart_in_place.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/log.h"

extern char** environ;

namespace meridian::server {

namespace {

constexpr const char* kVariable = "MERIDIAN_RESTART_LISTEN";  // PID:HOST:PORT

// Closes (or marks close-on-exec) every descriptor from `first` on.
void CloseFrom(unsigned first, bool on_exec) {
  if (syscall(SYS_close_range, first, ~0u, on_exec ? CLOSE_RANGE_CLOEXEC : 0u) == 0) return;
  rlimit limit{};
  const rlim_t last = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                          ? limit.rlim_cur
                          : 1 << 20;
  for (rlim_t fd = first; fd < last; ++fd) {
    if (on_exec) {
      (void)fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    } else {
      (void)close(static_cast<int>(fd));
    }
  }
}

}  // namespace

base::Status RestartInPlace(const std::string& listen) {
  // After a package upgrade this is the old program, kept by the kernel for as long as it runs.
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    if (std::strstr(exe, " (deleted)") != nullptr) {
      base::log::Warn(
          "the meridian binary was replaced since this server started: it starts afresh on the "
          "program it started with; restart the service to run the new one");
    }
  }
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
  // The environment as it is, with the address to bind again; built here rather than set, as
  // other threads may read the environment meanwhile.
  std::vector<std::string> env;
  const std::string prefix = std::string(kVariable) + "=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env.emplace_back(*e);
  }
  env.push_back(prefix + std::to_string(getpid()) + ":" + listen);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  CloseFrom(3, /*on_exec=*/true);
  std::fflush(nullptr);
  execve("/proc/self/exe", argv.data(), envp.data());
  return base::Status::Io(std::string("exec of /proc/self/exe: ") + std::strerror(errno));
}

std::string TakeRestartListen() {
  const char* value = std::getenv(kVariable);
  if (value == nullptr) return "";
  const std::string text = value;
  unsetenv(kVariable);
  const size_t colon = text.find(':');
  if (colon == std::string::npos || std::atol(text.substr(0, colon).c_str()) != getpid()) {
    return "";  // another process's (inherited by a child of a server): not ours
  }
  // A thread of the old process may have opened a descriptor (a client's connection) after the
  // close-on-exec sweep: nothing of the old process is ours to keep.
  CloseFrom(3, /*on_exec=*/false);
  return text.substr(colon + 1);
}

}  // namespace meridian::server
