#include "sim/history.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "domain/documents.h"
#include "domain/job_spec.h"

namespace meridian::sim {
namespace {

// A member that is an object or an array, or an empty one: a reference that outlives a loop over
// it (a loop over `value(...).items()` would walk a destroyed temporary).
const Json& Member(const Json& object, const char* key) {
  static const Json kNone = Json::object();
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? kNone : *it;
}

// The documents of one kind, by name.
std::map<std::string, const Json*> OfKind(const Json& documents, const std::string& kind) {
  std::map<std::string, const Json*> out;
  for (const Json& d : documents) {
    if (d.value("kind", "") != kind) continue;
    out[d.at("metadata").value("name", "")] = &d.at("spec");
  }
  return out;
}

// Node `i` of a pool as the server declares it, with the pool's labels.
domain::Node PoolNode(const std::string& pool, const Json& spec, int64_t i) {
  domain::Node n = domain::DeclaredPoolNode(pool, spec, i);
  for (const auto& [k, v] : Member(spec, "labels").items()) n.labels[k] = v;
  return n;
}

// Projects (team, weight) and their project-level quotas without a GPU model, which is what a
// replay's tenancy holds (docs/replay-format.md).
std::vector<ReplayProject> ProjectsOfDocuments(const Json& documents,
                                               std::vector<std::string>* notes) {
  std::map<std::string, ReplayProject> by_name;
  for (const auto& [name, spec] : OfKind(documents, "Project")) {
    ReplayProject p;
    p.name = name;
    p.team = spec->value("team", "");
    p.weight = spec->value("weight", 1.0);
    by_name[name] = p;
  }
  bool above = false, by_model = false;
  for (const auto& [name, spec] : OfKind(documents, "Quota")) {
    if (!spec->contains("project")) {
      above = true;
      continue;
    }
    if (!spec->value("gpuModel", "").empty()) {
      by_model = true;
      continue;
    }
    auto p = by_name.find(spec->value("project", ""));
    if (p == by_name.end()) continue;
    p->second.guaranteed_gpus = spec->value("guaranteedGpus", 0.0);
    p->second.limit_gpus = spec->value("limitGpus", -1.0);
  }
  if (above) notes->push_back("quotas of teams and organizations are not replayed");
  if (by_model) notes->push_back("quotas of one GPU model are not replayed");
  std::vector<ReplayProject> out;
  for (auto& [name, p] : by_name) out.push_back(std::move(p));
  return out;
}

// A time of a job's status: Unix seconds, or -1 when absent or not a number.
double StatusTime(const Json& status, const char* key) {
  auto it = status.find(key);
  return it != status.end() && it->is_number() ? it->get<double>() : -1;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

base::Result<HistoryTrace> TraceOfHistory(const LiveState& live, double from, double to,
                                          double now) {
  if (to <= 0) to = now;
  if (to <= from) {
    return base::Status::Invalid("the window is empty: --from (" + Number(from) +
                                 ") is not before --to (" + Number(to) +
                                 ", which is now when not given)");
  }
  HistoryTrace out;
  out.origin = from;
  std::map<std::string, domain::Cluster> clusters;
  for (const auto& [name, spec] : OfKind(live.documents, "Cluster")) {
    clusters[name] = domain::ClusterOfSpec(name, *spec);
  }
  for (const Json& n : live.nodes) {
    domain::Node node;
    node.name = n.value("name", "");
    node.cluster = n.value("cluster", "");
    node.pool = n.value("pool", "");
    node.rack = n.value("rack", "");
    node.cpu_milli = n.value("cpuMilli", int64_t{0});
    node.memory_mib = n.value("memoryMib", int64_t{0});
    for (const auto& [k, v] : Member(n, "labels").items()) node.labels[k] = v;
    const std::string model = n.value("model", "");
    for (const Json& g : Member(n, "gpus")) {
      domain::GpuDevice d;
      d.uuid = g.value("uuid", "");
      d.model = model;
      node.gpus.push_back(std::move(d));
    }
    if (!clusters.count(node.cluster)) clusters[node.cluster].name = node.cluster;
    if (n.value("source", "") == "declared") out.cluster.declared.insert(node.name);
    out.cluster.nodes.push_back(std::move(node));
  }
  if (out.cluster.nodes.empty()) return base::Status::Invalid("the estate has no nodes");
  for (auto& [name, c] : clusters) out.cluster.clusters.push_back(std::move(c));
  out.cluster.projects = ProjectsOfDocuments(live.documents, &out.notes);

  std::map<std::string, int32_t> priority_of;
  for (const auto& [name, spec] : OfKind(live.documents, "PriorityClass")) {
    priority_of[name] = spec->value("value", 0);
  }
  bool mig = false, running = false, unran = false;
  int64_t undecoded = 0, before = 0, constrained = 0;
  const Json no_status = Json::object();
  for (const Json& j : live.jobs) {
    const Json& st =
        j.contains("status") && j.at("status").is_object() ? j.at("status") : no_status;
    const double submitted = StatusTime(st, "submittedAt");
    const double started = StatusTime(st, "startedAt");
    const double finished = StatusTime(st, "finishedAt");
    if (submitted < from && started >= 0 && started < from && (finished < 0 || finished > from)) {
      ++before;  // held GPUs when the window opened
    }
    if (submitted < from || submitted >= to) continue;
    if (!j.contains("spec") || !j.contains("id") || !j.at("id").is_number_integer()) {
      ++undecoded;
      continue;
    }
    auto spec = domain::DecodeJobSpec(j.at("spec"));
    if (!spec.ok()) {
      ++undecoded;
      continue;
    }
    if (!spec->node_selector.empty() || !spec->tolerations.empty() || !spec->clusters.empty()) {
      ++constrained;
    }
    ReplayJob r;
    r.id = j.value("id", int64_t{0});
    r.submit_time = submitted - from;
    r.project = j.contains("metadata") && j.at("metadata").is_object()
                    ? j.at("metadata").value("project", "default")
                    : "default";
    r.tasks = spec->tasks;
    r.cpu_milli = spec->cpu_milli;
    r.memory_mib = spec->memory_mib;
    r.gpu_models = spec->gpu_models;
    r.gang = spec->gang;
    r.runtime_estimate = spec->runtime_estimate;
    r.runtime_limit = spec->runtime_limit;
    auto p = priority_of.find(spec->priority_class);
    r.priority = p == priority_of.end() ? 0 : p->second;
    switch (spec->gpu.kind) {
      case domain::GpuRequest::Kind::kNone:
        r.gpus_per_task = 0;
        r.gpu_milli = 0;
        break;
      case domain::GpuRequest::Kind::kWhole:
        r.gpus_per_task = spec->gpu.count;
        break;
      case domain::GpuRequest::Kind::kFraction:
        r.gpus_per_task = 1;
        r.gpu_milli = spec->gpu.milli;
        break;
      case domain::GpuRequest::Kind::kMig:
        r.gpus_per_task = 1;  // a MIG slice is replayed as a whole GPU
        mig = true;
        break;
    }
    if (started >= 0) {
      const double ended = finished >= 0 ? finished : now;
      running = running || finished < 0;
      r.duration = std::max(0.0, std::min(ended, now) - started);
    } else if (r.runtime_limit > 0 || r.runtime_estimate > 0) {
      const std::string phase = st.value("phase", "");
      if (phase != "Pending" && phase != "Placed") {
        ++out.left_out;  // cancelled or failed before it ran
        continue;
      }
      r.duration = r.runtime_limit > 0 ? r.runtime_limit : r.runtime_estimate;
      unran = true;
    } else {
      ++out.left_out;
      continue;
    }
    out.jobs.push_back(std::move(r));
  }
  std::stable_sort(out.jobs.begin(), out.jobs.end(), [](const ReplayJob& a, const ReplayJob& b) {
    return a.submit_time < b.submit_time;
  });
  if (mig) out.notes.push_back("MIG slices are replayed as whole GPUs");
  if (running) out.notes.push_back("jobs still running are replayed with their run so far");
  if (unran) {
    out.notes.push_back(
        "jobs that have not run are replayed with their runtime limit, or else "
        "their estimate");
  }
  if (before > 0) {
    out.notes.push_back(std::to_string(before) +
                        " job(s) submitted before the window still held GPUs when it opened: "
                        "the replay starts on an empty estate");
  }
  if (constrained > 0) {
    out.notes.push_back(std::to_string(constrained) +
                        " job(s) name node selectors, tolerations or clusters, which are not "
                        "replayed");
  }
  if (undecoded > 0) {
    out.notes.push_back(std::to_string(undecoded) +
                        " job(s) left out: their stored spec no longer reads");
  }
  if (out.left_out > 0) {
    out.notes.push_back(std::to_string(out.left_out) +
                        " job(s) left out: they never ran and nothing says how long they would");
  }
  if (out.jobs.empty()) {
    return base::Status::Invalid(
        "no job submitted between --from and --to ran or says how "
        "long it would run");
  }
  return out;
}

std::string ReplayClusterYaml(const ReplayCluster& cluster) {
  Json clusters = Json::array();
  for (const domain::Cluster& c : cluster.clusters) {
    Json groups = Json::array();
    for (const domain::Node& n : cluster.nodes) {
      if (n.cluster != c.name) continue;
      Json g = {{"name", n.name},
                {"gpus", n.gpus.size()},
                {"cpu_milli", n.cpu_milli},
                {"memory_mib", n.memory_mib}};
      if (!n.gpus.empty()) g["model"] = n.gpus.front().model;
      if (!n.labels.empty()) g["labels"] = n.labels;
      if (!n.pool.empty()) g["pool"] = n.pool;
      if (cluster.declared.count(n.name)) g["declared"] = true;
      groups.push_back(std::move(g));
    }
    if (groups.empty()) continue;
    Json cj = {{"name", c.name},
               {"kind", c.kind == domain::SiteKind::kCloud ? "cloud" : "on-prem"},
               {"nodes", std::move(groups)}};
    if (!c.region.empty()) cj["region"] = c.region;
    if (!c.price_per_gpu_hour.empty()) cj["prices"] = c.price_per_gpu_hour;
    if (!c.datasets.empty()) cj["datasets"] = c.datasets;
    clusters.push_back(std::move(cj));
  }
  Json projects = Json::array();
  for (const ReplayProject& p : cluster.projects) {
    Json pj = {{"name", p.name}, {"weight", p.weight}};
    if (!p.team.empty()) pj["team"] = p.team;
    if (p.guaranteed_gpus > 0) pj["guaranteed_gpus"] = p.guaranteed_gpus;
    if (p.limit_gpus >= 0) pj["limit_gpus"] = p.limit_gpus;
    projects.push_back(std::move(pj));
  }
  Json doc = {{"clusters", std::move(clusters)}};
  if (!projects.empty()) doc["projects"] = std::move(projects);
  return doc.dump(2) + "\n";
}

std::string ReplayJobsCsv(const std::vector<ReplayJob>& jobs) {
  std::string out =
      "id,submit_time,duration,tasks,gpus_per_task,gpu_milli,gpu_models,project,priority,"
      "runtime_estimate,runtime_limit,cpu_milli,memory_mib,gang\n";
  for (const ReplayJob& j : jobs) {
    std::string models;
    for (const std::string& m : j.gpu_models) models += (models.empty() ? "" : "|") + m;
    out += std::to_string(j.id) + "," + Number(j.submit_time) + "," + Number(j.duration) + "," +
           std::to_string(j.tasks) + "," + std::to_string(j.gpus_per_task) + "," +
           std::to_string(j.gpus_per_task > 0 ? j.gpu_milli : 1000) + "," + models + "," +
           j.project + "," + std::to_string(j.priority) + "," + Number(j.runtime_estimate) + "," +
           Number(j.runtime_limit) + "," + std::to_string(j.cpu_milli) + "," +
           std::to_string(j.memory_mib) + "," + (j.gang ? "1" : "0") + "\n";
  }
  return out;
}

ReplaySetup SetupOfDocuments(const ReplayCluster& trace, const Json& documents) {
  ReplaySetup out;
  out.cluster = trace;
  out.cluster.projects = ProjectsOfDocuments(documents, &out.notes);
  // Clusters: the documents' prices and kinds; those only the trace knows stay.
  for (const auto& [name, spec] : OfKind(documents, "Cluster")) {
    domain::Cluster c = domain::ClusterOfSpec(name, *spec);
    auto it = std::find_if(out.cluster.clusters.begin(), out.cluster.clusters.end(),
                           [&](const domain::Cluster& k) { return k.name == c.name; });
    if (it == out.cluster.clusters.end()) {
      out.cluster.clusters.push_back(std::move(c));
    } else {
      *it = std::move(c);
    }
  }
  // Declared nodes: what the documents' pools declare, in place of what the trace's declared.
  const auto pools = OfKind(documents, "NodePool");
  std::vector<domain::Node> nodes;
  out.cluster.declared.clear();
  for (domain::Node& n : out.cluster.nodes) {
    if (!trace.declared.count(n.name)) nodes.push_back(std::move(n));
  }
  for (const auto& [name, spec] : pools) {
    const int64_t count = spec->value("nodes", 0);
    for (int64_t i = 0; i < count; ++i) {
      domain::Node n = PoolNode(name, *spec, i);
      out.cluster.declared.insert(n.name);
      nodes.push_back(std::move(n));
    }
  }
  out.cluster.nodes = std::move(nodes);
  const auto policies = OfKind(documents, "Policy");
  // The Policy's fields as the server reads them (server/estate.cc, ApplyPolicy). Documents are
  // in canonical form, every field present; without a Policy the replay's defaults are the
  // scheduler's, as the server's are.
  static const Json kNoPolicy = Json::object();
  auto p = policies.find("default");
  const Json& policy = p != policies.end() ? *p->second : kNoPolicy;
  out.options.policy = policy.value("queueOrder", "meridian");
  if (policy.contains("preemption")) out.options.preemption = policy.at("preemption").get<bool>();
  if (policy.contains("backfill")) out.options.backfill = policy.at("backfill").get<bool>();
  for (const auto& [key, field] :
       {std::pair{"fairShareHalfLife", &out.options.fair_share_half_life},
        std::pair{"reserveAfter", &out.options.reserve_after},
        std::pair{"starvationHorizon", &out.options.starvation_horizon},
        std::pair{"usageStretch", &out.options.usage_stretch},
        std::pair{"firstStartWithin", &out.options.first_start_within},
        std::pair{"firstStartPreemptsAfter", &out.options.first_start_preempts_after}}) {
    if (policy.contains(key) && policy.at(key).is_number()) *field = policy.at(key).get<double>();
  }
  const std::string placement = policy.value("placement", "meridian");
  if (placement != "meridian") {
    out.notes.push_back("the Policy's placement \"" + placement +
                        "\" is not replayed: jobs are placed as meridian places them");
  }
  return out;
}

Json ProposedDocuments(const Json& live, const Json& changes, bool prune) {
  auto key = [](const Json& d) {
    return d.value("kind", "") + "/" + d.at("metadata").value("name", "");
  };
  std::map<std::string, Json> by_key;
  if (!prune) {
    for (const Json& d : live) by_key[key(d)] = d;
  }
  for (const Json& d : changes) by_key[key(d)] = d;
  Json out = Json::array();
  for (auto& [k, d] : by_key) out.push_back(std::move(d));
  return out;
}

namespace {

// "2.1h", "35m", "40s": a duration people read at a glance.
std::string Human(double seconds) {
  char buf[32];
  if (seconds >= 3600) {
    std::snprintf(buf, sizeof buf, "%.1fh", seconds / 3600);
  } else if (seconds >= 60) {
    std::snprintf(buf, sizeof buf, "%.0fm", seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, seconds >= 10 ? "%.0fs" : "%.1fs", seconds);
  }
  return buf;
}

// "2.1h -> 1.8h (-14%)"
std::string Change(double now, double then, bool duration) {
  const std::string a = duration ? Human(now) : Number(now);
  const std::string b = duration ? Human(then) : Number(then);
  if (now <= 0) return a + " -> " + b;
  char pct[32];
  std::snprintf(pct, sizeof pct, " (%+.0f%%)", 100 * (then - now) / now);
  return a + " -> " + b + pct;
}

const ProjectStats* Find(const ReplayResult& r, const std::string& name) {
  for (const ProjectStats& p : r.projects) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Json Figures(const ProjectStats& p) {
  return {{"jobs", p.jobs},
          {"completed", p.completed},
          {"meanJctSeconds", p.jct.mean},
          {"p95JctSeconds", p.jct.p95},
          {"meanWaitSeconds", p.queueing_delay.mean},
          {"p95WaitSeconds", p.queueing_delay.p95},
          {"gpuShare", p.share}};
}

std::vector<std::string> ProjectNames(const ReplayResult& a, const ReplayResult& b) {
  std::vector<std::string> names;
  for (const ReplayResult* r : {&a, &b}) {
    for (const ProjectStats& p : r->projects) {
      if (p.jobs > 0 && std::find(names.begin(), names.end(), p.name) == names.end()) {
        names.push_back(p.name);
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Json WhatIfJson(const ReplayResult& current, const ReplayResult& proposed) {
  Json projects = Json::array();
  const ProjectStats none;
  for (const std::string& name : ProjectNames(current, proposed)) {
    const ProjectStats* a = Find(current, name);
    const ProjectStats* b = Find(proposed, name);
    projects.push_back({{"project", name},
                        {"current", Figures(a ? *a : none)},
                        {"proposed", Figures(b ? *b : none)}});
  }
  auto estate = [](const ReplayResult& r) {
    return Json{{"policy", r.policy},
                {"jobs", r.jobs},
                {"completed", r.completed},
                {"meanJctSeconds", r.jct.mean},
                {"meanWaitSeconds", r.queueing_delay.mean},
                {"p99WaitSeconds", r.queueing_delay.p99},
                {"utilization", r.utilization},
                {"preemptions", r.preemptions},
                {"makespanSeconds", r.makespan},
                {"gpus", r.total_gpus}};
  };
  return {{"current", estate(current)}, {"proposed", estate(proposed)}, {"projects", projects}};
}

WhatIfText WhatIfTable(const ReplayResult& current, const ReplayResult& proposed) {
  WhatIfText out;
  out.headers = {"project",   "jobs run", "mean JCT", "p95 JCT",
                 "mean wait", "p95 wait", "GPU share"};
  std::vector<std::vector<std::string>>& rows = out.rows;
  const ProjectStats none;
  for (const std::string& name : ProjectNames(current, proposed)) {
    const ProjectStats& a = Find(current, name) ? *Find(current, name) : none;
    const ProjectStats& b = Find(proposed, name) ? *Find(proposed, name) : none;
    char share[64];
    std::snprintf(share, sizeof share, "%.0f%% -> %.0f%%", 100 * a.share, 100 * b.share);
    // Figures are of the jobs that ran: how many did says what they leave out.
    rows.push_back({name,
                    std::to_string(a.completed) + " -> " + std::to_string(b.completed) + " of " +
                        std::to_string(std::max(a.jobs, b.jobs)),
                    Change(a.jct.mean, b.jct.mean, true), Change(a.jct.p95, b.jct.p95, true),
                    Change(a.queueing_delay.mean, b.queueing_delay.mean, true),
                    Change(a.queueing_delay.p95, b.queueing_delay.p95, true), share});
  }
  char estate[512];
  std::snprintf(
      estate, sizeof estate,
      "estate: GPUs %s -> %s; queue order %s -> %s; utilisation %.1f%% -> %.1f%%; "
      "mean JCT %s; "
      "mean wait %s; preemptions %lld -> %lld; never started %lld -> %lld",
      Number(current.total_gpus).c_str(), Number(proposed.total_gpus).c_str(),
      current.policy.c_str(), proposed.policy.c_str(), 100 * current.utilization,
      100 * proposed.utilization, Change(current.jct.mean, proposed.jct.mean, true).c_str(),
      Change(current.queueing_delay.mean, proposed.queueing_delay.mean, true).c_str(),
      static_cast<long long>(current.preemptions), static_cast<long long>(proposed.preemptions),
      static_cast<long long>(current.never_started),
      static_cast<long long>(proposed.never_started));
  out.estate = estate;
  return out;
}

}  // namespace meridian::sim
