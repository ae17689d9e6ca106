#include "server/estate.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/job_life.h"
#include "domain/agent_timing.h"
#include "domain/documents.h"
#include "domain/gpu_model.h"
#include "domain/job.h"
#include "domain/node_ops.h"
#include "domain/workload.h"
#include "sched/task.h"

namespace meridian::server {

domain::Node NodeOfObject(const store::Object& o) {
  const Json& s = o.spec;
  domain::Node n;
  n.name = o.name;
  n.cluster = s.value("cluster", "");
  n.pool = s.value("pool", "");
  n.rack = s.value("rack", "");
  n.unmanaged_cpu_milli = s.value("unmanagedCpuMilli", int64_t{0});
  n.unmanaged_memory_mib = s.value("unmanagedMemoryMib", int64_t{0});
  n.cpu_milli = std::max<int64_t>(0, s.value("cpuMilli", int64_t{0}) - n.unmanaged_cpu_milli);
  n.memory_mib = std::max<int64_t>(0, s.value("memoryMib", int64_t{0}) - n.unmanaged_memory_mib);
  const domain::NodeOps ops = domain::DecodeNodeOps(s);
  // A node its runner will not start work on (Slurm drained it) is not schedulable either.
  n.unavailable = s.value("unavailable", "");
  n.schedulable = domain::NodeSchedulable(s.value("state", "Ready"), ops) && n.unavailable.empty();
  if (s.contains("labels")) {
    for (const auto& [k, v] : s.at("labels").items()) n.labels[k] = v.get<std::string>();
  }
  for (const Json& g : s.value("gpus", Json::array())) {
    domain::GpuDevice d;
    d.uuid = g.value("uuid", "");
    d.model = g.value("model", "");
    d.nvlink_domain = g.value("nvlinkDomain", 0);
    d.unmanaged = g.value("unmanaged", "");
    // A GPU cordoned for a fault (pending a reset) is an unhealthy slot: nothing is placed there.
    d.working =
        g.value("healthy", true) &&
        !domain::GpuCordoned(ops.gpus, g.value("index", static_cast<int32_t>(n.gpus.size())));
    d.healthy = d.working && d.unmanaged.empty();
    // A GPU the agent found in MIG mode (its instances are made per grant, so none is counted):
    // only where the catalogue knows the model's MIG geometry.
    const domain::GpuModel* model = domain::GpuCatalog::Builtin().Find(d.model);
    d.mig_enabled = g.value("migEnabled", false) && model && model->mig_capable();
    n.gpus.push_back(d);
  }
  return n;
}

namespace {

// The nodes a pool declares (`nodes: N`), which no agent runs.
void AddPoolNodes(const store::Object& pool, std::vector<domain::Node>* nodes) {
  const int64_t count = pool.spec.value("nodes", 0);
  for (int64_t i = 0; i < count; ++i) {
    nodes->push_back(domain::DeclaredPoolNode(pool.name, pool.spec, i));
  }
}

PoolTraits TraitsOf(const store::Object& pool) {
  const Json& s = pool.spec;
  PoolTraits t;
  t.purpose =
      domain::ParsePoolPurpose(s.value("purpose", "any")).value_or(domain::PoolPurpose::kAny);
  t.gpu_sharing =
      domain::ParseGpuSharing(s.value("gpuSharing", "mps")).value_or(domain::GpuSharing::kMps);
  if (s.contains("labels")) {
    for (const auto& [k, v] : s.at("labels").items()) t.labels[k] = v.get<std::string>();
  }
  for (const Json& taint : s.value("taints", Json::array())) {
    t.taints.push_back({taint.value("key", ""), taint.value("value", "")});
  }
  if (s.value("spot", false)) t.taints.push_back({domain::kSpotTaint, "true"});
  return t;
}

// A pool's elastic part; its traits (purpose, labels, taints) are the estate's, given to its
// shape as to any of its nodes.
ElasticPoolSpec ElasticOf(const store::Object& o, const Estate& e) {
  const Json& s = o.spec;
  ElasticPoolSpec p;
  p.name = o.name;
  p.cluster = s.value("cluster", "");
  p.provisioner = s.value("provisioner", "");
  p.min_nodes = s.value("minNodes", 0);
  p.max_nodes = s.value("maxNodes", 0);
  p.spot = s.value("spot", false);
  p.boot_seconds = s.value("bootDelay", 60.0);
  p.idle_timeout = s.value("idleTimeout", 600.0);
  p.join_timeout = s.value("joinTimeout", p.boot_seconds + std::max(60.0, p.boot_seconds));
  p.shape = domain::DeclaredPoolNode(o.name, s, 0);
  ApplyPoolTraits(e, &p.shape);
  const std::string model = s.value("gpuModel", "");
  for (const domain::Cluster& c : e.clusters) {
    if (c.name != p.cluster) continue;
    p.region = c.region;
    if (auto price = c.price_per_gpu_hour.find(model); price != c.price_per_gpu_hour.end()) {
      p.price_per_gpu_hour = price->second;
    }
    if (auto f = e.speed_factors.find(c.name); f != e.speed_factors.end()) {
      if (auto speed = f->second.find(model); speed != f->second.end()) p.speed = speed->second;
    }
  }
  p.region = s.value("region", p.region);
  if (s.contains("price")) {
    const double priced = s.at("price").value(p.spot ? "spot" : "onDemand", 0.0);
    if (priced > 0) p.price_per_gpu_hour = priced;
  }
  return p;
}

void AddRegisteredNode(const store::Object& o, Estate* e) {
  e->agent_address[o.name] = o.spec.value("address", "");
  e->nodes.push_back(NodeOfObject(o));
}

// Where a node of the estate comes from: a registered Node, or the NodePool that declares it.
using Origin = std::pair<std::string, std::string>;  // kind, name

// Runs `add` for one object; a spec of the wrong shape (a store written by hand or by an older
// version) makes that object a problem instead of an exception that stops the whole estate.
template <class F>
void Guarded(const store::Object& o, Estate* e, F&& add) {
  try {
    add();
  } catch (const Json::exception& ex) {
    e->problems.push_back({o.kind, o.name, std::string("spec: ") + ex.what() + ": left out"});
  }
}

void ApplyPolicy(const store::Object& o, Estate* e) {
  const std::string order = o.spec.value("queueOrder", "meridian");
  e->options.order = order == "fifo"  ? sched::QueueOrder::kFifo
                     : order == "sjf" ? sched::QueueOrder::kShortestJobFirst
                     : order == "las" ? sched::QueueOrder::kLeastAttainedService
                                      : sched::QueueOrder::kMeridian;
  e->options.preemption = o.spec.value("preemption", true);
  e->options.backfill = o.spec.value("backfill", true);
  e->options.fair_share_half_life = o.spec.value("fairShareHalfLife", 3600.0);
  e->options.reserve_after = o.spec.value("reserveAfter", 3600.0);
  e->options.mig_reconfigure_interval =
      o.spec.value("migReconfigureInterval", sched::SchedulerOptions{}.mig_reconfigure_interval);
  e->options.starvation_horizon = o.spec.value("starvationHorizon", 24 * 3600.0);
  e->options.usage_stretch = o.spec.value("usageStretch", sched::SchedulerOptions{}.usage_stretch);
  e->options.first_start_within =
      o.spec.value("firstStartWithin", sched::SchedulerOptions{}.first_start_within);
  e->options.first_start_preempts_after =
      o.spec.value("firstStartPreemptsAfter", sched::SchedulerOptions{}.first_start_preempts_after);
  e->placement = o.spec.value("placement", "meridian");
  e->cycle_interval = o.spec.value("cycleInterval", 1.0);
  const domain::AgentTiming timing = domain::AgentTimingOf(o.spec);
  e->heartbeat_interval = timing.heartbeat_interval;
  e->node_lost_timeout = timing.node_lost_timeout;
  e->agent_lease = timing.agent_lease;
  e->fence_grace = timing.fence_grace;
  e->gpu_health = domain::GpuHealthPolicyOf(o.spec);
  e->gpu_warnings = domain::GpuWarningPolicyOf(o.spec);
  e->failing_nodes = domain::FailingNodePolicyOf(o.spec);
}

// Leaves out each node that the scheduler's snapshot refuses on its own (GPUs of two models,
// more than 64 GPUs, an invalid MIG layout), with the snapshot's reason as its problem, once
// per object. Tried only when the whole estate failed to build, so it costs nothing otherwise.
void DropRefusedNodes(Estate* e, std::vector<Origin>* origin) {
  std::vector<domain::Node> kept;
  std::vector<Origin> kept_origin;
  std::set<Origin> reported;
  for (size_t i = 0; i < e->nodes.size(); ++i) {
    domain::Node& n = e->nodes[i];
    auto alone = sched::Snapshot::Build(e->clusters, {n}, domain::GpuCatalog::Builtin());
    if (alone.ok()) {
      kept.push_back(std::move(n));
      kept_origin.push_back((*origin)[i]);
      continue;
    }
    // "nodes[0] (NAME).gpus[1].model: ..." -> "gpus[1].model: ...", the node named apart.
    std::string why = alone.status().message();
    const std::string prefix = "nodes[0] (" + n.name + ")";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    if (!why.empty() && why[0] == '.') why = why.substr(1);
    if (why.rfind(": ", 0) == 0) why = why.substr(2);
    const Origin& from = (*origin)[i];
    if (reported.insert(from).second) {
      e->problems.push_back(
          {from.first, from.second,
           (from.first == "Node" ? "" : "node " + n.name + ": ") + why + ": not scheduled"});
    }
    if (from.first == "Node") e->agent_address.erase(n.name);
  }
  e->nodes = std::move(kept);
  *origin = std::move(kept_origin);
}

// A quota on its node of the tenancy tree (`node_of`: "org/NAME", "team/NAME",
// "project/NAME"); a quota of a scope that does not exist is a problem, not enforced.
void AddQuota(const store::Object& q, const std::map<std::string, int32_t>& node_of, Estate* e) {
  std::string field, target;
  for (const char* k : {"organization", "team", "project"}) {
    if (q.spec.contains(k)) {
      field = k;
      target = q.spec.at(k).get<std::string>();
    }
  }
  auto node = node_of.find((field == "organization" ? "org" : field) + "/" + target);
  if (node == node_of.end()) {
    e->problems.push_back({q.kind, q.name,
                           (field.empty() ? "it names no organization, team or project"
                                          : field + " \"" + target + "\" does not exist") +
                               std::string(": the quota is not enforced")});
    return;
  }
  const std::string model = q.spec.value("gpuModel", "");
  const sched::ModelId id = model.empty() ? sched::kNoModel : e->snapshot.FindModel(model);
  if (!model.empty() && id == sched::kNoModel) return;  // no such GPU in the estate
  const double guaranteed = q.spec.value("guaranteedGpus", 0.0);
  const double limit = q.spec.value("limitGpus", -1.0);
  e->quotas.SetQuota(node->second, id, static_cast<int64_t>(guaranteed * 1000),
                     limit < 0 ? sched::kUnlimited : static_cast<int64_t>(limit * 1000));
}

// The tenancy tree: organizations at the roots, then teams, then projects, and their quotas.
// A parent that does not exist (deleted through the API) leaves its child a root of the tree:
// its own quota still holds, and it is said so.
void AddTenancy(const std::vector<store::Object>& objects, Estate* e) {
  std::map<std::string, const store::Object*> teams, projects;
  std::vector<const store::Object*> quotas;
  for (const store::Object& o : objects) {
    if (o.kind == "Team") teams[o.name] = &o;
    if (o.kind == "Project") projects[o.name] = &o;
    if (o.kind == "Quota") quotas.push_back(&o);
  }
  std::map<std::string, int32_t> node_of;
  for (const store::Object& o : objects) {
    if (o.kind == "Organization") node_of["org/" + o.name] = e->quotas.AddNode(o.name, -1);
  }
  auto parent = [&](const store::Object& o, const std::string& field, const std::string& key) {
    const std::string name = o.spec.value(field, "");
    if (auto it = node_of.find(key + "/" + name); it != node_of.end()) return it->second;
    if (!name.empty()) {
      e->problems.push_back({o.kind, o.name,
                             field + " \"" + name + "\" does not exist: the " +
                                 (o.kind == "Team" ? "team" : "project") +
                                 " is a root of the quota tree"});
    }
    return -1;
  };
  for (const auto& [name, t] : teams) {
    Guarded(*t, e, [&, &name = name, &t = t] {
      node_of["team/" + name] = e->quotas.AddNode(name, parent(*t, "organization", "org"));
    });
  }
  for (const auto& [name, p] : projects) {
    Guarded(*p, e, [&, &name = name, &p = p] {
      const double weight = p->spec.value("weight", 1.0);
      const int32_t leaf = e->quotas.AddNode(name, parent(*p, "team", "team"), weight);
      node_of["project/" + name] = leaf;
      e->tenant_of_project[name] = leaf;
    });
  }
  for (const store::Object* q : quotas) {
    Guarded(*q, e, [&] { AddQuota(*q, node_of, e); });
  }
}

}  // namespace

domain::DatasetCopy CopyOfObject(const store::Object& o) {
  domain::DatasetCopy c;
  c.cluster = o.spec.value("cluster", "");
  c.dataset = o.spec.value("dataset", "");
  c.path = o.spec.value("path", "");
  c.size_gib = o.spec.value("sizeGib", 0.0);
  c.staged_at = o.spec.value("stagedAt", 0.0);
  c.last_used = o.spec.value("lastUsed", 0.0);
  return c;
}

Json CopySpec(const domain::DatasetCopy& c) {
  return {{"cluster", c.cluster},  {"dataset", c.dataset},    {"path", c.path},
          {"sizeGib", c.size_gib}, {"stagedAt", c.staged_at}, {"lastUsed", c.last_used}};
}

base::Result<std::unique_ptr<Estate>> BuildEstate(const std::vector<store::Object>& objects) {
  auto e = std::make_unique<Estate>();
  std::set<std::string> clusters;
  for (const store::Object& o : objects) {
    if (o.kind != "Cluster") continue;
    Guarded(o, e.get(), [&] {
      e->clusters.push_back(domain::ClusterOfSpec(o.name, o.spec));
      clusters.insert(o.name);
      if (o.spec.contains("speedFactors") && o.spec.at("speedFactors").is_object()) {
        for (const auto& [model, factor] : o.spec.at("speedFactors").items()) {
          if (factor.is_number() && factor.get<double>() > 0) {
            e->speed_factors[o.name][model] = factor.get<double>();
          }
        }
      }
    });
  }
  // Datasets: a folder where one lives joins its cluster's list (what the data score reads as
  // local). An object store is not: its own site stages from it as any other does.
  for (const store::Object& o : objects) {
    if (o.kind != "Dataset") continue;
    Guarded(o, e.get(), [&] {
      domain::Dataset d = domain::DatasetOfSpec(o.name, o.spec);
      for (const domain::DatasetLocation& at : d.locations) {
        if (at.path.empty()) continue;
        for (domain::Cluster& c : e->clusters) {
          if (c.name != at.cluster) continue;
          if (std::find(c.datasets.begin(), c.datasets.end(), d.name) == c.datasets.end()) {
            c.datasets.push_back(d.name);
          }
        }
      }
      e->datasets[o.name] = std::move(d);
    });
  }
  for (const store::Object& o : objects) {
    if (o.kind == "DatasetCopy") e->copies.push_back(CopyOfObject(o));
  }
  std::vector<Origin> origin;  // of each node in e->nodes
  auto in_known_cluster = [&](const store::Object& o, const char* what) {
    const std::string cluster = o.spec.value("cluster", "");
    if (clusters.count(cluster)) return true;
    e->problems.push_back(
        {o.kind, o.name, "cluster \"" + cluster + "\" does not exist: " + what + " not scheduled"});
    return false;
  };
  for (const store::Object& o : objects) {
    if (o.kind == "NodePool") {
      Guarded(o, e.get(), [&] {
        if (!in_known_cluster(o, "the pool's nodes are")) return;
        AddPoolNodes(o, &e->nodes);
        e->pool_shapes.push_back(domain::DeclaredPoolNode(o.name, o.spec, 0));
        origin.resize(e->nodes.size(), {o.kind, o.name});
        e->pool_traits[o.name] = TraitsOf(o);
        if (o.spec.contains("maxNodes")) e->elastic_pools.push_back(ElasticOf(o, *e));
      });
    }
    if (o.kind == "Node") {
      Guarded(o, e.get(), [&] {
        if (!in_known_cluster(o, "the node is")) return;
        AddRegisteredNode(o, e.get());
        origin.push_back({o.kind, o.name});
      });
    }
    if (o.kind == "PriorityClass") {
      Guarded(o, e.get(), [&] {
        e->priority_of_class[o.name] = o.spec.value("value", 0);
        e->preempting_of_class[o.name] = o.spec.value("preempting", true);
      });
    }
    if (o.kind == "Policy") Guarded(o, e.get(), [&] { ApplyPolicy(o, e.get()); });
  }
  for (domain::Node& n : e->nodes) ApplyPoolTraits(*e, &n);
  // The models of elastic pools are known before any of their nodes exist, so that jobs that
  // ask for them resolve and wait for a node to be added.
  std::vector<std::string> pool_models;
  for (const ElasticPoolSpec& p : e->elastic_pools) {
    if (!p.shape.gpus.empty()) pool_models.push_back(p.shape.gpus[0].model);
  }
  const auto& catalog = domain::GpuCatalog::Builtin();
  auto snapshot = sched::Snapshot::Build(e->clusters, e->nodes, catalog, pool_models);
  if (!snapshot.ok()) {
    // Some node the snapshot refuses: leave it out and build the rest.
    DropRefusedNodes(e.get(), &origin);
    snapshot = sched::Snapshot::Build(e->clusters, e->nodes, catalog, pool_models);
    if (!snapshot.ok()) return snapshot.status();
  }
  e->snapshot = std::move(snapshot.value());
  for (const auto& [name, d] : e->datasets) {
    e->snapshot.SetDatasetSize(e->snapshot.AddDataset(name), d.size_gib);
  }
  for (const domain::DatasetCopy& c : e->copies) {
    const int32_t dataset = e->snapshot.FindDataset(c.dataset);
    const int32_t cluster = e->snapshot.FindCluster(c.cluster);
    if (dataset >= 0 && cluster >= 0) e->snapshot.SetCached(dataset, cluster, true);
  }
  AddTenancy(objects, e.get());
  return e;
}

bool SameHardware(const domain::Node& a, const domain::Node& b) {
  if (a.cluster != b.cluster || a.pool != b.pool || a.rack != b.rack ||
      a.cpu_milli != b.cpu_milli || a.memory_mib != b.memory_mib ||
      a.gpus.size() != b.gpus.size()) {
    return false;
  }
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const domain::GpuDevice& x = a.gpus[i];
    const domain::GpuDevice& y = b.gpus[i];
    if (x.uuid != y.uuid || x.model != y.model || x.nvlink_domain != y.nvlink_domain ||
        x.healthy != y.healthy || x.mig_enabled != y.mig_enabled) {
      return false;
    }
  }
  return true;
}

