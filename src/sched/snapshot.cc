#include "sched/snapshot.h"

#include <algorithm>
#include <map>

namespace meridian::sched {

using base::Status;

ModelId Snapshot::FindModel(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].name == name) return static_cast<ModelId>(i);
  }
  return kNoModel;
}

int32_t Snapshot::FindCluster(std::string_view name) const {
  for (size_t i = 0; i < clusters.size(); ++i) {
    if (clusters[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

int64_t Snapshot::TotalGpuMilli() const {
  int64_t total = 0;
  for (const GpuState& g : gpus) total += g.healthy ? 1000 : 0;
  return total;
}

int64_t Snapshot::AllocatedGpuMilli() const {
  int64_t used = 0;
  for (size_t g = 0; g < gpus.size(); ++g) used += GpuAllocatedMilli(static_cast<int32_t>(g));
  return used;
}

int32_t Snapshot::GpuAllocatedMilli(int32_t gpu) const {
  const GpuState& g = gpus[static_cast<size_t>(gpu)];
  if (!g.healthy) return 0;
  if (g.mig_enabled) {
    int allocated_slices = 0;
    for (const MigSlot& s : g.mig) allocated_slices += s.allocated ? s.width : 0;
    return allocated_slices * 1000 / domain::kMigMemorySlices;
  }
  return 1000 - g.free_milli;
}

int32_t Snapshot::GpuFreeMilli(int32_t node, int32_t gpu) const {
  const GpuState& g = gpus[static_cast<size_t>(gpu)];
  if (!nodes[static_cast<size_t>(node)].Usable() || !g.healthy) return 0;
  return 1000 - GpuAllocatedMilli(gpu);
}

Status Snapshot::Append(const domain::Node& n, const std::string& where, const ModelOf& model_of,
                        int32_t rack) {
  NodeState ns;
  ns.name = n.name;
  ns.cluster = FindCluster(n.cluster);
  if (ns.cluster < 0) {
    return base::Status::Invalid(where + ".cluster: unknown cluster \"" + n.cluster + "\"");
  }
  if (n.cpu_milli < 0 || n.memory_mib < 0) {
    return base::Status::Invalid(where + ": CPU and memory must not be negative");
  }
  ns.rack = rack;
  ns.cpu_capacity = ns.cpu_free = n.cpu_milli;
  ns.memory_capacity = ns.memory_free = n.memory_mib;
  ns.schedulable = n.schedulable;
  ns.purpose = n.purpose;
  ns.gpu_sharing = n.gpu_sharing;
  ns.labels.assign(n.labels.begin(), n.labels.end());
  ns.taints = n.taints;
  ns.gpu_begin = static_cast<int32_t>(gpus.size());
  ns.gpu_count = static_cast<int32_t>(n.gpus.size());
  for (size_t gi = 0; gi < n.gpus.size(); ++gi) {
    const domain::GpuDevice& d = n.gpus[gi];
    auto model = model_of(d.model);
    if (!model.ok()) return model.status();
    if (n.gpus.size() > 64) {
      return base::Status::Invalid(where + ".gpus: at most 64 GPUs per node");
    }
    if (gi == 0) {
      ns.model = *model;
    } else if (*model != ns.model) {
      return base::Status::Invalid(where + ".gpus[" + std::to_string(gi) +
                                   "].model: a node holds GPUs of one model");
    }
    GpuState g;
    g.model = *model;
    g.nvlink_domain = static_cast<int16_t>(d.nvlink_domain);
    g.memory_mib = g.free_memory_mib = models_[*model].memory_mib;
    g.healthy = d.healthy;
    g.mig_enabled = d.mig_enabled;
    if (d.mig_enabled) {
      const domain::GpuModel& spec = models_[*model];
      if (!spec.mig_capable()) {
        return base::Status::Invalid(where + ".gpus[" + std::to_string(gi) + "]: model " +
                                     spec.name + " does not support MIG");
      }
      g.free_milli = 0;
      for (const domain::MigInstance& inst : d.mig_instances) {
        const domain::MigProfile* p = spec.FindMigProfile(inst.profile);
        if (!p || std::find(p->starts.begin(), p->starts.end(), inst.start) == p->starts.end()) {
          return base::Status::Invalid(where + ".gpus[" + std::to_string(gi) +
                                       "].mig_instances: invalid instance " + inst.profile +
                                       " at slice " + std::to_string(inst.start));
        }
        const uint8_t bits = p->SliceBits(inst.start);
        if (g.mig_used & bits) {
          return base::Status::Invalid(where + ".gpus[" + std::to_string(gi) +
                                       "].mig_instances: overlapping instances");
        }
        g.mig_used |= bits;
        g.mig.push_back({static_cast<int16_t>(p - spec.mig_profiles.data()),
                         static_cast<int8_t>(inst.start), static_cast<int8_t>(p->memory_slices),
                         false});
      }
    }
    if (!g.healthy) g.free_milli = 0;
    gpus.push_back(std::move(g));
  }
  nodes.push_back(std::move(ns));
  return Status::Ok();
}

base::Result<int32_t> Snapshot::AddNode(const domain::Node& node) {
  const std::string where = "node " + node.name;
  if (FindCluster(node.cluster) < 0) {
    return Status(base::StatusCode::kFailedPrecondition,
                  where + ": cluster \"" + node.cluster + "\" is new to the snapshot");
  }
  auto known_model = [&](const std::string& name) -> base::Result<ModelId> {
    const ModelId id = FindModel(name);
    if (id == kNoModel) {
      return Status(base::StatusCode::kFailedPrecondition,
                    where + ": GPU model " + name + " is new to the snapshot");
    }
    return id;
  };
  int32_t rack = -1;
  for (size_t r = 0; r < racks.size() && rack < 0; ++r) {
    if (racks[r] == node.rack) rack = static_cast<int32_t>(r);
  }
  if (rack < 0) {
    racks.push_back(node.rack);
    rack = static_cast<int32_t>(racks.size() - 1);
  }
  const size_t gpus_before = gpus.size();
  if (Status st = Append(node, where, known_model, rack); !st.ok()) {
    gpus.resize(gpus_before);  // what Append had added before it failed
    return st;
  }
  return static_cast<int32_t>(nodes.size() - 1);
}

Status Snapshot::UpdateNode(int32_t node, const domain::Node& n) {
  if (node < 0 || node >= static_cast<int32_t>(nodes.size())) {
    return Status::NotFound("node " + std::to_string(node) + " is not in the snapshot");
  }
  NodeState& ns = nodes[static_cast<size_t>(node)];
  const std::string where = "node " + n.name;
  if (FindCluster(n.cluster) != ns.cluster || static_cast<int32_t>(n.gpus.size()) != ns.gpu_count) {
    return Status(base::StatusCode::kFailedPrecondition,
                  where + ": its cluster or its number of GPUs changed");
  }
  for (size_t gi = 0; gi < n.gpus.size(); ++gi) {
    if (FindModel(n.gpus[gi].model) != gpus[static_cast<size_t>(ns.gpu_begin) + gi].model) {
      return Status(base::StatusCode::kFailedPrecondition, where + ": a GPU's model changed");
    }
  }
  if (n.cpu_milli < 0 || n.memory_mib < 0) {
    return Status::Invalid(where + ": CPU and memory must not be negative");
  }
  int32_t rack = -1;
  for (size_t r = 0; r < racks.size() && rack < 0; ++r) {
    if (racks[r] == n.rack) rack = static_cast<int32_t>(r);
  }
  if (rack < 0) {
    racks.push_back(n.rack);
    rack = static_cast<int32_t>(racks.size() - 1);
  }
  ns.rack = rack;
  ns.cpu_free += n.cpu_milli - ns.cpu_capacity;
  ns.cpu_capacity = n.cpu_milli;
  ns.memory_free += n.memory_mib - ns.memory_capacity;
  ns.memory_capacity = n.memory_mib;
  ns.purpose = n.purpose;
  ns.gpu_sharing = n.gpu_sharing;
  ns.labels.assign(n.labels.begin(), n.labels.end());
  ns.taints = n.taints;
  for (size_t gi = 0; gi < n.gpus.size(); ++gi) {
    GpuState& g = gpus[static_cast<size_t>(ns.gpu_begin) + gi];
    g.nvlink_domain = static_cast<int16_t>(n.gpus[gi].nvlink_domain);
    if (n.gpus[gi].healthy && !g.healthy && g.sharers == 0 && !g.mig_enabled) {
      // Unhealthy since it was built (free_milli 0 then) or idle since: whole again.
      g.free_milli = 1000;
      g.free_memory_mib = g.memory_mib;
    }
    g.healthy = n.gpus[gi].healthy;
  }
  return Status::Ok();
}

namespace {

// What a cluster's document says of it as a site, its prices aside (they need the models).
void DescribeSite(const domain::Cluster& c, ClusterState* cs) {
  cs->kind = c.kind;
  cs->region = c.region;
  cs->datasets = c.datasets;
  cs->egress_per_gib = c.egress_per_gib;
  cs->bandwidth_gbps = c.bandwidth_gbps;
  cs->keeps_checkpoints = !c.storage.checkpoints.empty();
  cs->caches_data = !c.storage.cache.empty();
  cs->even_task_layout = c.backend == domain::Backend::kSlurm;
  cs->runs_images = c.backend != domain::Backend::kSlurm;
}

}  // namespace

void Snapshot::UpdateCluster(int32_t cluster, const domain::Cluster& c) {
  ClusterState& cs = clusters[static_cast<size_t>(cluster)];
  DescribeSite(c, &cs);
  IndexSites();
  cs.price_by_model.assign(models_.size(), 0.0);
  for (const auto& [model, price] : c.price_per_gpu_hour) {
    if (ModelId id = FindModel(model); id != kNoModel) cs.price_by_model[id] = price;
  }
  max_price_per_gpu_hour = 0;
  for (const ClusterState& other : clusters) {
    for (double price : other.price_by_model) {
      max_price_per_gpu_hour = std::max(max_price_per_gpu_hour, price);
    }
  }
}

base::Result<int32_t> Snapshot::AddCluster(const domain::Cluster& c) {
  if (clusters.size() >= kMaxMaskBits) {
    return Status(base::StatusCode::kFailedPrecondition,
                  "cluster " + c.name + ": at most 64 clusters per snapshot");
  }
  ClusterState cs;
  cs.name = c.name;
  clusters.push_back(std::move(cs));
  const int32_t index = static_cast<int32_t>(clusters.size() - 1);
  UpdateCluster(index, c);
  return index;
}

int32_t Snapshot::FindDataset(std::string_view name) const {
  for (size_t i = 0; i < datasets.size(); ++i) {
    if (datasets[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

int32_t Snapshot::AddDataset(const std::string& name) {
  if (int32_t i = FindDataset(name); i >= 0) return i;
  datasets.push_back(DatasetState{name});
  return static_cast<int32_t>(datasets.size() - 1);
}

void Snapshot::SetCached(int32_t dataset, int32_t cluster, bool cached) {
  DatasetState& d = datasets[static_cast<size_t>(dataset)];
  d.cached = cached ? d.cached | Bit(cluster) : d.cached & ~Bit(cluster);
}

void Snapshot::IndexSites() {
  for (DatasetState& d : datasets) d.located = 0;
  const size_t n = clusters.size();
  link_gbps_.assign(n * n, 0.0);
  for (size_t c = 0; c < n; ++c) {
    for (const std::string& name : clusters[c].datasets) {
      datasets[static_cast<size_t>(AddDataset(name))].located |= Bit(static_cast<int>(c));
    }
    for (const auto& [site, gbps] : clusters[c].bandwidth_gbps) {
      const int32_t other = FindCluster(site);
      if (other < 0) continue;
      const size_t o = static_cast<size_t>(other);
      link_gbps_[c * n + o] = std::max(link_gbps_[c * n + o], gbps);
      link_gbps_[o * n + c] = std::max(link_gbps_[o * n + c], gbps);
    }
  }
}

Snapshot Snapshot::WithoutNodes() const {
  Snapshot s;
  s.clusters = clusters;
  s.datasets = datasets;
  s.link_gbps_ = link_gbps_;
  s.models_ = models_;
  s.max_price_per_gpu_hour = max_price_per_gpu_hour;
  return s;
}

base::Result<Snapshot> Snapshot::Build(const std::vector<domain::Cluster>& clusters,
                                       const std::vector<domain::Node>& nodes,
                                       const domain::GpuCatalog& catalog,
                                       const std::vector<std::string>& more_models) {
  Snapshot s;
  if (clusters.size() > kMaxMaskBits) {
    return base::Status::Invalid("clusters: at most 64 clusters per snapshot, got " +
                                 std::to_string(clusters.size()));
  }
  auto intern_model = [&](const std::string& name) -> base::Result<ModelId> {
    ModelId id = s.FindModel(name);
    if (id != kNoModel) return id;
    if (s.models_.size() >= kMaxMaskBits) {
      return base::Status::Invalid("at most 64 GPU models per snapshot");
    }
    s.models_.push_back(catalog.Resolve(name));
    return static_cast<ModelId>(s.models_.size() - 1);
  };
  for (const domain::Cluster& c : clusters) {
    ClusterState cs;
    cs.name = c.name;
    DescribeSite(c, &cs);
    s.clusters.push_back(std::move(cs));
  }
  s.IndexSites();
  std::map<std::string, int32_t> rack_ids;
  s.nodes.reserve(nodes.size());
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    const domain::Node& n = nodes[ni];
    auto [rack_it, inserted] = rack_ids.emplace(n.rack, static_cast<int32_t>(s.racks.size()));
    if (inserted) s.racks.push_back(n.rack);
    const std::string where = "nodes[" + std::to_string(ni) + "] (" + n.name + ")";
    if (Status st = s.Append(n, where, intern_model, rack_it->second); !st.ok()) return st;
  }
  for (const std::string& m : more_models) {
    if (auto id = intern_model(m); !id.ok()) return id.status();
  }
  for (size_t ci = 0; ci < clusters.size(); ++ci) {
    s.clusters[ci].price_by_model.assign(s.models_.size(), 0.0);
    for (const auto& [model, price] : clusters[ci].price_per_gpu_hour) {
      ModelId id = s.FindModel(model);
      if (id != kNoModel) s.clusters[ci].price_by_model[id] = price;
      if (id != kNoModel) s.max_price_per_gpu_hour = std::max(s.max_price_per_gpu_hour, price);
    }
  }
  return s;
}

}  // namespace meridian::sched
