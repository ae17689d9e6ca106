#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sched {

// Nodes by GPU model and free capacity, so that the engine looks only at nodes that can hold a
// task's GPUs, tightest fit first, instead of scanning every node for every task.
//
// Per model, every schedulable node sits in exactly one "whole" bucket (its number of idle GPUs),
// in at most one "partial" bucket (the largest free share among its partly used GPUs, in steps of
// 100 milli), and in the MIG list when one of its MIG GPUs has room. Moving a node between
// buckets is O(1). Not thread-safe.
class NodeIndex {
 public:
  NodeIndex() = default;
  explicit NodeIndex(const Snapshot& s);

  // Re-files a node after its free capacity or its schedulability changed.
  void Update(const Snapshot& s, int32_t node);
  // Files a node appended to the snapshot (its index is the last).
  void Add(const Snapshot& s, int32_t node);

  // The node lists that may hold `t`, tightest fit first. A node may appear in two lists.
  void CandidateLists(const Snapshot& s, const TaskSpec& t,
                      std::vector<const std::vector<int32_t>*>* out) const;

  // Free milli-GPU of each model (by ModelId) on schedulable nodes: healthy GPUs outside MIG mode,
  // as GpuMilliLeft counts them. Kept as nodes are updated.
  std::span<const int64_t> FreeGpuMilliByModel() const {
    if (free_by_model_.empty()) return {};
    return std::span<const int64_t>(free_by_model_.data(), free_by_model_.size() - 1);
  }
  // Bumped by every change of what the index holds, so that a reader may keep what it worked
  // out from it until the next; no two indexes of one process share a version.
  uint64_t version() const { return version_; }
  // Schedulable nodes of `model` with at least `gpus` idle GPUs.
  int64_t NodesWithIdleGpus(ModelId model, int gpus) const {
    if (model < 0 || static_cast<size_t>(model) + 1 >= by_model_.size() || gpus < 0) return 0;
    const std::vector<int64_t>& at_least = by_model_[model].at_least;
    return static_cast<size_t>(gpus) < at_least.size() ? at_least[gpus] : 0;
  }
  // The largest node of a model the estate has held: what a task of that model could ever get.
  struct Largest {
    int32_t gpus = 0;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
  };
  Largest LargestNode(ModelId model) const {
    return static_cast<size_t>(model) < largest_.size() ? largest_[model] : Largest{};
  }

 private:
  static constexpr int kPartialBuckets = 10;
  struct ModelBuckets {
    std::vector<std::vector<int32_t>> whole;  // [idle GPUs]
    std::vector<int64_t> at_least;            // [idle GPUs]: nodes with at least that many
    std::array<std::vector<int32_t>, kPartialBuckets> partial;
    std::vector<int32_t> mig;
  };
  struct Where {
    int16_t model = -1;  // entry of by_model_
    int16_t whole = -1;
    int8_t partial = -1;
    bool mig = false;
    int32_t whole_pos = -1;
    int32_t partial_pos = -1;
    int32_t mig_pos = -1;
  };
  struct Class {
    int16_t whole = -1;
    int8_t partial = -1;
    bool mig = false;
  };
  Class Classify(const Snapshot& s, const NodeState& n) const;
  size_t BucketsIndex(const NodeState& n) const;
  void Insert(const Snapshot& s, int32_t node);
  void Remove(int32_t node);
  // Brings the node's share of free_by_model_ up to date.
  void Recount(const Snapshot& s, int32_t node);

  std::vector<ModelBuckets> by_model_;  // the last entry holds CPU-only nodes
  std::vector<Where> where_;
  std::vector<int64_t> free_by_model_;  // like by_model_, the last entry for CPU-only nodes
  std::vector<int64_t> counted_free_;   // per node, what it adds to free_by_model_
  std::vector<Largest> largest_;        // by model
  uint64_t version_ = 0;
};

}  // namespace meridian::sched