void ApplyPoolTraits(const Estate& estate, domain::Node* node) {
  // A node's own labels (an agent's) win over its pool's; a node in no known pool runs any work.
  auto pool = estate.pool_traits.find(node->pool);
  if (pool == estate.pool_traits.end()) return;
  node->purpose = pool->second.purpose;
  node->gpu_sharing = pool->second.gpu_sharing;
  node->labels.insert(pool->second.labels.begin(), pool->second.labels.end());
  node->taints.insert(node->taints.end(), pool->second.taints.begin(), pool->second.taints.end());
}

sched::Assembly AssemblyOf(const Estate& estate) {
  sched::Assembly a;
  a.policy = estate.placement;
  a.options = estate.options;
  // A preempted task stops when its agent says so, even with no grace period.
  a.options.await_stop_reports = true;
  return a;
}

base::Result<sched::JobSpec> ToSchedulerJob(const store::JobRecord& job, const Estate& estate) {
  auto tenant = estate.tenant_of_project.find(job.project);
  if (tenant == estate.tenant_of_project.end()) {
    return base::Status::NotFound("project \"" + job.project + "\" no longer exists");
  }
  auto decoded = api::SpecOf(job);
  if (!decoded.ok()) return decoded.status();
  const domain::JobSpec& s = *decoded;
  sched::JobSpec spec;
  spec.id = job.id;
  spec.tenant = tenant->second;
  if (auto p = estate.priority_of_class.find(s.priority_class);
      p != estate.priority_of_class.end()) {
    spec.priority = p->second;
    spec.preempting = estate.preempting_of_class.at(s.priority_class);
  }
  spec.preemptible = s.preemptible;
  spec.gang = s.gang;
  spec.submit_time = job.submitted_at;
  spec.runtime_estimate = s.runtime_estimate;
  spec.runtime_limit = s.runtime_limit;
  spec.min_runtime = s.min_runtime;
  spec.grace_period = s.grace_period;
  spec.resumes = s.checkpoint;
  spec.started_before = job.generation > 0;  // placed before: requeued, or adopted
  spec.tasks = sched::TasksForJob(domain::JobOfSpec(job.name, job.project, s), estate.snapshot, -1);
  // A job that may be preempted may run on spot nodes, whose loss is a preemption to it.
  if (s.preemptible) {
    for (sched::TaskSpec& t : spec.tasks) t.tolerations.push_back({domain::kSpotTaint, ""});
  }
  return spec;
}

