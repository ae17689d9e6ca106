#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "domain/cluster.h"
#include "domain/gpu_model.h"

namespace meridian::sched {

using ModelId = int16_t;
inline constexpr ModelId kNoModel = -1;
// Sets of GPU models or clusters, one bit per id. A snapshot holds at most 64 of each; Build
// rejects more (see docs/adr/0002-placement-engine.md).
using Mask = uint64_t;
inline constexpr Mask kAll = ~Mask{0};
inline constexpr int kMaxMaskBits = 64;
inline Mask Bit(int i) { return Mask{1} << i; }

// One MIG instance on a GPU in MIG mode.
struct MigSlot {
  int16_t profile = -1;  // index into the model's mig_profiles
  int8_t start = 0;
  int8_t width = 0;  // memory slices
  bool allocated = false;
};

// The schedulable state of one GPU: what is free on it now.
struct GpuState {
  ModelId model = kNoModel;
  int16_t nvlink_domain = 0;
  int32_t free_milli = 1000;  // 1000: idle; 0 when used whole or when in MIG mode
  int64_t memory_mib = 0;
  int64_t free_memory_mib = 0;
  int32_t sharers = 0;  // tasks holding part of this GPU
  bool healthy = true;
  bool mig_enabled = false;
  // Its MIG layout changed (MIG mode on or off, a re-partition) within the Policy's
  // migReconfigureInterval: no other such change until the scheduler thaws it. Instances in free
  // slices are still made.
  bool mig_frozen = false;
  uint8_t mig_used = 0;  // bit i set: memory slice i belongs to an instance
  std::vector<MigSlot> mig;

  bool Idle() const { return healthy && !mig_enabled && free_milli == 1000 && sharers == 0; }
  // In MIG mode with no instance in use: it may go back to a whole GPU (MigChange::kDisableMig).
  bool IdleMig() const { return healthy && mig_enabled && sharers == 0; }
  // Whose layout may change now: idle (whole or MIG) and not changed too recently.
  bool Reshapeable() const { return !mig_frozen && (Idle() || IdleMig()); }
  // Free for a whole-GPU task: idle, or an idle MIG GPU it would take back whole.
  bool Wholeable() const { return Idle() || IdleMig(); }
};

struct NodeState {
  std::string name;
  int32_t cluster = 0;
  int32_t rack = 0;
  ModelId model = kNoModel;  // every GPU of a node is of one model; kNoModel: CPU-only node
  int64_t cpu_capacity = 0;
  int64_t cpu_free = 0;
  int64_t memory_capacity = 0;
  int64_t memory_free = 0;
  int32_t gpu_begin = 0;  // index of the node's first GPU in Snapshot::gpus
  int32_t gpu_count = 0;
  bool schedulable = true;  // Ready, not cordoned or drained (the node's own state)
  // Its runner was heard from lately. A node silent for a few heartbeats is passed over for new
  // work before it is declared lost, so that a job is not placed on one node after another of a
  // failing rack (each placement then requeued, and counted against its restarts).
  bool reachable = true;
  bool Usable() const { return schedulable && reachable; }
  domain::PoolPurpose purpose = domain::PoolPurpose::kAny;    // of its pool
  domain::GpuSharing gpu_sharing = domain::GpuSharing::kMps;  // of its pool
  std::vector<std::pair<std::string, std::string>> labels;    // sorted by key
  std::vector<domain::Taint> taints;
  // Shapes of the GPU tasks running here (tag, count): what the gpu-clustering score groups by.
  std::vector<std::pair<uint32_t, int32_t>> gpu_affinity;
};

struct ClusterState {
  std::string name;
  domain::SiteKind kind = domain::SiteKind::kOnPrem;
  std::string region;
  std::vector<double> price_by_model;  // per GPU-hour, by ModelId; 0 when unknown
  std::vector<std::string> datasets;
  double egress_per_gib = 0;                     // what a GiB leaving the site costs
  std::map<std::string, double> bandwidth_gbps;  // to other sites, as the Cluster declares it
  bool keeps_checkpoints = false;                // storage.checkpoints is set
  bool caches_data = false;                      // storage.cache is set: datasets can be staged
  // Its back end runs as many tasks of a job on each node the job uses (Slurm's
  // --ntasks-per-node): the scheduler lays a job's tasks out so there (Scheduler::PlaceEvenly).
  bool even_task_layout = false;
  // Its back end runs a job's image (the agents' container runtime); Slurm's runs commands.
  bool runs_images = true;
};

// A dataset that tasks read, and the sites that have it: where it lives (its locations and the
// Clusters that list it) and the caches it was staged to.
struct DatasetState {
  std::string name;
  double size_gib = -1;  // -1: not known (named by a Cluster, with no Dataset document)
  Mask located = 0;
  Mask cached = 0;
  Mask Held() const { return located | cached; }
};

// The capacity of an estate as the placement engine sees it: clusters, nodes and GPUs in flat
// arrays indexed by small integers, with what is free on each. Built from domain values; the
// engine mutates the free amounts as it commits placements, so a caller that wants a what-if
// placement copies the snapshot first. Not thread-safe; copies are independent.
class Snapshot {
 public:
  // Models that no node has yet but may (an elastic pool's) are `more_models`, so that jobs
  // naming them resolve, and nodes of them join in place.
  static base::Result<Snapshot> Build(const std::vector<domain::Cluster>& clusters,
                                      const std::vector<domain::Node>& nodes,
                                      const domain::GpuCatalog& catalog,
                                      const std::vector<std::string>& more_models = {});
  // The same clusters and models (their ids too) with no node: where a caller places work on
  // nodes that do not exist yet (sched/elastic.h).
  Snapshot WithoutNodes() const;

