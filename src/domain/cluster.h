#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meridian::domain {

enum class SiteKind { kOnPrem, kCloud };
enum class Backend { kAgent, kSlurm, kKubernetes };
enum class PoolPurpose { kAny, kTraining, kInference, kInteractive };

// How a pool's GPUs are shared among fractional requests (issue 20): through an MPS server per
// GPU with each task's share of compute and memory enforced (mps, the default; time-slicing where
// MPS is not installed, and the job is told), by plain time-slicing without limits (development
// pools), or not at all (exclusive: whole GPUs and MIG instances only).
enum class GpuSharing : int8_t { kMps, kTimeSlicing, kExclusive };

// Where a site keeps data on its shared filesystem (paths every node of the site sees alike):
// each job's checkpoint folder, and the cache that datasets staged from elsewhere go to.
struct ClusterStorage {
  std::string checkpoints;        // empty: jobs here get no checkpoint folder
  std::string cache;              // empty: nothing can be staged here
  double cache_capacity_gib = 0;  // 0: no limit
  // Copies a dataset into the cache: words with {source} and {target} in them (rsync, an
  // object-store CLI); empty: `cp -a`.
  std::vector<std::string> staging_command;

  bool operator==(const ClusterStorage&) const = default;
};

// A site: an on-prem cluster or a cloud region, with what a GPU-hour costs there (the amortised
// rate on-prem), the datasets it holds, and its network to other sites.
struct Cluster {
  std::string name;
  SiteKind kind = SiteKind::kOnPrem;
  std::string region;
  Backend backend = Backend::kAgent;
  std::map<std::string, double> price_per_gpu_hour;  // by GPU model name
  // Datasets found here: the Cluster's own `datasets` list and the Dataset documents that name
  // a location here.
  std::vector<std::string> datasets;
  double egress_per_gib = 0;                          // what a GiB leaving the site costs
  std::map<std::string, double> bandwidth_gbps = {};  // to other sites (either end declares)
  ClusterStorage storage = {};
};

// Where a dataset lives: a path on one site's shared filesystem, or an object-store URL in that
// site's region (staged into the cache before a task reads it).
struct DatasetLocation {
  std::string cluster;
  std::string path;
  std::string url;

  bool operator==(const DatasetLocation&) const = default;
};

// A named dataset that jobs read (a Dataset document): its size and its replicas.
struct Dataset {
  std::string name;
  double size_gib = 0;
  std::vector<DatasetLocation> locations;
  std::vector<std::string> pinned_in;  // clusters whose cache keeps a staged copy for good

  bool operator==(const Dataset&) const = default;
};

// A copy of a dataset staged into a site's cache (a DatasetCopy object the server keeps): what
// the data score counts as local there, and what eviction weighs.
struct DatasetCopy {
  std::string cluster;
  std::string dataset;
  std::string path;
  double size_gib = 0;
  double staged_at = 0;
  double last_used = 0;  // when a task last found it there

  bool operator==(const DatasetCopy&) const = default;
};

// The DatasetCopy object's name: "<cluster>.<dataset>" (names hold no dots).
inline std::string DatasetCopyName(const std::string& cluster, const std::string& dataset) {
  return cluster + "." + dataset;
}

// The taint every node of a spot pool carries: only jobs that may be preempted run there (they
// tolerate it without saying so), as a cloud may take a spot node back at two minutes' notice.
inline constexpr char kSpotTaint[] = "meridian.io/spot";

// Nodes of one shape in a cluster. Cloud pools are elastic between min_nodes and max_nodes.
struct NodePool {
  std::string name;
  std::string cluster;
  PoolPurpose purpose = PoolPurpose::kAny;
  bool spot = false;
  int min_nodes = 0;
  int max_nodes = 0;
  int boot_seconds = 0;
};

struct Taint {
  std::string key;
  std::string value;
  // Only NoSchedule semantics for now: a task must tolerate the taint to be placed on the node.
};

struct MigInstance {
  std::string profile;  // "3g.40gb"
  int start = 0;        // first memory slice
};

struct GpuDevice {
  std::string uuid;
  std::string model;
  int nvlink_domain = 0;  // GPUs of one node that share an NVLink/NVSwitch domain
  bool healthy = true;
  // Held by work Meridian does not manage (a job submitted to Slurm directly): what it is. Such a
  // GPU is an unhealthy slot to the scheduler, nothing is placed there.
  std::string unmanaged;
  // Whether the GPU itself works, whoever holds it: its registration says healthy and no fault
  // cordons it. What views say of an unmanaged GPU (occupied, not broken, unless it is broken).
  bool working = true;
  bool mig_enabled = false;
  std::vector<MigInstance> mig_instances;  // the current layout when MIG is enabled
};

struct Node {
  std::string name;
  std::string cluster;
  std::string pool;
  PoolPurpose purpose = PoolPurpose::kAny;    // its pool's: which kinds of job it runs
  GpuSharing gpu_sharing = GpuSharing::kMps;  // its pool's: how its GPUs are shared
  std::string rack;
  // What Meridian may place on: the node's CPUs and memory less what work outside Meridian holds
  // (the unmanaged_ amounts, which views add back to show the node's size).
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t unmanaged_cpu_milli = 0;
  int64_t unmanaged_memory_mib = 0;
  std::vector<GpuDevice> gpus;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool schedulable = true;
  // Why its runner starts no new work there (Slurm drained it); empty: it does.
  std::string unavailable;
};

}  // namespace meridian::domain