namespace {

const char* MigChangeName(sched::MigChange c) {
  switch (c) {
    case sched::MigChange::kNone:
      return "none";
    case sched::MigChange::kCreateInstance:
      return "create-instance";
    case sched::MigChange::kRepartition:
      return "repartition";
    case sched::MigChange::kDisableMig:
      return "disable-mig";
    case sched::MigChange::kEnableMig:
      return "enable-mig";
  }
  return "none";
}

}  // namespace

std::string MarkLayoutChanges(const std::vector<sched::DeviceGrant>& changes, const Estate& estate,
                              Json* allocation) {
  std::string words;
  for (const sched::DeviceGrant& c : changes) {
    if (c.gpu < 0 || c.gpu >= static_cast<int32_t>(estate.snapshot.gpus.size())) continue;
    // The node of the GPU, and the allocation's device for it.
    std::string node;
    int32_t local = -1;
    for (const sched::NodeState& n : estate.snapshot.nodes) {
      if (c.gpu >= n.gpu_begin && c.gpu < n.gpu_begin + n.gpu_count) {
        node = n.name;
        local = c.gpu - n.gpu_begin;
      }
    }
    std::string profile;
    if (c.mig_profile >= 0) {
      const auto& model = estate.snapshot.model(estate.snapshot.gpus[c.gpu].model);
      profile = model.mig_profiles[c.mig_profile].name;
    }
    for (Json& task : *allocation) {
      if (task.value("node", "") != node) continue;
      for (Json& dev : task["devices"]) {
        if (dev.value("gpu", -1) != local) continue;
        if (c.mig_change == sched::MigChange::kDisableMig) {
          dev["change"] = "disable-mig";
        } else if (dev.contains("mig") && dev["mig"].value("start", -1) == c.mig_start) {
          dev["mig"]["change"] = MigChangeName(c.mig_change);
        }
      }
    }
    const std::string gpu = "GPU " + std::to_string(local) + " of " + node;
    const std::string instance = profile + " at slice " + std::to_string(c.mig_start);
    std::string what;
    switch (c.mig_change) {
      case sched::MigChange::kEnableMig:
        what = gpu + " into MIG mode for " + instance;
        break;
      case sched::MigChange::kDisableMig:
        what = gpu + " out of MIG mode, whole again";
        break;
      case sched::MigChange::kRepartition:
        what = gpu + " re-partitioned for " + instance + " (its idle instances destroyed)";
        break;
      case sched::MigChange::kCreateInstance:
        what = "a " + instance + " instance made on " + gpu;
        break;
      case sched::MigChange::kNone:
        continue;
    }
    words += (words.empty() ? "" : "; ") + what;
  }
  return words;
}

