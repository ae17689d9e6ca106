#pragma once

#include <array>
#include <cstdint>
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

 private:
  static constexpr int kPartialBuckets = 10;
  struct ModelBuckets {
    std::vector<std::vector<int32_t>> whole;  // [idle GPUs]
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

  std::vector<ModelBuckets> by_model_;  // the last entry holds CPU-only nodes
  std::vector<Where> where_;
};

}  // namespace meridian::sched
