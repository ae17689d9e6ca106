#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Score (0..100): half for the NVLink domains a multi-GPU candidate spans (all of it for one
// domain, 1/k of it for k), half for keeping the tasks of one group (a gang, a job) on the racks
// the group already uses in this cycle. Tasks with one GPU or none, and the first task of a
// group, get the full half of the part that does not apply to them.
class Topology final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "topology"; }
  double Score(const PluginContext& ctx, const Candidate& c) const override;
};

}  // namespace meridian::sched::plugins