Json AllocationToJson(const std::vector<sched::Placement>& placements, const Estate& estate,
                      double placed_at) {
  Json out = Json::array();
  for (size_t t = 0; t < placements.size(); ++t) {
    const sched::Placement& p = placements[t];
    const sched::NodeState& node = estate.snapshot.nodes[p.node];
    Json devices = Json::array();
    double gpus = 0;  // what the task holds, in GPUs: a MIG slice by its share of the memory
    for (const sched::DeviceGrant& d : p.devices) {
      const int32_t local = d.gpu - node.gpu_begin;
      Json dev = {
          {"gpu", local}, {"uuid", estate.nodes[p.node].gpus[local].uuid}, {"milli", d.milli}};
      if (d.memory_mib > 0) dev["memoryMib"] = d.memory_mib;
      // A share of a GPU says how it is shared (MPS with limits, or time-slicing without).
      if (d.mig_profile < 0 && d.milli < 1000) {
        dev["sharing"] = domain::GpuSharingName(estate.nodes[p.node].gpu_sharing);
      }
      // A GPU taken back whole from MIG mode: the agent leaves MIG mode before the task starts.
      if (d.mig_change == sched::MigChange::kDisableMig) dev["change"] = "disable-mig";
      if (d.mig_profile >= 0) {
        const auto& model = estate.snapshot.model(estate.snapshot.gpus[d.gpu].model);
        const auto& profile = model.mig_profiles[d.mig_profile];
        dev["mig"] = {{"profile", profile.name},
                      {"start", d.mig_start},
                      {"change", MigChangeName(d.mig_change)}};
        gpus += static_cast<double>(profile.memory_slices) / domain::kMigMemorySlices;
      } else {
        gpus += d.milli / 1000.0;
      }
      devices.push_back(dev);
    }
    Json task = {{"task", t},
                 {"cluster", estate.snapshot.clusters[node.cluster].name},
                 {"node", node.name},
                 {"devices", devices},
                 {"placedAt", placed_at}};
    if (gpus > 0) task["gpus"] = std::round(gpus * 1e6) / 1e6;
    // What accounting needs of the run when it ends (api/usage.h): the pool, the model and the
    // price of a GPU-hour as they are now; a later change of price does not reprice a run.
    const std::string pool = static_cast<size_t>(p.node) < estate.nodes.size()
                                 ? estate.nodes[static_cast<size_t>(p.node)].pool
                                 : "";
    if (!pool.empty()) task["pool"] = pool;
    if (!p.devices.empty() && node.model != sched::kNoModel) {
      const sched::ModelId model = node.model;
      task["gpuModel"] = estate.snapshot.model(model).name;
      double price = 0;
      const auto elastic = std::find_if(estate.elastic_pools.begin(), estate.elastic_pools.end(),
                                        [&](const ElasticPoolSpec& e) { return e.name == pool; });
      const auto& prices = estate.snapshot.clusters[node.cluster].price_by_model;
      if (elastic != estate.elastic_pools.end()) {
        price = elastic->price_per_gpu_hour;
      } else if (static_cast<size_t>(model) < prices.size()) {
        price = prices[static_cast<size_t>(model)];
      }
      if (price > 0) task["pricePerGpuHour"] = price;
    }
    out.push_back(std::move(task));
  }
  return out;
}

