#include "sim/replay_input.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "base/rng.h"
#include "base/strings.h"
#include "domain/gpu_model.h"
#include "domain/spec.h"
#include "sim/alibaba_trace.h"
#include "sim/csv.h"

namespace meridian::sim {
namespace {

using domain::FieldReader;
using domain::Json;

// A group of identical nodes: `count` of them, named name-0, name-1, ...
void ReadNodeGroup(const domain::SourceDoc& doc, const Json& g, const std::string& path,
                   const std::string& cluster, domain::ErrorList* errors, ReplayCluster* out) {
  Json scratch;
  FieldReader r(doc, g, path, errors, &scratch);
  const size_t before = errors->size();
  const std::string name = r.String("name", true);
  const int64_t count = r.Int("count", 1, 100000, 1);
  const int64_t gpus = r.Int("gpus", 0, 64, 0);
  const std::string model = r.String("model", false);
  const int64_t cpu = r.Int("cpu_milli", 1, 1LL << 40, 0, true);
  const int64_t mem = r.Int("memory_mib", 1, 1LL << 40, 0, true);
  const int64_t domain_size = r.Int("nvlink_domain_size", 0, 64, 0);
  const int64_t rack_size = r.Int("rack_size", 1, 100000, 8);
  const std::map<std::string, std::string> labels = r.StringMap("labels");
  std::string pool = r.String("pool", false);
  const bool declared = r.Bool("declared", false);
  // A MIG layout the group's first `mig_gpus` GPUs start in ("3g.40gb@0,2g.20gb@4,1g.10gb@6"):
  // a static partition, or where a replay that shapes MIG by demand starts from.
  const int64_t mig_gpus = r.Int("mig_gpus", 0, 64, 0);
  std::vector<domain::MigInstance> mig_layout;
  if (r.Has("mig_layout")) {
    const domain::GpuModel* m = domain::GpuCatalog::Builtin().Find(model);
    uint32_t used = 0;
    const std::string text = r.String("mig_layout", false);
    for (std::string_view part : base::Split(text, ',')) {
      const size_t at = part.find('@');
      const std::string profile(part.substr(0, at));
      const domain::MigProfile* p = m ? m->FindMigProfile(profile) : nullptr;
      int start = -1;
      if (at != std::string_view::npos) start = std::atoi(std::string(part.substr(at + 1)).c_str());
      if (!p || std::find(p->starts.begin(), p->starts.end(), start) == p->starts.end()) {
        r.Error("mig_layout", "\"" + std::string(part) + "\" is not a MIG instance of " + model +
                                  " (profile@start, at one of the profile's placements)");
        break;
      }
      const uint32_t bits = p->SliceBits(start);
      if (used & bits) {
        r.Error("mig_layout", "\"" + std::string(part) + "\" overlaps an instance before it");
        break;
      }
      used |= bits;
      mig_layout.push_back({profile, start});
    }
  }
  if (mig_gpus > gpus) r.Error("mig_gpus", "exceeds gpus");
  if (mig_gpus > 0 && mig_layout.empty()) r.Error("mig_layout", "is required with mig_gpus");
  if (gpus > 0 && model.empty()) r.Error("model", "is required with gpus");
  if (declared && pool.empty()) r.Error("declared", "needs pool: the node pool that declares it");
  // An elastic group: `count` is the pool's maxNodes, none of them up at the start.
  ReplayElasticPool elastic;
  const bool is_elastic = r.Has("elastic");
  if (is_elastic) {
    FieldReader e = r.Nested("elastic");
    elastic.boot_delay = e.Duration("boot_delay", 0, 86400, elastic.boot_delay);
    elastic.idle_timeout = e.Duration("idle_timeout", 1, 30 * 86400.0, elastic.idle_timeout);
    elastic.price_per_gpu_hour = e.Number("price", 0, 1e6, -1);
    e.Finish();
    if (declared) r.Error("elastic", "a group is declared or elastic, not both");
    if (pool.empty()) pool = name;
    elastic.name = pool;
    elastic.cluster = cluster;
  }
  r.Finish();
  if (errors->size() != before) return;
  for (int64_t i = 0; i < count; ++i) {
    domain::Node n;
    n.name = count == 1 ? name : name + "-" + std::to_string(i);
    n.cluster = cluster;
    n.rack = cluster + "/" + name + "-rack" + std::to_string(i / rack_size);
    n.cpu_milli = cpu;
    n.memory_mib = mem;
    n.labels = labels;
    n.pool = pool;
    if (declared) out->declared.insert(n.name);
    if (is_elastic) elastic.nodes.push_back(n.name);
    for (int64_t k = 0; k < gpus; ++k) {
      domain::GpuDevice d;
      d.uuid = "GPU-" + n.name + "-" + std::to_string(k);
      d.model = model;
      d.nvlink_domain = domain_size > 0 ? static_cast<int>(k / domain_size) : 0;
      if (k < mig_gpus) {
        d.mig_enabled = true;
        d.mig_instances = mig_layout;
      }
      n.gpus.push_back(std::move(d));
    }
    out->nodes.push_back(std::move(n));
  }
  if (is_elastic) out->elastic.push_back(std::move(elastic));
}

void ReadCluster(const domain::SourceDoc& doc, const Json& c, const std::string& path,
                 domain::ErrorList* errors, ReplayCluster* out) {
  Json scratch;
  FieldReader r(doc, c, path, errors, &scratch);
  domain::Cluster cl;
  cl.name = r.String("name", true);
  cl.kind = r.Enum("kind", {"on-prem", "cloud"}, "on-prem") == "cloud" ? domain::SiteKind::kCloud
                                                                       : domain::SiteKind::kOnPrem;
  cl.region = r.String("region", false);
  cl.price_per_gpu_hour = r.NumberMap("prices", 0);
  cl.datasets = r.StringList("datasets");
  cl.bandwidth_gbps = r.NumberMap("bandwidth_gbps", 0);
  cl.egress_per_gib = r.Number("egress_per_gib", 0, 1e6, 0);
  // What its cache of staged datasets holds at most (least recently used go first); 0: no cap.
  cl.storage.cache_capacity_gib = r.Number("cache_gib", 0, 1e12, 0);
  const Json* nodes = r.Array("nodes", true);
  if (nodes && nodes->empty()) r.Error("nodes", "expected a non-empty list of node groups");
  r.Finish();
  if (nodes) {
    for (size_t i = 0; i < nodes->size(); ++i) {
      ReadNodeGroup(doc, (*nodes)[i], path + ".nodes[" + std::to_string(i) + "]", cl.name, errors,
                    out);
    }
  }
  out->clusters.push_back(std::move(cl));
}

void ReadDataset(const domain::SourceDoc& doc, const Json& d, const std::string& path,
                 domain::ErrorList* errors, ReplayCluster* out) {
  Json scratch;
  FieldReader r(doc, d, path, errors, &scratch);
  domain::Dataset ds;
  ds.name = r.String("name", true);
  ds.size_gib = r.Number("size_gib", 0, 1e9, 0);
  if (!r.Has("size_gib")) r.Error("size_gib", "is required");
  const std::vector<std::string> at = r.StringList("clusters");
  if (at.empty()) r.Error("clusters", "expected the clusters that hold it");
  for (const std::string& c : at) ds.locations.push_back({c, "/" + ds.name, ""});
  r.Finish();
  out->datasets.push_back(std::move(ds));
}

void ReadProject(const domain::SourceDoc& doc, const Json& p, const std::string& path,
                 domain::ErrorList* errors, ReplayCluster* out) {
  Json scratch;
  FieldReader r(doc, p, path, errors, &scratch);
  ReplayProject proj;
  proj.name = r.String("name", true);
  proj.team = r.String("team", false);
  proj.weight = r.Number("weight", 0.001, 1e6, 1.0);
  proj.guaranteed_gpus = r.Number("guaranteed_gpus", 0, 1e6, 0);
  proj.limit_gpus = r.Number("limit_gpus", -1, 1e6, -1);
  if (proj.limit_gpus >= 0 && proj.limit_gpus < proj.guaranteed_gpus) {
    r.Error("limit_gpus", "is below guaranteed_gpus");
  }
  r.Finish();
  out->projects.push_back(std::move(proj));
}

}  // namespace

base::Result<ReplayCluster> ParseReplayCluster(std::string_view text, std::string_view file) {
  if (text.rfind("sn,", 0) == 0) {  // an Alibaba node list
    auto nodes = ParseAlibabaNodes(text, file);
    if (!nodes.ok()) return nodes.status();
    ReplayCluster out;
    out.clusters.emplace_back();
    EstateFromTrace(*nodes, &out.clusters.back(), &out.nodes);
    return out;
  }
  auto docs = domain::ParseYamlDocuments(std::string(text), std::string(file), nullptr);
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1) {
    return base::Status::Invalid(std::string(file) + ": expected one YAML document, found " +
                                 std::to_string(docs->size()));
  }
  const domain::SourceDoc& doc = docs->front();
  domain::ErrorList errors;
  ReplayCluster out;
  Json scratch;
  FieldReader root(doc, doc.value, "", &errors, &scratch);
  const Json* clusters = root.Array("clusters", true);
  if (clusters && clusters->empty()) root.Error("clusters", "expected a non-empty list");
  const Json* projects = root.Array("projects", false);
  const Json* datasets = root.Array("datasets", false);
  root.Finish();
  if (clusters) {
    for (size_t i = 0; i < clusters->size(); ++i) {
      ReadCluster(doc, (*clusters)[i], "clusters[" + std::to_string(i) + "]", &errors, &out);
    }
  }
  if (projects) {
    for (size_t i = 0; i < projects->size(); ++i) {
      ReadProject(doc, (*projects)[i], "projects[" + std::to_string(i) + "]", &errors, &out);
    }
  }
  if (datasets) {
    for (size_t i = 0; i < datasets->size(); ++i) {
      ReadDataset(doc, (*datasets)[i], "datasets[" + std::to_string(i) + "]", &errors, &out);
    }
  }
  // Where each dataset lives joins its cluster's list, as a Dataset's locations do in the server.
  for (const domain::Dataset& d : out.datasets) {
    for (const domain::DatasetLocation& at : d.locations) {
      auto c = std::find_if(out.clusters.begin(), out.clusters.end(),
                            [&](const domain::Cluster& x) { return x.name == at.cluster; });
      if (c == out.clusters.end()) {
        errors.Add(doc, "datasets", "dataset " + d.name + ": no cluster " + at.cluster);
      } else if (std::find(c->datasets.begin(), c->datasets.end(), d.name) == c->datasets.end()) {
        c->datasets.push_back(d.name);
      }
    }
  }
  if (!errors.empty()) return base::Status::Invalid(errors.ToString());
  return out;
}

