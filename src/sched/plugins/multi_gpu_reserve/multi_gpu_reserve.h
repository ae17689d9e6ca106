#pragma once

#include <vector>

#include "sched/fragmentation.h"
#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: keeps room for multi-GPU work where it is scarce. Each shape of the workload that asks
// for several GPUs (typical or not: such shapes are rare by count, not by GPU demand) needs that
// many idle GPUs on one node with its CPU; a node holds as many of it as its idle GPUs of a
// usable model and its free CPU allow. A candidate that lowers that number costs the GPUs of the
// places it removes times the shape's pressure above balance: its share of the GPU demand times
// the estate's free GPUs over the GPUs of the nodes that can still hold it, less its share (the
// pressure when every free GPU could). A shape that fits most nodes costs almost nothing; one that
// only a few large nodes can hold keeps them whole. The count of such nodes is the engine's
// (NodeIndex: nodes by idle GPUs, the largest node of each model); their CPU is judged by the
// largest node of the model, so it can overstate the room, never invent a cost.
class MultiGpuReserve final : public ScorePlugin {
 public:
  explicit MultiGpuReserve(const FragmentationModel& model);

  std::string_view Name() const override { return "multi-gpu-reserve"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;

 private:
  // The shapes by GPU count and models, each with its CPU requests: the nodes that can hold a
  // group are counted once per call.
  struct Group {
    int32_t gpus = 0;
    Mask models = kAll;
    std::vector<std::pair<int64_t, double>> cpu_and_share;
    int64_t most_cpu = 0;
  };
  std::vector<Group> groups_;

  // Each shape's pressure above balance on the estate as `index` has it now (memoised per
  // thread until the index changes).
  const std::vector<double>& Excess(const NodeIndex& index) const;
};

}  // namespace meridian::sched::plugins
