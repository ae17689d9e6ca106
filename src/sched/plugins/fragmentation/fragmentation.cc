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
  // The paper's measure ignores host memory; Meridian's counts it (a GPU stranded behind a
  // node's exhausted memory is as lost as one behind its CPU).
  const bool paper = mode_ == Mode::kPaper;
  const int64_t mem_now = paper ? FragmentationModel::kIgnoreMemory : node.memory_free;
  const int64_t mem_after =
      paper ? FragmentationModel::kIgnoreMemory : node.memory_free - ctx.task.memory_mib;
  double before = model_->NodeFragmentation(node.model, node.cpu_free, mem_now, now_span);
  double later = model_->NodeFragmentation(node.model, node.cpu_free - ctx.task.cpu_milli,
                                           mem_after, after_span);
  double drop = before - later;  // milli-GPU
  if (mode_ == Mode::kPaper) return 100.0 / (1.0 + std::exp(-drop / 1000.0));
  return drop / 1000.0;
}

}  // namespace meridian::sched::plugins
