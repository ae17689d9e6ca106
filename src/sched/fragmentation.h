#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sched {

// A task shape that is common in the workload, with its share of the tasks.
struct TypicalShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;  // the most common memory request of the shape's tasks
  int32_t gpu_milli = 0;   // per GPU; 0 for CPU-only tasks
  int32_t gpu_count = 0;
  Mask models = kAll;
  double weight = 0;  // popularity; the weights of a model sum to 1
};

// Expected GPU fragmentation of a node against a mix of task shapes, as FGD (Weng et al., ATC'23)
// defines it: for each typical shape, weighted by its popularity, the node's idle GPU capacity
// counts as fragment when that shape cannot use it: all of it when the shape does not fit the
// node (too little CPU, no suitable GPUs, a model it may not use, or no GPU request at all); when
// it fits, the GPUs whose free share is smaller than the shape's milli-GPU. The paper judges the
// fit on CPU and GPUs only; Meridian also counts host memory (pass kIgnoreMemory for the paper's).
// Immutable after construction; safe to share between threads.
class FragmentationModel {
 public:
  FragmentationModel() = default;
  explicit FragmentationModel(std::vector<TypicalShape> shapes);

  // The smallest set of most popular shapes of `tasks` whose tasks cover `coverage` of them
  // (CPU-only tasks included), with weights renormalised to sum to 1.
  static FragmentationModel FromTasks(const std::vector<TaskSpec>& tasks, double coverage);

  // How far apart two mixes are: half the sum, over every typical and multi-GPU shape of either,
  // of the difference of its weights (0: the same mix; 1: nothing in common).
  double Distance(const FragmentationModel& other) const;

  static constexpr int64_t kIgnoreMemory = INT64_MAX;

  // Fragmented milli-GPU of a node of `model` with `cpu_free`, `memory_free` and these free
  // shares per GPU (0..1000 each; MIG and unhealthy GPUs count as 0).
  double NodeFragmentation(ModelId model, int64_t cpu_free, int64_t memory_free,
                           std::span<const int32_t> gpu_free) const;
  // The paper's measure (memory ignored) of a node as it stands.
  double NodeFragmentation(const Snapshot& s, const NodeState& n) const;

  const std::vector<TypicalShape>& shapes() const { return shapes_; }
  // The shapes that ask for several GPUs, typical or not, each weighted by its share of the
  // workload's GPU demand. They need idle GPUs of one node together; being rare, they are often
  // left out of the typical shapes, though their demand is not small.
  const std::vector<TypicalShape>& multi_gpu_shapes() const { return multi_gpu_shapes_; }

 private:
  std::vector<TypicalShape> shapes_;
  std::vector<TypicalShape> multi_gpu_shapes_;
  // The GPU shapes sorted by milli-GPU, so that a node's GPUs are counted once per distinct
  // milli value rather than once per shape (this is the hot path of the fragmentation scores).
  std::vector<TypicalShape> gpu_shapes_by_milli_;
  double cpu_only_weight_ = 0;  // CPU-only shapes can use no GPU: all free GPU is fragment
};

}  // namespace meridian::sched
