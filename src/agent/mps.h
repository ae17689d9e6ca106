#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace meridian::agent {

// Where a job's tasks on one shared GPU reach their MPS control daemon (CUDA_MPS_PIPE_DIRECTORY)
// and where it logs (CUDA_MPS_LOG_DIRECTORY).
struct MpsEndpoint {
  std::string pipe_dir;
  std::string log_dir;
};

// NVIDIA's Multi-Process Service for the GPUs that fractional tasks share in pools of
// gpuSharing mps (issue 20, docs/adr/0045-gpu-partitioning.md): one control daemon per job and
// GPU, started when the job's first share of the GPU starts and told to quit when its last one
// there ends (never waited for: the job's next daemon there gets new folders). A daemon serves
// one uid's processes at a time, and each job runs under a uid of its own: so each job gets its
// own, and the jobs sharing a GPU run side by side (their MPS servers time-sliced by the GPU)
// instead of one waiting for the other's every process to end. Where jobs run under uids of their
// own, the daemon runs as the job's uid (as NVIDIA documents a user's own daemon), started and
// told to quit through setpriv, and its pipe and log folders are the job's (0700), under folders
// of root's that tasks pass through without listing: <root>/<gpu>/<job>/<generation>/{pipe,log}.
// So no task reaches another job's daemon, and root never writes where a task may. The shares
// themselves (active-thread percentage, pinned device memory) are set in each task's environment
// (Agent::TaskEnv), which MPS enforces. Without the control program installed, shares are
// time-sliced, and the agent says so. The agent's loop calls it; not thread-safe.
class MpsDaemons {
 public:
  // `control`: the control program (nvidia-cuda-mps-control, looked up in PATH, or a path);
  // `root`: the folder under which each GPU's pipe and log folders are made.
  MpsDaemons(std::string control, std::string root);

  // The control program's path; empty when it is not installed.
  std::string Program() const;
  // Job `job`'s daemon on GPU `gpu` (the GPU `uuid`): the one already running (started by this
  // agent or an earlier life of it, whose pid file is in the pipe folder), else one started now.
  // `uid`: the uid (and gid) the job's tasks run under (none: the agent's own, and folders
  // anyone enters).
  base::Result<MpsEndpoint> Acquire(int64_t job, int32_t gpu, const std::string& uuid,
                                    std::optional<uint32_t> uid);
  // Tells job `job`'s daemon on GPU `gpu` to quit (its MPS server goes when its last client has),
  // as `uid`; one an earlier life of the agent started too.
  void Release(int64_t job, int32_t gpu, std::optional<uint32_t> uid);

 private:
  using Key = std::pair<int64_t, int32_t>;  // job, gpu
  struct Daemon {
    std::string uuid;
    std::optional<uint32_t> uid;
  };
  MpsEndpoint EndpointOf(const Key& key) const;
  std::map<std::string, std::string> EnvOf(const MpsEndpoint& e, const std::string& uuid) const;
  // The control program's command line, run as `uid` when given.
  std::vector<std::string> As(std::optional<uint32_t> uid, std::vector<std::string> argv) const;
  // The generation an earlier life of the agent got to for `key` (the highest folder there).
  int64_t GenerationOnDisk(const Key& key) const;

  std::string control_;
  std::string root_;
  std::map<Key, Daemon> running_;
  // Each daemon's generation in this life of the agent (<root>/<gpu>/<job>/<generation>), and
  // those told to quit: the next one of the job on the GPU starts in new folders.
  std::map<Key, int64_t> generation_;
  std::set<Key> quitting_;
};

}  // namespace meridian::agent
