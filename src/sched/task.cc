#include "sched/task.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>

namespace meridian::sched {

int64_t TaskSpec::GpuMilliTotal() const {
  if (gpu_kind == GpuKind::kWhole || gpu_kind == GpuKind::kFraction) {
    return static_cast<int64_t>(gpu_count) * gpu_milli;
  }
  return 0;
}

uint32_t TaskSpec::AffinityTag() const {
  switch (gpu_kind) {
    case GpuKind::kNone:
      return 0;
    case GpuKind::kFraction:
      return 1;  // every fraction is one kind, whatever its share
    case GpuKind::kMig:
      return 2;
    case GpuKind::kWhole:
      return 100 + static_cast<uint32_t>(gpu_count);
  }
  return 0;
}

std::string TaskSpec::FeasibilityKey() const {
  std::string key;
  key.reserve(96);
  auto put = [&key](const auto& v) {
    char buf[sizeof(v)];
    std::memcpy(buf, &v, sizeof(v));
    key.append(buf, sizeof(v));
  };
  put(cpu_milli);
  put(memory_mib);
  put(static_cast<int32_t>(gpu_kind));
  put(gpu_count);
  put(gpu_milli);
  put(gpu_memory_mib);
  put(allowed_models);
  put(allowed_clusters);
  put(static_cast<int32_t>(kind));
  key += mig_profile;
  for (const auto& [k, v] : node_selector) key += '\x01' + k + '=' + v;
  for (const auto& t : tolerations) key += '\x02' + t.key + '=' + t.value;
  return key;
}

uint64_t TaskSpec::FeasibilityHash() const {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
  };
  mix(static_cast<uint64_t>(cpu_milli));
  mix(static_cast<uint64_t>(memory_mib));
  mix(static_cast<uint64_t>(gpu_kind));
  mix(static_cast<uint64_t>(gpu_count));
  mix(static_cast<uint64_t>(gpu_milli));
  mix(static_cast<uint64_t>(gpu_memory_mib));
  mix(allowed_models);
  mix(allowed_clusters);
  mix(static_cast<uint64_t>(kind));
  const std::hash<std::string_view> hs;
  mix(hs(mig_profile));
  for (const auto& [k, v] : node_selector) {
    mix(hs(k));
    mix(hs(v));
  }
  for (const auto& t : tolerations) {
    mix(hs(t.key));
    mix(hs(t.value));
  }
  return h;
}

namespace {

Mask ModelMask(const std::vector<std::string>& names, const Snapshot& s) {
  if (names.empty()) return kAll;
  Mask m = 0;
  for (const std::string& n : names) {
    ModelId id = s.FindModel(n);
    if (id != kNoModel) m |= Bit(id);
  }
  return m;
}

Mask ClusterMask(const domain::Constraints& c, const Snapshot& s) {
  Mask m = 0;
  for (size_t i = 0; i < s.clusters.size(); ++i) {
    const ClusterState& cs = s.clusters[i];
    bool ok = true;
    if (!c.clusters.empty()) {
      ok = std::find(c.clusters.begin(), c.clusters.end(), cs.name) != c.clusters.end();
    }
    if (ok && !c.regions.empty()) {
      ok = std::find(c.regions.begin(), c.regions.end(), cs.region) != c.regions.end();
    }
    if (ok && c.on_prem_only) ok = cs.kind == domain::SiteKind::kOnPrem;
    if (ok && c.checkpoint) ok = cs.keeps_checkpoints;
    if (ok && c.image) ok = cs.runs_images;
    if (ok) m |= Bit(static_cast<int>(i));
  }
  return m;
}

}  // namespace

std::vector<TaskSpec> TasksForJob(const domain::Job& job, const Snapshot& snapshot, int32_t group) {
  std::vector<TaskSpec> out;
  Mask models = ModelMask(job.constraints.gpu_models, snapshot);
  Mask clusters = ClusterMask(job.constraints, snapshot);
  std::vector<int32_t> datasets;
  for (const std::string& d : job.datasets) {
    const int32_t i = snapshot.FindDataset(d);
    if (i < 0) continue;
    datasets.push_back(i);
    // Only where it is, or where a cache can take a copy of it.
    Mask reach = snapshot.datasets[static_cast<size_t>(i)].located;
    for (size_t c = 0; c < snapshot.clusters.size(); ++c) {
      if (snapshot.clusters[c].caches_data) reach |= Bit(static_cast<int>(c));
    }
    clusters &= reach;
  }
  for (const domain::TaskGroup& g : job.task_groups) {
    TaskSpec t;
    t.cpu_milli = g.request.cpu_milli;
    t.memory_mib = g.request.memory_mib;
    t.gpu_kind = g.request.gpu.kind;
    switch (t.gpu_kind) {
      case GpuKind::kNone:
        break;
      case GpuKind::kWhole:
        t.gpu_count = g.request.gpu.count;
        t.gpu_milli = domain::kMilliPerGpu;
        break;
      case GpuKind::kFraction:
        t.gpu_count = 1;
        t.gpu_milli = g.request.gpu.milli;
        t.gpu_memory_mib = g.request.gpu.memory_mib;
        break;
      case GpuKind::kMig:
        t.gpu_count = 1;
        t.mig_profile = g.request.gpu.mig_profile;
        break;
    }
    t.kind = job.kind;
    t.allowed_models = models;
    t.allowed_clusters = clusters;
    t.node_selector.assign(job.constraints.node_labels.begin(), job.constraints.node_labels.end());
    t.tolerations = job.constraints.tolerations;
    t.datasets = datasets;
    t.checkpoint = job.constraints.checkpoint;
    t.image = job.constraints.image;
    t.group = group;
    for (int32_t r = 0; r < g.replicas; ++r) out.push_back(t);
  }
  return out;
}

}  // namespace meridian::sched
