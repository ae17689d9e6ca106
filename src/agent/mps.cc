#include "agent/mps.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include "agent/task_isolation.h"
#include "base/command.h"
#include "base/log.h"

namespace meridian::agent {

namespace {

constexpr double kCommandSeconds = 10;

// Whether the daemon whose pid file is in `pipe_dir` still runs (a zombie does not). The file is
// the daemon's, in a folder its job owns: read without following a link.
bool DaemonRuns(const std::string& pipe_dir) {
  const int fd = ::open((pipe_dir + "/nvidia-cuda-mps-control.pid").c_str(),
                        O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  const long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
  if (pid <= 0) return false;
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

std::vector<std::string> MpsDaemons::As(std::optional<uint32_t> uid,
                                        std::vector<std::string> argv) const {
  if (!uid) return argv;
  const std::string id = std::to_string(*uid);
  std::vector<std::string> out = {"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups",
                                  "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

int64_t MpsDaemons::GenerationOnDisk(const Key& key) const {
  int64_t highest = -1;
  std::error_code ec;
  const std::string dir =
      root_ + "/" + std::to_string(key.second) + "/" + std::to_string(key.first);
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.size() > 18 ||
        name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    highest = std::max<int64_t>(highest, std::stoll(name));
  }
  return highest;
}

base::Result<MpsEndpoint> MpsDaemons::Acquire(int64_t job, int32_t gpu, const std::string& uuid,
                                              std::optional<uint32_t> uid) {
  const std::string program = Program();
  if (program.empty()) {
    return base::Status::NotFound(control_ + " is not installed on this node");
  }
  const Key key{job, gpu};
  if (running_.count(key) && DaemonRuns(EndpointOf(key).pipe_dir)) return EndpointOf(key);
  if (!generation_.count(key)) {
    // An earlier life of the agent may have left this job's daemon running (its task adopted):
    // it is taken again; one that ended leaves its folders to the next generation.
    const int64_t on_disk = GenerationOnDisk(key);
    if (on_disk >= 0) {
      generation_[key] = on_disk;
      if (!DaemonRuns(EndpointOf(key).pipe_dir)) generation_[key] = on_disk + 1;
    }
  }
  // Known from now on, so that a second release of a job's daemon told to quit (and perhaps not
  // ended yet) does not take it for an earlier life's and tell it again.
  generation_.emplace(key, 0);
  // A daemon told to quit may still drain: the next one gets folders of its own, so that no
  // share is handed the one going away.
  if (quitting_.erase(key)) ++generation_[key];
  const MpsEndpoint e = EndpointOf(key);
  // The agent's folders (root's) are passed through without listing them; the daemon's pipe
  // and log folders are its job's alone where jobs have uids of their own.
  const std::string gpu_dir = root_ + "/" + std::to_string(gpu);
  const std::string job_dir = gpu_dir + "/" + std::to_string(job);
  const mode_t open_mode = 0711, own_mode = uid ? 0700 : 0755;
  for (const auto& [dir, mode, owner] :
       std::initializer_list<std::tuple<std::string, mode_t, std::optional<uint32_t>>>{
           {root_, open_mode, std::nullopt},
           {gpu_dir, open_mode, std::nullopt},
           {job_dir, open_mode, std::nullopt},
           {e.pipe_dir.substr(0, e.pipe_dir.rfind('/')), open_mode, std::nullopt},
           {e.pipe_dir, own_mode, uid},
           {e.log_dir, own_mode, uid}}) {
    const uid_t id = owner ? static_cast<uid_t>(*owner) : static_cast<uid_t>(-1);  // -1: as is
    if (base::Status s = MakeFolder(dir, id, id, mode); !s.ok()) return s;
  }
  if (!DaemonRuns(e.pipe_dir)) {
    auto started = base::RunCommand(As(uid, {program, "-d"}), EnvOf(e, uuid), "", kCommandSeconds);
    if (!started.ok()) return started.status();
    if (started->exit_code != 0) {
      return base::Status::Io("GPU " + std::to_string(gpu) + ": " + program +
                              " -d exited with code " + std::to_string(started->exit_code) + ": " +
                              started->err);
    }
    base::log::Info("GPU {}: MPS control daemon of job {} started{} (pipes in {})", gpu, job,
                    uid ? " as uid " + std::to_string(*uid) : "", e.pipe_dir);
  }
  running_[key] = {uuid, uid};
  return e;
}

void MpsDaemons::Release(int64_t job, int32_t gpu, std::optional<uint32_t> uid) {
  const Key key{job, gpu};
  if (!running_.count(key) && !generation_.count(key)) {
    // Started by an earlier life of the agent (its task adopted): told to quit all the same.
    const int64_t on_disk = GenerationOnDisk(key);
    if (on_disk >= 0) {
      generation_[key] = on_disk;
      if (DaemonRuns(EndpointOf(key).pipe_dir)) running_[key] = {"", uid};
    }
  }
  auto it = running_.find(key);
  if (it == running_.end()) return;
  const MpsEndpoint e = EndpointOf(key);
  const std::string program = Program();
  if (!program.empty()) {
    auto quit = base::RunCommand(As(it->second.uid, {program}), EnvOf(e, it->second.uuid), "quit\n",
                                 kCommandSeconds);
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
