#include "sched/plugins/fragmentation/fragmentation.h"

#include <cmath>

#include "sched/node_math.h"

namespace meridian::sched::plugins {

double Fragmentation::Score(const PluginContext& ctx, const Candidate& c) const {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  int32_t now[kMaxGpusPerNode];
  int32_t after[kMaxGpusPerNode];
  GpuFreeNow(ctx.snapshot, node, now);
  GpuFreeAfter(ctx.snapshot, node, c, after);
  const std::span<const int32_t> now_span(now, node.gpu_count);
  const std::span<const int32_t> after_span(after, node.gpu_count);
  double before = model_->NodeFragmentation(node.model, node.cpu_free, now_span);
  double later = model_->NodeFragmentation(node.model, node.cpu_free - ctx.task.cpu_milli, after_span);
  double drop = before - later;  // milli-GPU
  if (mode_ == Mode::kPaper) return 100.0 / (1.0 + std::exp(-drop / 1000.0));
  return drop / 1000.0;
}

}  // namespace meridian::sched::plugins
