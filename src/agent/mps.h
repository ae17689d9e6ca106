#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

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
// instead of one waiting for the other's every process to end. Each daemon's folders are under
// the agent's work directory, <root>/<gpu>/<job>/<generation>, the job's folder entered only by
// the job's group (its tasks'), so that no task reaches another job's daemon. The shares
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
  // `gid`: the group the job's tasks run in (none: the agent's own, and folders anyone enters).
  base::Result<MpsEndpoint> Acquire(int64_t job, int32_t gpu, const std::string& uuid,
                                    std::optional<uint32_t> gid);
  // Tells job `job`'s daemon on GPU `gpu` to quit (its MPS server goes when its last client has).
  void Release(int64_t job, int32_t gpu);

 private:
  using Key = std::pair<int64_t, int32_t>;  // job, gpu
  MpsEndpoint EndpointOf(const Key& key) const;
  std::map<std::string, std::string> EnvOf(const MpsEndpoint& e, const std::string& uuid) const;

  std::string control_;
  std::string root_;
  std::map<Key, std::string> running_;  // -> the GPU's uuid
  // Each daemon's generation in this life of the agent (<root>/<gpu>/<job>/<generation>), and
  // those told to quit: the next one of the job on the GPU starts in new folders.
  std::map<Key, int64_t> generation_;
  std::set<Key> quitting_;
};

}  // namespace meridian::agent
