#include "sched/fragmentation.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>

#include "sched/node_math.h"

namespace meridian::sched {

FragmentationModel::FragmentationModel(std::vector<TypicalShape> shapes)
    : shapes_(std::move(shapes)) {
  double demand = 0;
  for (const TypicalShape& s : shapes_) demand += s.weight * s.gpu_milli * s.gpu_count;
  for (const TypicalShape& s : shapes_) {
    if (s.gpu_count > 1 && demand > 0) {
      multi_gpu_shapes_.push_back(s);
      multi_gpu_shapes_.back().weight = s.weight * s.gpu_milli * s.gpu_count / demand;
    }
  }
  for (const TypicalShape& s : shapes_) {
    if (s.gpu_milli == 0) {
      cpu_only_weight_ += s.weight;
    } else {
      gpu_shapes_by_milli_.push_back(s);
    }
  }
  std::stable_sort(
      gpu_shapes_by_milli_.begin(), gpu_shapes_by_milli_.end(),
      [](const TypicalShape& a, const TypicalShape& b) { return a.gpu_milli < b.gpu_milli; });
}

FragmentationModel FragmentationModel::FromTasks(const std::vector<TaskSpec>& tasks,
                                                 double coverage) {
  using Key = std::tuple<int64_t, int32_t, int32_t, Mask>;
  std::map<Key, int64_t> counts;
  std::map<Key, std::map<int64_t, int64_t>> memory_counts;
  for (const TaskSpec& t : tasks) {
    int32_t milli =
        t.gpu_kind == GpuKind::kWhole || t.gpu_kind == GpuKind::kFraction ? t.gpu_milli : 0;
    int32_t count = milli > 0 ? t.gpu_count : 0;
    Key key{t.cpu_milli, milli, count, t.allowed_models};
    ++counts[key];
    ++memory_counts[key][t.memory_mib];
  }
  std::vector<std::pair<Key, int64_t>> sorted(counts.begin(), counts.end());
  // Most popular first; ties in a fixed order so the model does not depend on hashing.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const double total = static_cast<double>(tasks.size());
  std::vector<TypicalShape> shapes;
  double covered = 0;
  for (const auto& [key, n] : sorted) {
    if (total == 0 || covered >= coverage * total) break;
    const auto& [cpu, milli, count, models] = key;
    int64_t memory = 0;
    int64_t best = 0;
    for (const auto& [mib, c] : memory_counts[key]) {
      if (c > best) {
        best = c;
        memory = mib;
      }
    }
    shapes.push_back({cpu, memory, milli, count, models, static_cast<double>(n)});
    covered += static_cast<double>(n);
  }
  for (TypicalShape& s : shapes) s.weight /= covered;
  FragmentationModel model(std::move(shapes));
  // Every multi-GPU shape, by its share of all the GPU demand.
  double demand = 0;
  for (const TaskSpec& t : tasks) demand += static_cast<double>(t.GpuMilliTotal());
  model.multi_gpu_shapes_.clear();
  for (const auto& [key, n] : sorted) {
    const auto& [cpu, milli, count, models] = key;
    if (count < 2 || demand <= 0) continue;
    const double weight = static_cast<double>(n) * milli * count / demand;
    model.multi_gpu_shapes_.push_back({cpu, 0, milli, count, models, weight});
  }
  return model;
}

double FragmentationModel::Distance(const FragmentationModel& other) const {
  using Key = std::tuple<int64_t, int32_t, int32_t, Mask>;
  auto sum = [](const std::vector<TypicalShape>& a, const std::vector<TypicalShape>& b) {
    std::map<Key, double> diff;
    for (const TypicalShape& s : a)
      diff[{s.cpu_milli, s.gpu_milli, s.gpu_count, s.models}] += s.weight;
    for (const TypicalShape& s : b)
      diff[{s.cpu_milli, s.gpu_milli, s.gpu_count, s.models}] -= s.weight;
    double total = 0;
    for (const auto& [key, d] : diff) total += d < 0 ? -d : d;
    return total / 2;
  };
  return std::max(sum(shapes_, other.shapes_), sum(multi_gpu_shapes_, other.multi_gpu_shapes_));
}

double FragmentationModel::NodeFragmentation(ModelId model, int64_t cpu_free, int64_t memory_free,
                                             std::span<const int32_t> gpu_free) const {
  int64_t total = 0;
  for (int32_t f : gpu_free) total += f;
  if (total == 0) return 0;
  const double all = static_cast<double>(total);
  double frag = cpu_only_weight_ * all;
  int32_t counted_milli = -1;
  int fitting = 0;
  int64_t below = 0;
  for (const TypicalShape& s : gpu_shapes_by_milli_) {
    if (model == kNoModel || !(s.models & Bit(model))) {
      frag += s.weight * all;
      continue;
    }
    if (s.gpu_milli != counted_milli) {
      counted_milli = s.gpu_milli;
      fitting = 0;
      below = 0;
      for (int32_t f : gpu_free) {
        if (f >= s.gpu_milli) {
          ++fitting;
        } else {
          below += f;
        }
      }
    }
    bool fits = fitting >= s.gpu_count && cpu_free >= s.cpu_milli &&
                (memory_free == kIgnoreMemory || memory_free >= s.memory_mib);
    frag += s.weight * (fits ? static_cast<double>(below) : all);
  }
  return frag;
}

double FragmentationModel::NodeFragmentation(const Snapshot& s, const NodeState& n) const {
  int32_t free[kMaxGpusPerNode];
  GpuFreeNow(s, n, free);
  return NodeFragmentation(n.model, n.cpu_free, kIgnoreMemory,
                           std::span<const int32_t>(free, n.gpu_count));
}

}  // namespace meridian::sched
