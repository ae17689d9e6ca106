#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "base/status.h"

namespace meridian::agent {

// Where the tasks of one shared GPU reach its MPS control daemon (CUDA_MPS_PIPE_DIRECTORY) and
// where it logs (CUDA_MPS_LOG_DIRECTORY).
struct MpsEndpoint {
  std::string pipe_dir;
  std::string log_dir;
};

// NVIDIA's Multi-Process Service for the GPUs that fractional tasks share in pools of
// gpuSharing mps (issue 20, docs/adr/0045-gpu-partitioning.md): one control daemon per GPU,
// started when the first share of it starts and told to quit when the last one ends (never
// waited for: the next daemon of the GPU gets new folders), each with a pipe folder of its own
// under the agent's work directory, so that a task reaches its GPU's daemon only. The shares
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
  // GPU `gpu`'s daemon, for the GPU `uuid`: the one already running (started by this agent or
  // an earlier life of it, whose pid file is in the pipe folder), else one started now.
  base::Result<MpsEndpoint> Acquire(int32_t gpu, const std::string& uuid);
  // Tells GPU `gpu`'s daemon to quit (its MPS server goes when its last client has).
  void Release(int32_t gpu);

 private:
  MpsEndpoint EndpointOf(int32_t gpu) const;
  std::map<std::string, std::string> EnvOf(const MpsEndpoint& e, const std::string& uuid) const;

  std::string control_;
  std::string root_;
  std::map<int32_t, std::string> running_;  // gpu -> its uuid
  // Each GPU's daemons so far in this life of the agent (<root>/<gpu>/<generation>), and the
  // GPUs whose daemon was told to quit: the next one starts in new folders.
  std::map<int32_t, int64_t> generation_;
  std::set<int32_t> quitting_;
};

}  // namespace meridian::agent
