#include "agent/mps.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/command.h"
#include "base/log.h"

namespace meridian::agent {

namespace {

constexpr double kCommandSeconds = 10;

// Whether the daemon whose pid file is in `pipe_dir` still runs (a zombie does not).
bool DaemonRuns(const std::string& pipe_dir) {
  std::ifstream in(pipe_dir + "/nvidia-cuda-mps-control.pid");
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

// Makes `dir` (or takes it as it is) with `mode`, in group `gid` when given.
base::Status MakeDir(const std::string& dir, mode_t mode, std::optional<uint32_t> gid) {
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return base::Status::Io("cannot make " + dir + ": " + std::strerror(errno));
  }
  if ((gid && ::chown(dir.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(*gid)) != 0) ||
      ::chmod(dir.c_str(), mode) != 0) {
    return base::Status::Io("cannot give " + dir + " its owner and mode: " + std::strerror(errno));
  }
  return base::Status::Ok();
}

}  // namespace

MpsDaemons::MpsDaemons(std::string control, std::string root)
    : control_(std::move(control)), root_(std::move(root)) {}

std::string MpsDaemons::Program() const { return base::FindProgram(control_); }

MpsEndpoint MpsDaemons::EndpointOf(const Key& key) const {
  auto g = generation_.find(key);
  const std::string dir = root_ + "/" + std::to_string(key.second) + "/" +
                          std::to_string(key.first) + "/" +
                          std::to_string(g == generation_.end() ? 0 : g->second);
  return {dir + "/pipe", dir + "/log"};
}

std::map<std::string, std::string> MpsDaemons::EnvOf(const MpsEndpoint& e,
                                                     const std::string& uuid) const {
  return {{"CUDA_VISIBLE_DEVICES", uuid},
          {"CUDA_MPS_PIPE_DIRECTORY", e.pipe_dir},
          {"CUDA_MPS_LOG_DIRECTORY", e.log_dir}};
}

base::Result<MpsEndpoint> MpsDaemons::Acquire(int64_t job, int32_t gpu, const std::string& uuid,
                                              std::optional<uint32_t> gid) {
  const std::string program = Program();
  if (program.empty()) {
    return base::Status::NotFound(control_ + " is not installed on this node");
  }
  const Key key{job, gpu};
  if (running_.count(key) && DaemonRuns(EndpointOf(key).pipe_dir)) return EndpointOf(key);
  // A daemon told to quit may still drain: the next one gets folders of its own, so that no
  // share is handed the one going away.
  if (quitting_.erase(key)) ++generation_[key];
  const MpsEndpoint e = EndpointOf(key);
  // Tasks pass through the agent's folders without listing them; the job's folder is entered by
  // its group only; its daemon's pipe and log folders are written by its MPS server, which runs
  // under the job's uid.
  const std::string gpu_dir = root_ + "/" + std::to_string(gpu);
  const std::string job_dir = gpu_dir + "/" + std::to_string(job);
  const mode_t job_mode = gid ? 0750 : 0755, inner_mode = gid ? 0770 : 0755;
  for (const auto& [dir, mode, group] :
       std::initializer_list<std::tuple<std::string, mode_t, std::optional<uint32_t>>>{
           {root_, 0711, std::nullopt},
           {gpu_dir, 0711, std::nullopt},
           {job_dir, job_mode, gid},
           {e.pipe_dir.substr(0, e.pipe_dir.rfind('/')), job_mode, gid},
           {e.pipe_dir, inner_mode, gid},
           {e.log_dir, inner_mode, gid}}) {
    if (base::Status s = MakeDir(dir, mode, group); !s.ok()) return s;
  }
  if (!DaemonRuns(e.pipe_dir)) {
    auto started = base::RunCommand({program, "-d"}, EnvOf(e, uuid), "", kCommandSeconds);
    if (!started.ok()) return started.status();
    if (started->exit_code != 0) {
      return base::Status::Io("GPU " + std::to_string(gpu) + ": " + program +
                              " -d exited with code " + std::to_string(started->exit_code) + ": " +
                              started->err);
    }
    base::log::Info("GPU {}: MPS control daemon of job {} started (pipes in {})", gpu, job,
                    e.pipe_dir);
  }
  running_[key] = uuid;
  return e;
}

void MpsDaemons::Release(int64_t job, int32_t gpu) {
  const Key key{job, gpu};
  auto it = running_.find(key);
  if (it == running_.end()) return;
  const MpsEndpoint e = EndpointOf(key);
  const std::string program = Program();
  if (!program.empty()) {
    auto quit = base::RunCommand({program}, EnvOf(e, it->second), "quit\n", kCommandSeconds);
    if (!quit.ok() || quit->exit_code != 0) {
      base::log::Warn("GPU {}: the MPS control daemon of job {} did not take quit: {}", gpu, job,
                      quit.ok() ? quit->err : quit.status().message());
    } else {
      base::log::Info("GPU {}: MPS control daemon of job {} told to quit (none of its shares runs)",
                      gpu, job);
    }
  }
  running_.erase(it);
  quitting_.insert(key);
}

}  // namespace meridian::agent