base::Result<ReplayCluster> ReadReplayCluster(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseReplayCluster(*text, path);
}

namespace {

base::Result<std::vector<ReplayJob>> JobsFromAlibaba(std::string_view text, std::string_view file) {
  auto tasks = ParseAlibabaTasks(text, file);
  if (!tasks.ok()) return tasks.status();
  std::vector<ReplayJob> out;
  int64_t id = 0;
  for (const TraceTask& t : *tasks) {
    ++id;
    // Tasks that never ran, or whose end the trace does not hold, have no duration to replay.
    const int64_t start = t.scheduled_time >= 0 ? t.scheduled_time : t.creation_time;
    if (t.deletion_time < 0 || t.deletion_time <= start) continue;
    ReplayJob j;
    j.id = id;
    j.submit_time = static_cast<double>(t.creation_time);
    j.duration = static_cast<double>(t.deletion_time - start);
    j.gpus_per_task = t.num_gpu;
    j.gpu_milli = t.num_gpu > 0 ? t.gpu_milli : 0;
    j.gpu_models = t.gpu_spec;
    j.project = t.qos.empty() ? "default" : t.qos;
    j.priority = t.qos == "LS" ? 20 : t.qos == "Guaranteed" || t.qos == "Burstable" ? 10 : 0;
    j.runtime_estimate = j.duration;
    j.cpu_milli = t.cpu_milli;
    j.memory_mib = t.memory_mib;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

base::Result<std::vector<ReplayJob>> ParseReplayJobs(std::string_view text, std::string_view file) {
  if (text.rfind("name,cpu_milli,memory_mib,num_gpu", 0) == 0) return JobsFromAlibaba(text, file);
  CsvTable t(text, file);
  base::Status s = t.ReadHeader({"id", "submit_time", "duration", "gpus_per_task"});
  if (!s.ok()) return s;
  std::vector<ReplayJob> out;
  std::set<long long> ids;
  const double kMax = 1e12;
  while (t.NextLine()) {
    if (s = t.CheckWidth(); !s.ok()) return s;
    ReplayJob j;
    long long v = 0;
    if (s = t.Int("id", 0, 1LL << 60, &v); !s.ok()) return s;
    if (!ids.insert(v).second) return t.Error(t.line_no(), t.Column("id"), "id: duplicate job id");
    j.id = v;
    if (s = t.Double("submit_time", 0, kMax, &j.submit_time); !s.ok()) return s;
    if (s = t.Double("duration", 0, kMax, &j.duration); !s.ok()) return s;
    if (s = t.Int("gpus_per_task", 0, 64, &v); !s.ok()) return s;
    j.gpus_per_task = static_cast<int32_t>(v);
    const long long one = 1, thousand = 1000, zero = 0;
    const double dzero = 0;
    auto opt_int = [&](const char* col, long long lo, long long hi, long long def,
                       long long* dst) -> base::Status {
      *dst = def;
      return t.Has(col) ? t.Int(col, lo, hi, dst, &def) : base::Status::Ok();
    };
    if (s = opt_int("tasks", 1, 100000, one, &v); !s.ok()) return s;
    j.tasks = static_cast<int32_t>(v);
    if (s = opt_int("gpu_milli", 1, 1000, thousand, &v); !s.ok()) return s;
    j.gpu_milli = j.gpus_per_task > 0 ? static_cast<int32_t>(v) : 0;
    if (j.gpus_per_task > 1 && j.gpu_milli != 1000) {
      return t.Error(t.line_no(), t.Column("gpu_milli"),
                     "gpu_milli: a task with several GPUs must take whole GPUs (1000)");
    }
    if (s = opt_int("priority", -1000000, 1000000, zero, &v); !s.ok()) return s;
    j.priority = static_cast<int32_t>(v);
    if (s = opt_int("cpu_milli", 0, 1LL << 40, 4000LL * std::max(1, j.gpus_per_task), &v);
        !s.ok()) {
      return s;
    }
    j.cpu_milli = v;
    if (s = opt_int("memory_mib", 0, 1LL << 40, 16384LL * std::max(1, j.gpus_per_task), &v);
        !s.ok()) {
      return s;
    }
    j.memory_mib = v;
    if (s = opt_int("gang", 0, 1, zero, &v); !s.ok()) return s;
    j.gang = v == 1;
    j.runtime_estimate = j.duration;
    if (t.Has("runtime_estimate")) {
      const double fallback = j.duration;
      if (s = t.Double("runtime_estimate", 0, kMax, &j.runtime_estimate, &fallback); !s.ok()) {
        return s;
      }
    }
    if (t.Has("runtime_limit")) {
      if (s = t.Double("runtime_limit", 0, kMax, &j.runtime_limit, &dzero); !s.ok()) return s;
    }
    if (t.Has("idle_from") && !t.Field("idle_from").empty()) {
      const double none = -1;
      if (s = t.Double("idle_from", 0, kMax, &j.idle_from, &none); !s.ok()) return s;
      if (j.idle_from > j.duration) {
        return t.Error(t.line_no(), t.Column("idle_from"),
                       "idle_from: must not exceed duration (it is seconds into the run)");
      }
    }
    if (t.Has("project") && !t.Field("project").empty())
      j.project = std::string(t.Field("project"));
    if (t.Has("gpu_models") && !t.Field("gpu_models").empty()) {
      for (std::string_view m : base::Split(t.Field("gpu_models"), '|')) {
        if (!m.empty()) j.gpu_models.emplace_back(m);
      }
    }
    if (t.Has("datasets") && !t.Field("datasets").empty()) {
      for (std::string_view d : base::Split(t.Field("datasets"), '|')) {
        if (!d.empty()) j.datasets.emplace_back(d);
      }
    }
    // A MIG instance of this profile per task, instead of GPUs.
    if (t.Has("mig") && !t.Field("mig").empty()) {
      j.mig_profile = std::string(t.Field("mig"));
      bool known = false;
      for (const domain::GpuModel& m : domain::GpuCatalog::Builtin().models()) {
        known = known || m.FindMigProfile(j.mig_profile);
      }
      if (!known) {
        return t.Error(t.line_no(), t.Column("mig"),
                       "mig: \"" + j.mig_profile + "\" is not a MIG profile of any known model");
      }
      if (j.gpus_per_task != 1 || j.gpu_milli != 1000) {
        return t.Error(t.line_no(), t.Column("mig"),
                       "mig: a MIG task takes one instance (gpus_per_task 1, whole)");
      }
    }
    out.push_back(std::move(j));
  }
  if (out.empty()) return t.Error(t.line_no() + 1, 1, "no jobs after the header");
  return out;
}

void ModelIdlePhases(std::vector<ReplayJob>* jobs, double share, double idle_fraction,
                     uint64_t seed) {
  base::Rng rng(seed);
  for (ReplayJob& j : *jobs) {
    // One draw per job whatever its kind, so that the jobs chosen do not depend on the others.
    const bool idles = rng.UniformDouble() < share;
    if (!idles || j.idle_from >= 0 || j.gpus_per_task == 0) continue;
    j.idle_from = j.duration * (1 - idle_fraction);
  }
}

base::Result<std::vector<ReplayJob>> ReadReplayJobs(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseReplayJobs(*text, path);
}

}  // namespace meridian::sim
