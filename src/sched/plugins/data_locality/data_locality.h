#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score: 100 on a node whose cluster holds the task's dataset, 0 elsewhere; 0 everywhere when the
// task names no dataset (neutral).
class DataLocality final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "data-locality"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