  // Appends a node that joined the estate; its cluster and GPU model must be known to the
  // snapshot already (kFailedPrecondition otherwise: build a new one). Returns its index.
  base::Result<int32_t> AddNode(const domain::Node& node);

  // Changes a node in place, as when its agent registers again or its pool's traits change: its
  // rack, CPU and memory, purpose, labels and taints, and each GPU's health and NVLink domain.
  // Its cluster and the number and models of its GPUs stay (kFailedPrecondition otherwise:
  // GPUs are indexed estate-wide, so a node cannot grow or shrink in place). What is allocated
  // stays allocated: free CPU and memory move by the change of capacity, and a GPU that turns
  // unhealthy keeps its tasks' grants until they are released (the placer never chooses it).
  base::Status UpdateNode(int32_t node, const domain::Node& n);
  // A cluster's kind, region, prices and datasets changed; its name and index stay.
  void UpdateCluster(int32_t cluster, const domain::Cluster& c);
  // Appends a cluster (kFailedPrecondition past 64: clusters are bits of masks). Returns its
  // index. Clusters are never removed in place: a task's mask names them by index.
  base::Result<int32_t> AddCluster(const domain::Cluster& c);

  ModelId FindModel(std::string_view name) const;
  int32_t FindCluster(std::string_view name) const;

  // Datasets are appended, never removed (tasks name them by index): one no longer declared
  // keeps its entry with what the clusters still say of it.
  int32_t FindDataset(std::string_view name) const;
  int32_t AddDataset(const std::string& name);  // the index of the one so named, added if new
  void SetDatasetSize(int32_t dataset, double size_gib) {
    datasets[static_cast<size_t>(dataset)].size_gib = size_gib;
  }
  void SetCached(int32_t dataset, int32_t cluster, bool cached);
  // Gbit/s from one site to another as either end declares it (the larger when both do); 0 when
  // neither does.
  double LinkGbps(int32_t from, int32_t to) const {
    return link_gbps_[static_cast<size_t>(from) * clusters.size() + static_cast<size_t>(to)];
  }
  const domain::GpuModel& model(ModelId id) const { return models_[id]; }
  int model_count() const { return static_cast<int>(models_.size()); }

  std::vector<ClusterState> clusters;
  std::vector<NodeState> nodes;
  std::vector<GpuState> gpus;
  std::vector<std::string> racks;
  std::vector<DatasetState> datasets;

  // The dearest GPU-hour of any model in any cluster (0: nothing priced); prices are fixed at
  // Build, so this is computed once there rather than by every cost score.
  double max_price_per_gpu_hour = 0;

  int64_t TotalGpuMilli() const;
  int64_t AllocatedGpuMilli() const;
  // One account of a GPU's capacity, for every view of it (nodes, top, metrics, dashboard):
  // what is allocated (a MIG instance by its share of memory slices, a fraction by its milli),
  // and what is free to schedule (none on an unhealthy GPU or an unschedulable node, which is
  // lost or cordoned).
  int32_t GpuAllocatedMilli(int32_t gpu) const;
  int32_t GpuFreeMilli(int32_t node, int32_t gpu) const;

 private:
  using ModelOf = std::function<base::Result<ModelId>(const std::string&)>;
  base::Status Append(const domain::Node& n, const std::string& where, const ModelOf& model_of,
                      int32_t rack);
  // The clusters' dataset lists and bandwidths, taken in again after one changed.
  void IndexSites();

  std::vector<domain::GpuModel> models_;
  std::vector<double> link_gbps_;  // clusters x clusters
};

}  // namespace meridian::sched
