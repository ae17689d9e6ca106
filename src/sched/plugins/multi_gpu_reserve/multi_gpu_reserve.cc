#include "sched/plugins/multi_gpu_reserve/multi_gpu_reserve.h"

#include <algorithm>
#include <bit>

#include "sched/node_index.h"
#include "sched/node_math.h"

namespace meridian::sched::plugins {

MultiGpuReserve::MultiGpuReserve(const FragmentationModel& model) {
  for (const TypicalShape& s : model.multi_gpu_shapes()) {
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.gpus == s.gpu_count && g.models == s.models;
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{s.gpu_count, s.models, {}});
    it->cpu_and_share.emplace_back(s.cpu_milli, s.weight);
    it->most_cpu = std::max(it->most_cpu, s.cpu_milli);
  }
}

namespace {

// The pressures of the last estate state asked about, per thread: every candidate of one task
// sees the same index, so they are worked out once per task, not once per candidate.
struct Memo {
  const void* owner = nullptr;
  const NodeIndex* index = nullptr;
  uint64_t version = 0;
  std::vector<double> excess;  // per shape, in group order: pressure above balance
};
thread_local Memo memo;

}  // namespace

const std::vector<double>& MultiGpuReserve::Excess(const NodeIndex& index) const {
  if (memo.owner == this && memo.index == &index && memo.version == index.version()) {
    return memo.excess;
  }
  memo.owner = this;
  memo.index = &index;
  memo.version = index.version();
  memo.excess.clear();
  const std::span<const int64_t> free = index.FreeGpuMilliByModel();
  double estate = 0;  // free GPUs
  Mask present = 0;   // models with a free GPU
  for (size_t m = 0; m < free.size() && m < 64; ++m) {
    estate += static_cast<double>(free[m]) / 1000.0;
    if (free[m] >= 1000) present |= Bit(static_cast<ModelId>(m));
  }
  for (const Group& g : groups_) {
    for (const auto& [cpu, share] : g.cpu_and_share) {
      double pool = 0;  // GPUs of the nodes that can still hold the shape
      for (Mask rest = present & g.models; rest != 0; rest &= rest - 1) {
        const ModelId id = static_cast<ModelId>(std::countr_zero(rest));
        const NodeIndex::Largest largest = index.LargestNode(id);
        if (largest.gpus < g.gpus || largest.cpu_milli < cpu) continue;
        pool += static_cast<double>(index.NodesWithIdleGpus(id, g.gpus) * g.gpus);
      }
      const double pressure = share * estate / std::max(pool, static_cast<double>(g.gpus));
      memo.excess.push_back(std::max(0.0, pressure - share));
    }
  }
  return memo.excess;
}

double MultiGpuReserve::Score(const PluginContext& ctx, const Candidate& c) const {
  const NodeState& node = ctx.snapshot.nodes[c.node];
  if (groups_.empty() || !ctx.index || node.model == kNoModel) return 0;
  int32_t now[kMaxGpusPerNode];
  int32_t after[kMaxGpusPerNode];
  GpuFreeNow(ctx.snapshot, node, now);
  GpuFreeAfter(ctx.snapshot, node, c, after);
  int64_t idle_now = 0, idle_after = 0;
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    idle_now += now[i] >= 1000 ? 1 : 0;
    idle_after += after[i] >= 1000 ? 1 : 0;
  }
  const int64_t cpu_now = std::max<int64_t>(node.cpu_free, 0);
  const int64_t cpu_after = std::max<int64_t>(node.cpu_free - ctx.task.cpu_milli, 0);
  const std::vector<double>* excess = nullptr;
  double cost = 0;
  size_t shape = 0;  // index into the excess, in group order
  for (const Group& g : groups_) {
    const size_t first = shape;
    shape += g.cpu_and_share.size();
    if (!(g.models & Bit(node.model)) || g.gpus > node.gpu_count) continue;
    const int64_t gpu_places_now = idle_now / g.gpus, gpu_places_after = idle_after / g.gpus;
    // Nothing of the group is lost when its GPU places stay and the CPU left feeds them all.
    if (gpu_places_after == gpu_places_now && cpu_after >= gpu_places_now * g.most_cpu) continue;
    for (size_t i = 0; i < g.cpu_and_share.size(); ++i) {
      const int64_t cpu = g.cpu_and_share[i].first;
      auto places = [&](int64_t gpu_places, int64_t cpu_free) {
        // The division only where the CPU binds.
        return cpu <= 0 || cpu_free >= gpu_places * cpu ? gpu_places : cpu_free / cpu;
      };
      const int64_t gone = places(gpu_places_now, cpu_now) - places(gpu_places_after, cpu_after);
      if (gone <= 0) continue;
      if (!excess) excess = &Excess(*ctx.index);
      cost += static_cast<double>(gone * g.gpus) * (*excess)[first + i];
    }
  }
  return -cost;
}

}  // namespace meridian::sched::plugins
