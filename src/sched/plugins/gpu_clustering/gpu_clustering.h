#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: the FGD artifact's GPU clustering baseline: put GPU tasks of one shape together. Nodes
// running only that shape score 75..100, nodes running it among others 50..75, idle nodes 25..50,
// nodes running other shapes 0..25; within a band, the less GPU left, the higher. CPU-only tasks
// score 0.
class GpuClustering final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "gpu-clustering"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
