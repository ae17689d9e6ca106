#include "base/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace meridian::base {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<CommandResult> Run(const std::vector<std::string>& argv,
                          std::vector<std::string> env_strings, const std::string& input,
                          double timeout);

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& extra_env,
                                 const std::string& input, double timeout) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!extra_env.count(kv.substr(0, kv.find('=')))) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  return Run(argv, std::move(env_strings), input, timeout);
}

Result<CommandResult> RunCommandWithOnly(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env,
                                         const std::string& input, double timeout) {
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  return Run(argv, std::move(env_strings), input, timeout);
}

namespace {

Result<CommandResult> Run(const std::vector<std::string>& argv,
                          std::vector<std::string> env_strings, const std::string& input,
                          double timeout) {
  if (argv.empty()) return Status::Invalid("no command to run");
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);

  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Status::Io("pipe: " + std::string(strerror(errno)));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return Status::Io("pipe: " + std::string(strerror(errno)));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    return Status::Io("pipe: " + std::string(strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]), close(out[1]), close(err[1]);
  if (spawned != 0) {
    close(in[1]), close(out[0]), close(err[0]);
    return Status::Io("cannot run " + argv[0] + ": " + strerror(spawned));
  }
  // Feed the input and drain both outputs together, so that a full pipe never stalls either side.
  CommandResult result;
  size_t written = 0;
  int in_fd = in[1];
  if (input.empty()) close(in_fd), in_fd = -1;
  if (in_fd >= 0) fcntl(in_fd, F_SETFL, O_NONBLOCK);
  const double deadline = Now() + timeout;
  bool timed_out = false;
  int open_outputs = 2;
  while (open_outputs > 0 || in_fd >= 0) {
    std::array<pollfd, 3> fds{};
    fds[0] = {out[0], POLLIN, 0};
    fds[1] = {err[0], POLLIN, 0};
    fds[2] = {in_fd, POLLOUT, 0};
    const double left = deadline - Now();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds.data(), 3, static_cast<int>(std::min(left, 1.0) * 1000) + 1) < 0 &&
        errno != EINTR) {
      timed_out = true;  // cannot wait for it any more: killed, never waited on blocked
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        (k == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[k].fd);
        (k == 0 ? out[0] : err[0]) = -1;
        --open_outputs;
      }
    }
    if (in_fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = write(in_fd, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) written = input.size();
      if (written >= input.size()) close(in_fd), in_fd = -1;
    }
  }
  if (in_fd >= 0) close(in_fd);
  if (out[0] >= 0) close(out[0]);
  if (err[0] >= 0) close(err[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status(StatusCode::kUnavailable, argv[0] + " did not answer within " +
                                                std::to_string(static_cast<int>(timeout)) + " s");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace

std::string FindProgram(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) {
    return ::access(program.c_str(), X_OK) == 0 ? program : "";
  }
  const char* path = std::getenv("PATH");
  const std::string folders = path ? path : "/usr/bin:/bin";
  size_t from = 0;
  for (;;) {
    const size_t colon = folders.find(':', from);
    const std::string dir = folders.substr(from, colon == std::string::npos ? colon : colon - from);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) return "";
    from = colon + 1;
  }
}

}  // namespace meridian::base
