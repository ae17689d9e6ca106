#pragma once

#include <memory>

#include "sched/fragmentation.h"
#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: how much a candidate adds to the GPU share that the node's remaining CPU can no longer
// feed. The workload's typical shapes ask, on average, `ratio` milli-CPU per milli-GPU (the CPU
// of CPU-only shapes included: the same node CPU serves them); a node
// with G milli-GPU and C milli-CPU free can use at most C / ratio of its GPU, and the rest is
// stranded behind its CPU. FGD sees this only when a shape's CPU stops fitting (a cliff); this
// score sees it coming. Returns minus the growth of the stranded share, in GPUs (0 is best).
class CpuStranding final : public ScorePlugin {
 public:
  explicit CpuStranding(const FragmentationModel& model);

  std::string_view Name() const override { return "cpu-stranding"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
  double ratio() const { return ratio_; }

 private:
  double ratio_ = 0;  // milli-CPU per milli-GPU of the typical GPU task; 0: no GPU shapes
};

}  // namespace meridian::sched::plugins
