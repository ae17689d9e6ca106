#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "domain/job.h"
#include "sched/snapshot.h"

namespace meridian::sched {

using GpuKind = domain::GpuRequest::Kind;

// One task as the placement engine sees it: its request, resolved against a snapshot (model and
// cluster names became masks), and what its neighbours in the same job share.
struct TaskSpec {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  GpuKind gpu_kind = GpuKind::kNone;
  int32_t gpu_count = 0;       // whole GPUs; 1 for a fraction or a MIG instance
  int32_t gpu_milli = 0;       // per GPU: 1000 for whole GPUs
  int64_t gpu_memory_mib = 0;  // fractions: GPU memory wanted (0: not constrained)
  std::string mig_profile;
  // The job's type: which pools may run it (domain::PoolServes). Batch, the type of a job that
  // names none, runs in pools of purpose any and training.
  domain::JobKind kind = domain::JobKind::kBatch;

  Mask allowed_models = kAll;
  Mask allowed_clusters = kAll;
  std::vector<std::pair<std::string, std::string>> node_selector;
  std::vector<domain::Toleration> tolerations;
  std::vector<int32_t> datasets;  // what it reads: indexes into Snapshot::datasets
  bool checkpoint = false;        // wants a checkpoint folder (allowed_clusters keep them)
  bool image = false;             // runs in a container (allowed_clusters run images)
  int32_t group = -1;  // tasks of one gang or job: their placement prefers the same racks

  bool WantsGpu() const { return gpu_kind != GpuKind::kNone; }
  int64_t GpuMilliTotal() const;
  // The kind of GPU use that gpu-clustering groups by: fractions (any share), MIG, or a number of
  // whole GPUs, as the FGD artifact tags them; 0 for CPU-only tasks.
  uint32_t AffinityTag() const;
  // A key equal for two tasks exactly when the engine would find the same nodes feasible.
  std::string FeasibilityKey() const;
  // A hash of FeasibilityKey() computed without building it (the placer's hot path).
  uint64_t FeasibilityHash() const;
};

// The tasks of a job, one TaskSpec per replica, resolved against `snapshot`. Names of models and
// clusters that the snapshot does not hold simply match nothing.
std::vector<TaskSpec> TasksForJob(const domain::Job& job, const Snapshot& snapshot, int32_t group);

}  // namespace meridian::sched
