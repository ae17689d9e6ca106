#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score (0..100): what bringing the task's datasets to the node's cluster costs, in hours. 100
// where the cluster has them all (a location or its cache) and for a task that reads none; less
// by the hours that copying what the cluster lacks takes from the nearest site that has it
// (sched/data.h), plus the egress it pays counted in hours of the task's GPUs at the node's price
// (at least 1 per hour: on an unpriced GPU or a CPU-only task, egress counts in units of the
// price); 0 from kDataHorizon on, and for a dataset of unknown size that the cluster lacks.
inline constexpr double kDataHorizon = 3600;

class DataLocality final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "data-locality"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
