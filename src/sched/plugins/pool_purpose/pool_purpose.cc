#include "sched/plugins/pool_purpose/pool_purpose.h"

#include "domain/workload.h"

namespace meridian::sched::plugins {

bool PoolPurposeMatch::Filter(const PluginContext& ctx, const NodeState& node) const {
  return domain::PoolServes(node.purpose, ctx.task.kind);
}

std::string PoolPurposeMatch::Reason(const PluginContext& ctx, const NodeState& node) const {
  return std::string("in pools for ") + domain::PoolPurposeName(node.purpose) + ", not " +
         domain::JobKindName(ctx.task.kind);
}

}  // namespace meridian::sched::plugins
