#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "domain/cluster.h"

namespace meridian::sim {

// The estate and tenants a replay runs on. See docs/replay-format.md for the file format.
struct ReplayProject {
  std::string name;
  std::string team;
  double weight = 1;
  double guaranteed_gpus = 0;  // 0: nothing guaranteed
  double limit_gpus = -1;      // -1: no limit
};

// A group of nodes that a provisioner adds and removes (an elastic NodePool,
// docs/adr/0039-elastic-pools.md): its `count` nodes are in the estate from the start, off until a
// replay that bursts grows the pool for jobs that find no room; each costs its GPUs at `price`
// from the moment it is asked for until it is released.
struct ReplayElasticPool {
  std::string name;
  std::string cluster;
  std::vector<std::string> nodes;  // its nodes, by name (the pool's maxNodes)
  double boot_delay = 120;         // seconds from the request to a schedulable node
  double idle_timeout = 600;       // an up node empty this long is released
  double price_per_gpu_hour = 0;   // its own, else its cluster's price of its model
};

struct ReplayCluster {
  std::vector<domain::Cluster> clusters;
  std::vector<domain::Node> nodes;
  std::vector<ReplayProject> projects;
  // Nodes that a node pool declares (`nodes: N`), which a what-if resizes with the pool; the
  // others are agents' nodes, kept as they are (src/sim/history.h).
  std::set<std::string> declared;
  std::vector<ReplayElasticPool> elastic;
  // Datasets jobs read: each one's size and the clusters that hold it (in their dataset lists
  // too). With the clusters' bandwidths and egress prices, what placement weighs and a run
  // away from the data pays (docs/adr/0044-datasets.md).
  std::vector<domain::Dataset> datasets;
};

// One job of a replay: `tasks` replicas of the same request, run for `duration` seconds.
struct ReplayJob {
  int64_t id = 0;
  double submit_time = 0;
  double duration = 0;
  int32_t tasks = 1;
  int32_t gpus_per_task = 1;            // 0: CPU-only
  int32_t gpu_milli = 1000;             // per GPU; below 1000 only with one GPU per task
  std::vector<std::string> gpu_models;  // allowed models; empty: any
  std::string project = "default";
  int32_t priority = 0;
  double runtime_estimate = 0;  // what the scheduler is told; 0: unknown
  double runtime_limit = 0;     // 0: none; a job reaching it is stopped
  int64_t cpu_milli = 0;        // per task
  int64_t memory_mib = 0;       // per task
  bool gang = false;
  // Seconds into its run after which its GPUs sit idle until it ends (a notebook left open, a
  // job waiting on something else); -1: busy throughout. What idle reclamation can take back.
  double idle_from = -1;
  std::vector<std::string> datasets;  // what it reads (the cluster file's datasets)
  // Each task takes a MIG instance of this profile ("1g.10gb") instead of a GPU; empty: GPUs.
  std::string mig_profile;
};

// Idle phases for a trace that records none (the Alibaba trace has no utilisation): a share
// `share` (0..1) of the jobs, drawn with `seed`, idles for the last `idle_fraction` (0..1) of its
// duration. Jobs that already have an idle phase keep it.
void ModelIdlePhases(std::vector<ReplayJob>* jobs, double share, double idle_fraction,
                     uint64_t seed);

// The cluster description: Meridian's YAML format, or an Alibaba GPU-2023 node list (CSV).
base::Result<ReplayCluster> ParseReplayCluster(std::string_view text, std::string_view file);
base::Result<ReplayCluster> ReadReplayCluster(const std::string& path);

// The jobs: Meridian's CSV format, or an Alibaba GPU-2023 task list (one job per task, its
// creation time as submission and its run as duration, its QoS class as project).
base::Result<std::vector<ReplayJob>> ParseReplayJobs(std::string_view text, std::string_view file);
base::Result<std::vector<ReplayJob>> ReadReplayJobs(const std::string& path);

}  // namespace meridian::sim
