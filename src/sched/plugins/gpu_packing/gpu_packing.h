#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: the FGD artifact's GPU packing baseline. From best to worst: a candidate that uses only
// partly used GPUs (the less free share on them, the better; 50..100), one on a used node that
// must take idle GPUs (33..50, fewer idle GPUs taken is better), one on an idle node (0..33,
// smaller nodes first). CPU-only tasks score 0.
class GpuPacking final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "gpu-packing"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
