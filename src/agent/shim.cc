#include "agent/shim.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/staging.h"
#include "agent/task_isolation.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/log.h"
#include "domain/failure_cause.h"
#include "protocol/agent_protocol.h"

namespace meridian::agent {

namespace {

using Json = nlohmann::json;

volatile sig_atomic_t g_terminate = 0;
void OnTerminate(int) { g_terminate = 1; }

// The agent's blocked signals are inherited through fork and exec: neither the shim nor what it
// runs may keep them blocked. SIGTERM and SIGINT set g_terminate.
void CatchTermination() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

double ModifiedAt(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
}

// Written whole or not at all: the agent may read at any moment. Root's, read by root (the
// notice: by the task too, which alone may enter the folder besides root).
void WriteAtomically(const std::string& path, const std::string& text, int mode = 0600) {
  (void)WritePrivateFile(path, text, mode);
}

// Whether `name` is a file in a folder of `path` (":"-separated) that this process can reach.
bool OnPath(const std::string& name, const std::string& path) {
  size_t from = 0;
  for (;;) {
    const size_t colon = path.find(':', from);
    const std::string dir = path.substr(from, colon == std::string::npos ? colon : colon - from);
    struct stat st;
    if (::stat(((dir.empty() ? "." : dir) + "/" + name).c_str(), &st) == 0) return true;
    if (colon == std::string::npos) return false;
    from = colon + 1;
  }
}

// Replaces this process with `args` (looked up on the PATH of `env`) in environment `env`;
// returns only when that fails, with errno set. A command in no folder of the PATH that this
// process can enter is not found (ENOENT), although execvpe says EACCES when a folder of the PATH
// is closed to it (a task's uid and the agent's /root/... entries).
void Exec(std::vector<std::string>& args, std::vector<std::string>& env) {
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  if (args[0].find('/') == std::string::npos && !OnPath(args[0], path)) {
    errno = ENOENT;
    return;
  }
  setenv("PATH", path.c_str(), 1);  // execvpe searches the caller's PATH: the task's
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execvpe(argv[0], argv.data(), envp.data());
}

// The agent's lease, as this task's supervisor sees it. The agent dates the file at every
// renewal and writes into it the lease and fence grace the server last gave, so that a change of
// policy reaches tasks that run already; the spec's figures stand until the file has some.
class Lease {
 public:
  Lease(std::string file, double lease, double fence_grace)
      : file_(std::move(file)), lease_(lease), fence_grace_(fence_grace) {}
  bool Watched() const { return lease_ > 0 && !file_.empty(); }
  double fence_grace() const { return fence_grace_; }
  // When it runs out (a missing file: long ago).
  double ExpiresAt() {
    const double dated = ModifiedAt(file_);
    if (dated != dated_) {
      dated_ = dated;
      const Json j = Json::parse(base::ReadWholeFile(file_), nullptr, false);
      // A file being replaced, or one without figures yet: the last known ones stand.
      auto terms = protocol::DecodeLeaseTerms(j);
      if (terms.ok()) {
        if (terms->lease > 0) lease_ = terms->lease;
        if (terms->fence_grace) fence_grace_ = *terms->fence_grace;
      }
    }
    return dated + lease_;
  }