base::Result<std::vector<sched::Placement>> AllocationFromJson(const Json& allocation,
                                                               const Estate& estate) {
  std::map<std::string, int32_t> node_index;
  for (size_t i = 0; i < estate.snapshot.nodes.size(); ++i) {
    node_index[estate.snapshot.nodes[i].name] = static_cast<int32_t>(i);
  }
  std::vector<sched::Placement> out;
  for (const Json& task : allocation) {
    auto n = node_index.find(task.value("node", ""));
    if (n == node_index.end()) {
      return base::Status::NotFound("node \"" + task.value("node", "") + "\" no longer exists");
    }
    sched::Placement p;
    p.node = n->second;
    const sched::NodeState& node = estate.snapshot.nodes[p.node];
    for (const Json& d : task.at("devices")) {
      sched::DeviceGrant g;
      const int32_t local = d.at("gpu");
      if (local < 0 || local >= node.gpu_count) {
        return base::Status::NotFound("GPU " + std::to_string(local) + " of node " + node.name +
                                      " no longer exists");
      }
      g.gpu = node.gpu_begin + local;
      g.milli = d.value("milli", 1000);
      g.memory_mib = d.value("memoryMib", 0);
      if (d.contains("mig")) {
        const auto& model = estate.snapshot.model(estate.snapshot.gpus[g.gpu].model);
        const std::string profile = d.at("mig").value("profile", "");
        for (size_t k = 0; k < model.mig_profiles.size(); ++k) {
          if (model.mig_profiles[k].name == profile) g.mig_profile = static_cast<int16_t>(k);
        }
        g.mig_start = static_cast<int8_t>(d.at("mig").value("start", 0));
        // Replaying the change rebuilds the layout on a snapshot that starts without MIG.
        const std::string change = d.at("mig").value("change", "none");
        for (sched::MigChange c : {sched::MigChange::kCreateInstance,
                                   sched::MigChange::kRepartition, sched::MigChange::kEnableMig}) {
          if (change == MigChangeName(c)) g.mig_change = c;
        }
      }
      p.devices.push_back(g);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace meridian::server
