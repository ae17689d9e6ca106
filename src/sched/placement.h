#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meridian::sched {

// What happens to a GPU's MIG layout when a grant is carried out; anything but kNone is a
// reconfiguration that the node's agent performs before the task starts.
enum class MigChange : int8_t {
  kNone,            // not a MIG grant, or an existing free instance is used
  kCreateInstance,  // a new instance in free slices of a GPU already in MIG mode
  kRepartition,     // the GPU's unused instances are destroyed and the new one is created
  kEnableMig,       // an idle GPU is switched to MIG mode and the instance created
  // A whole-GPU grant of a GPU in MIG mode none of whose instances is in use: its instances are
  // destroyed and MIG mode left, so that a partition made for short MIG work does not keep
  // whole-GPU work off the GPU for ever.
  kDisableMig,
};

// One device given to a task: a whole GPU, a share of one, or a MIG instance.
struct DeviceGrant {
  int32_t gpu = -1;        // index into Snapshot::gpus
  int32_t milli = 0;       // compute share taken (1000 for a whole GPU)
  int64_t memory_mib = 0;  // GPU memory taken by a fraction
  int16_t mig_profile = -1;
  int8_t mig_start = -1;
  MigChange mig_change = MigChange::kNone;
};

// Whether carrying out `c` changes the GPU's MIG mode or destroys instances: such changes are
// rate-limited per GPU (SchedulerOptions::mig_reconfigure_interval). Making an instance in free
// slices is not one of them.
inline bool ReshapesGpu(MigChange c) {
  return c == MigChange::kEnableMig || c == MigChange::kDisableMig || c == MigChange::kRepartition;
}

struct Placement {
  int32_t node = -1;
  std::vector<DeviceGrant> devices;
  double score = 0;
};

// Why a task was left unplaced: how many nodes each filter, or the GPU fit, turned away, and,
// for filters that can say it, what those nodes lack ("2 nodes without label gpu-tier=premium").
struct Unschedulable {
  struct Detail {
    std::string filter;  // as in rejected_by
    std::string reason;  // words that follow the count: "in pools for training, not inference"
    int64_t nodes = 0;
  };
  int64_t nodes_considered = 0;
  std::vector<std::pair<std::string, int64_t>> rejected_by;  // filter name (or gpu-fit), nodes
  std::vector<Detail> details;
  bool cached = false;  // the answer came from the same-shape feasibility cache

  void Reject(const std::string& reason, int64_t n = 1);
  void Explain(const std::string& filter, const std::string& reason, int64_t n = 1);
  // "4 nodes considered: 3 nodes in pools for training, not inference; 1 rejected by gpu-fit":
  // a filter's details when it gave some, else its count under its name.
  std::string Summary() const;
};

struct PlaceOutcome {
  bool placed = false;
  Placement placement;
  Unschedulable why;
};

}  // namespace meridian::sched