 private:
  std::string file_;
  double lease_;
  double fence_grace_;
  double dated_ = -1;
};

// SIGKILL to the task's process group, and to its cgroup (v2) where the agent made one: that
// also reaches what left the group (setsid, a daemon).
void KillAll(pid_t group, const std::vector<std::string>& procs) {
  kill(-group, SIGKILL);
  for (const std::string& p : procs) {
    const size_t slash = p.rfind('/');
    if (slash == std::string::npos || p.substr(slash + 1) != "cgroup.procs") continue;
    const int fd = open((p.substr(0, slash) + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) continue;  // cgroup v1, or a kernel before 5.14
    (void)!write(fd, "1", 1);
    close(fd);
  }
}

}  // namespace

int RunShim(const std::string& dir) {
  const Json text = Json::parse(base::ReadWholeFile(dir + "/spec.json"), nullptr, false);
  auto decoded = protocol::DecodeShimSpec(text);
  if (text.is_discarded() || !decoded.ok()) {
    base::log::Error("{}/spec.json: {}", dir,
                     text.is_discarded() ? "not JSON" : decoded.status().message());
    return 2;
  }
  const protocol::ShimSpec& spec = *decoded;
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env;
  for (const auto& [k, v] : spec.env) env.push_back(k + "=" + v);
  const std::string output = spec.output.empty() ? dir + "/output.log" : spec.output;
  const std::string& cwd = spec.cwd;
  const double grace = spec.grace;
  const int notice_signal = spec.notice_signal;
  const std::string& notice_file = spec.notice_file;
  // From an agent that the server gave none: the task's own grace period.
  const double fence_grace = spec.fence_grace.value_or(grace);
  const double runtime_limit = spec.runtime_limit;
  const std::vector<std::string>& procs = spec.cgroup_procs;
  std::vector<std::string> cleanup = spec.cleanup;
  if (args.empty()) {
    protocol::ShimExit nothing;
    nothing.reason = "nothing to run";
    nothing.finished_at = base::WallClockNow();
    WriteAtomically(dir + "/exit.json", protocol::ToJson(nothing).dump());
    return 1;
  }

  CatchTermination();
  signal(SIGHUP, SIG_IGN);

  // Its checkpoint folder is its uid's, whatever uid wrote it before (a run on another node).
  if (!spec.owned.empty() && spec.owner > 0) {
    if (base::Status s = ChownTree(spec.owned, static_cast<uint32_t>(spec.owner),
                                   static_cast<uint32_t>(spec.owner));
        !s.ok()) {
      protocol::ShimExit ended;
      ended.reason = "its checkpoint folder could not be given to it: " + s.message();
      ended.finished_at = base::WallClockNow();
      WriteAtomically(dir + "/exit.json", protocol::ToJson(ended).dump());
      return 0;
    }
  }
  // Its datasets first, into the site's cache: stopped like the task would be (at once, since a
  // copy has nothing to save), and a copy that fails is a task that never started.
  if (!spec.stages.empty()) {
    Lease staging_lease{spec.lease_file, spec.lease, fence_grace};
    auto stop_reason = [&]() -> std::string {
      if (g_terminate) return "the agent stopped";
      if (Exists(dir + "/stop")) {
        auto stop = protocol::DecodeShimStop(
            Json::parse(base::ReadWholeFile(dir + "/stop"), nullptr, false));
        return stop.ok() && !stop->reason.empty() ? stop->reason : "stopped by the agent";
      }
      if (staging_lease.Watched() && base::WallClockNow() > staging_lease.ExpiresAt()) {
        return std::string(domain::kLeaseLostReason);
      }
      return "";
    };
    const double began = base::WallClockNow();
    const StagingResult staged =
        StageDatasets(spec.stages, output, dir + "/staging.json", stop_reason);
    if (!staged.stopped.empty() || !staged.error.empty()) {
      protocol::ShimExit ended;
      ended.reason = staged.stopped;
      ended.staging_error = staged.error;
      ended.started_at = began;
      ended.finished_at = base::WallClockNow();
      WriteAtomically(dir + "/exit.json", protocol::ToJson(ended).dump());
      return 0;
    }
  }

  int gate[2];
  if (pipe(gate) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    // The task: its own process group, output to the file, in its cgroups, then exec.
    setpgid(0, 0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    close(gate[1]);
    char go = 0;
    (void)!read(gate[0], &go, 1);  // until the parent has put us in our cgroups
    close(gate[0]);
    // The output file is the task's alone (the agent made it, owned by the task's uid). Nothing
    // of the shim's or the agent's reaches the task: no descriptor but 0, 1 and 2, and, where the
    // spec names a uid, no root (checked: a task never runs as root by mistake).
    ChildIoTo(output);
    if (spec.uid && spec.gid) {
      // Only its own GPUs, then no root: neither can be undone without root.
      base::Status ready = IsolateMounts(spec.hide_devices, spec.read_only, spec.read_write,
                                         spec.devices_dir, spec.devices);
      if (ready.ok()) {
        ready = DropPrivileges(static_cast<uint32_t>(*spec.uid), static_cast<uint32_t>(*spec.gid));
      }
      if (!ready.ok()) {
        std::fprintf(stderr, "meridian: the task was not started: %s\n", ready.message().c_str());
        _exit(126);
      }
    }
    // Entered as the task's user: a folder it may not enter is refused here.
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
      std::fprintf(stderr, "meridian: cannot enter working directory %s: %s\n", cwd.c_str(),
                   std::strerror(errno));
      _exit(126);
    }
    Exec(args, env);
    std::fprintf(stderr, "meridian: cannot run %s: %s\n", args[0].c_str(), std::strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  close(gate[0]);
  setpgid(child, child);
  std::string cgroup_error;
  for (const std::string& p : procs) {
    std::ofstream f(p);
    f << child;
    f.close();
    if (!f && cgroup_error.empty()) cgroup_error = "cannot join " + p;
  }
  const double started = base::WallClockNow();
  WriteAtomically(dir + "/started.json",
                  protocol::ToJson(protocol::ShimStarted{child, started, cgroup_error}).dump());
  (void)!write(gate[1], "x", 1);
  close(gate[1]);

  // An ordinary stop (the agent's request, the runtime limit): the notice, SIGTERM half the
  // grace period later, SIGKILL at its end. A lost lease: the notice and SIGTERM at once, SIGKILL
  // at most fenceGrace after the lease ran out, so that the task is dead before the server runs
  // it elsewhere (domain/agent_timing.h).
  Lease watch{spec.lease_file, spec.lease, fence_grace};
  double stop_at = 0, term_at = 0, kill_at = 0;  // 0: not yet
  bool lease_lost = false, termed = false, killed = false;
  std::string reason;
  int status = 0;
  auto notice = [&](double deadline) {
    if (!notice_file.empty()) {
      WriteAtomically(notice_file, Json{{"reason", reason}, {"deadline", deadline}}.dump() + "\n",
                      0644);
    }
    if (notice_signal > 0) kill(-child, notice_signal);
  };
  for (;;) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    const double now = base::WallClockNow();
    if (stop_at == 0) {
      if (g_terminate) reason = "the agent stopped";
      double within = grace;
      if (Exists(dir + "/stop")) {
        const Json j = Json::parse(base::ReadWholeFile(dir + "/stop"), nullptr, false);
        auto stop = protocol::DecodeShimStop(j);
        if (stop.ok()) {
          reason = stop->reason;
          if (stop->within) within = std::min(grace, *stop->within);
        }
        if (reason.empty()) reason = "stopped by the agent";
      }
      if (runtime_limit > 0 && now - started > runtime_limit) reason = domain::kRuntimeLimitReason;
      if (!reason.empty()) {
        stop_at = now;
        term_at = now + within / 2;
        kill_at = now + within;
        notice(kill_at);
      }
    }
    if (!lease_lost && watch.Watched()) {
      const double expired_at = watch.ExpiresAt();
      if (now > expired_at) {
        lease_lost = true;
        // Counted from when the lease ran out, not from when this loop saw it.
        const double fence_by = expired_at + std::min(grace, watch.fence_grace());
        if (stop_at == 0) {
          reason = domain::kLeaseLostReason;
          stop_at = now;
          notice(fence_by);
        }
        term_at = now;
        kill_at = kill_at == 0 ? fence_by : std::min(kill_at, fence_by);
      }
    }
    if (stop_at > 0 && !termed && now >= term_at) {
      kill(-child, SIGTERM);
      termed = true;
    }
    if (stop_at > 0 && !killed && now >= kill_at) {
      KillAll(child, procs);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(killed ? 10 : 50));
  }
  KillAll(child, procs);  // whatever the task left behind in its group
  if (!cleanup.empty()) {
    // A container outlives a killed client: remove it before saying the run has ended.
    const pid_t c = fork();
    if (c == 0) {
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      Exec(cleanup, env);
      _exit(127);
    }
    if (c > 0) waitpid(c, nullptr, 0);
  }
  protocol::ShimExit exit;
  exit.started_at = started;
  exit.finished_at = base::WallClockNow();
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.exit_code = 128 + WTERMSIG(status);
    exit.signal = WTERMSIG(status);
  }
  exit.reason = reason;
  WriteAtomically(dir + "/exit.json", protocol::ToJson(exit).dump());
  return 0;
}

namespace {

std::string ReadFd(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

void WriteEnd(const protocol::SessionEnd& end) {
  const std::string text = protocol::ToJson(end).dump();
  (void)!::write(4, text.data(), text.size());
}

// In the command's process, before exec: the task's cgroups, its mount namespace (its hidden
// GPUs with it), a session of its own with the terminal as its controlling one, then its uid.
base::Status EnterTask(const protocol::ShimExec& spec) {
  for (const std::string& p : spec.cgroup_procs) {
    std::ofstream f(p);
    f << getpid();
    f.close();
    if (!f) return base::Status::Io("cannot join the task's cgroup " + p);
  }
  if (spec.namespace_pid > 0) {
    const std::string ns = "/proc/" + std::to_string(spec.namespace_pid) + "/ns/mnt";
    const int fd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNS) != 0) {
      return base::Status::Io("cannot enter the task's mount namespace (" + ns +
                              "): " + std::strerror(errno));
    }
    ::close(fd);
  }
  setsid();
  if (spec.tty && ::ioctl(0, TIOCSCTTY, 0) != 0) {
    return base::Status::Io(std::string("cannot take the terminal: ") + std::strerror(errno));
  }
  if (spec.uid && spec.gid) {
    return DropPrivileges(static_cast<uint32_t>(*spec.uid), static_cast<uint32_t>(*spec.gid));
  }
  return base::Status::Ok();
}

}  // namespace

int RunExecShim() {
  const Json text = Json::parse(ReadFd(3), nullptr, false);
  ::close(3);
  auto decoded = protocol::DecodeShimExec(text);
  if (text.is_discarded() || !decoded.ok()) {
    protocol::SessionEnd end;
    end.error =
        text.is_discarded() ? "the agent's exec spec is not JSON" : decoded.status().message();
    WriteEnd(end);
    return 2;
  }
  protocol::ShimExec spec = std::move(decoded.value());
  CatchTermination();
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigaction(SIGHUP, &sa, nullptr);  // the session's end: the command's too

  const pid_t child = fork();
  if (child < 0) {
    WriteEnd({std::nullopt, std::nullopt, "cannot fork: " + std::string(std::strerror(errno))});
    return 1;
  }
  if (child == 0) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    ::close(4);
    if (base::Status s = EnterTask(spec); !s.ok()) {
      std::fprintf(stderr, "meridian: %s\n", s.message().c_str());
      _exit(126);
    }
    CloseFdsFrom(3);
    if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) {
      std::fprintf(stderr, "meridian: cannot enter %s: %s\n", spec.cwd.c_str(),
                   std::strerror(errno));
      _exit(126);
    }
    std::vector<std::string> env;
    for (const auto& [k, v] : spec.env) env.push_back(k + "=" + v);
    Exec(spec.argv, env);
    std::fprintf(stderr, "meridian: cannot run %s: %s\n", spec.argv[0].c_str(),
                 std::strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  // The terminal or pipes are the command's alone now: they end when it (and what it started
  // with them) ends.
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2; ++fd) dup2(null, fd);
  if (null > 2) ::close(null);
  int status = 0;
  double kill_at = 0;
  for (;;) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) break;
    if (g_terminate && kill_at == 0) {
      kill(-child, SIGHUP);
      kill(-child, SIGTERM);
      kill_at = base::WallClockNow() + 2;
    }
    if (kill_at > 0 && base::WallClockNow() >= kill_at) kill(-child, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  protocol::SessionEnd end;
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  WriteEnd(end);
  return 0;
}

}  // namespace meridian::agent
