#pragma once

#include "sched/plugin.h"

namespace meridian::sched::plugins {

// Filter: the node's pool is for the task's type of work (domain::PoolServes): a pool of purpose
// any runs everything, a training pool training and batch jobs, an inference or interactive pool
// only jobs of its own type. Rejected nodes are explained by their pool's purpose ("in pools for
// training, not inference").
class PoolPurposeMatch final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "pool-purpose"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override;
  std::string Reason(const PluginContext& ctx, const NodeState& node) const override;
};

}  // namespace meridian::sched::plugins
