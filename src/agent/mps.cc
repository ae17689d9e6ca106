#include "agent/mps.h"

#include <signal.h>
#include <sys/stat.h>

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

}  // namespace

MpsDaemons::MpsDaemons(std::string control, std::string root)
    : control_(std::move(control)), root_(std::move(root)) {}

std::string MpsDaemons::Program() const { return base::FindProgram(control_); }

MpsEndpoint MpsDaemons::EndpointOf(int32_t gpu) const {
  auto g = generation_.find(gpu);
  const std::string dir = root_ + "/" + std::to_string(gpu) + "/" +
                          std::to_string(g == generation_.end() ? 0 : g->second);
  return {dir + "/pipe", dir + "/log"};
}

std::map<std::string, std::string> MpsDaemons::EnvOf(const MpsEndpoint& e,
                                                     const std::string& uuid) const {
  return {{"CUDA_VISIBLE_DEVICES", uuid},
          {"CUDA_MPS_PIPE_DIRECTORY", e.pipe_dir},
          {"CUDA_MPS_LOG_DIRECTORY", e.log_dir}};
}

base::Result<MpsEndpoint> MpsDaemons::Acquire(int32_t gpu, const std::string& uuid) {
  const std::string program = Program();
  if (program.empty()) {
    return base::Status::NotFound(control_ + " is not installed on this node");
  }
  if (running_.count(gpu) && DaemonRuns(EndpointOf(gpu).pipe_dir)) return EndpointOf(gpu);
  // A daemon told to quit may still drain: the next one gets folders of its own, so that no
  // share is handed the one going away.
  if (quitting_.erase(gpu)) ++generation_[gpu];
  const MpsEndpoint e = EndpointOf(gpu);
  // Tasks run under uids of their own: they enter the folders to reach the daemon's pipes (which
  // the daemon makes), and nothing else there.
  const std::string gpu_dir = root_ + "/" + std::to_string(gpu);
  for (const std::string& dir :
       {root_, gpu_dir, e.pipe_dir.substr(0, e.pipe_dir.rfind('/')), e.pipe_dir, e.log_dir}) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return base::Status::Io("cannot make " + dir + ": " + std::strerror(errno));
    }
    ::chmod(dir.c_str(), 0755);
  }
  if (!DaemonRuns(e.pipe_dir)) {
    auto started = base::RunCommand({program, "-d"}, EnvOf(e, uuid), "", kCommandSeconds);
    if (!started.ok()) return started.status();
    if (started->exit_code != 0) {
      return base::Status::Io("GPU " + std::to_string(gpu) + ": " + program +
                              " -d exited with code " + std::to_string(started->exit_code) + ": " +
                              started->err);
    }
    base::log::Info("GPU {}: MPS control daemon started (pipes in {})", gpu, e.pipe_dir);
  }
  running_[gpu] = uuid;
  return e;
}

void MpsDaemons::Release(int32_t gpu) {
  auto it = running_.find(gpu);
  if (it == running_.end()) return;
  const MpsEndpoint e = EndpointOf(gpu);
  const std::string program = Program();
  if (!program.empty()) {
    auto quit = base::RunCommand({program}, EnvOf(e, it->second), "quit\n", kCommandSeconds);
    if (!quit.ok() || quit->exit_code != 0) {
      base::log::Warn("GPU {}: the MPS control daemon did not take quit: {}", gpu,
                      quit.ok() ? quit->err : quit.status().message());
    } else {
      base::log::Info("GPU {}: MPS control daemon told to quit (no share of the GPU runs)", gpu);
    }
  }
  running_.erase(it);
  quitting_.insert(gpu);
}

}  // namespace meridian::agent
