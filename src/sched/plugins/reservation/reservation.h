#pragma once

#include "sched/plugin.h"
#include "sched/profile.h"

namespace meridian::sched::plugins {

// Filter: keeps a task off the nodes reserved for the blocked head of the queue when the task
// would still be running at the reservation's start (backfill that never delays the head).
class Reservation final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "reservation"; }
  bool Filter(const PluginContext& ctx, const NodeState& node) const override {
    if (!ctx.cycle.avoid_reserved) return true;
    const size_t i = static_cast<size_t>(&node - ctx.snapshot.nodes.data());
    return i >= ctx.cycle.reserved_nodes.size() || !ctx.cycle.reserved_nodes[i];
  }
};

}  // namespace meridian::sched::plugins
