#include "sim/replay_input.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "sim/alibaba_trace.h"
#include "sim/csv.h"

namespace meridian::sim {
namespace {

// Errors in the YAML cluster description name the file, the line and column of the node, and
// the field (yaml-cpp marks are 0-based).
class YamlReader {
 public:
  explicit YamlReader(std::string_view file) : file_(file) {}

  base::Status Error(const YAML::Node& at, const std::string& field, const std::string& what) {
    const YAML::Mark m = at.Mark();
    return base::Status::Invalid(std::string(file_) + ":" + std::to_string(m.line + 1) + ":" +
                                 std::to_string(m.column + 1) + ": " + field + ": " + what);
  }

  // A scalar child `key` of `map` converted to T; absent: `fallback` unless `required`.
  template <class T>
  base::Status Get(const YAML::Node& map, const std::string& key, const std::string& path, T* out,
                   bool required = false) {
    const YAML::Node v = map[key];
    if (!v) {
      return required ? Error(map, path + "." + key, "is required") : base::Status::Ok();
    }
    if (!v.IsScalar()) return Error(v, path + "." + key, "expected a single value");
    try {
      *out = v.as<T>();
    } catch (const YAML::Exception&) {
      return Error(v, path + "." + key, "\"" + v.Scalar() + "\" has the wrong type");
    }
    return base::Status::Ok();
  }

  base::Status CheckKeys(const YAML::Node& map, const std::string& path,
                         const std::set<std::string>& known) {
    if (!map.IsMap()) return Error(map, path, "expected a mapping");
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (!known.count(key)) return Error(kv.first, path + "." + key, "unknown field");
    }
    return base::Status::Ok();
  }

 private:
  std::string_view file_;
};

base::Status ReadNodeGroup(YamlReader& r, const YAML::Node& g, const std::string& path,
                           const std::string& cluster, ReplayCluster* out) {
  base::Status s = r.CheckKeys(g, path,
                               {"name", "count", "gpus", "model", "cpu_milli", "memory_mib",
                                "nvlink_domain_size", "rack_size", "labels"});
  if (!s.ok()) return s;
  std::string name;
  int count = 1, gpus = 0, domain_size = 0, rack_size = 8;
  std::string model;
  long long cpu = 0, mem = 0;
  if (s = r.Get(g, "name", path, &name, true); !s.ok()) return s;
  if (s = r.Get(g, "count", path, &count); !s.ok()) return s;
  if (s = r.Get(g, "gpus", path, &gpus); !s.ok()) return s;
  if (s = r.Get(g, "model", path, &model); !s.ok()) return s;
  if (s = r.Get(g, "cpu_milli", path, &cpu, true); !s.ok()) return s;
  if (s = r.Get(g, "memory_mib", path, &mem, true); !s.ok()) return s;
  if (s = r.Get(g, "nvlink_domain_size", path, &domain_size); !s.ok()) return s;
  if (s = r.Get(g, "rack_size", path, &rack_size); !s.ok()) return s;
  if (count < 1 || count > 100000) return r.Error(g["count"], path + ".count", "must be 1..100000");
  if (gpus < 0 || gpus > 64) return r.Error(g["gpus"], path + ".gpus", "must be 0..64");
  if (gpus > 0 && model.empty()) return r.Error(g, path + ".model", "is required with gpus");
  if (cpu <= 0 || mem <= 0) return r.Error(g, path, "cpu_milli and memory_mib must be positive");
  if (rack_size < 1) return r.Error(g["rack_size"], path + ".rack_size", "must be positive");
  for (int i = 0; i < count; ++i) {
    domain::Node n;
    n.name = count == 1 ? name : name + "-" + std::to_string(i);
    n.cluster = cluster;
    n.rack = cluster + "/" + name + "-rack" + std::to_string(i / rack_size);
    n.cpu_milli = cpu;
    n.memory_mib = mem;
    if (const YAML::Node labels = g["labels"]; labels && labels.IsMap()) {
      for (const auto& kv : labels) n.labels[kv.first.Scalar()] = kv.second.Scalar();
    }
    for (int k = 0; k < gpus; ++k) {
      domain::GpuDevice d;
      d.uuid = "GPU-" + n.name + "-" + std::to_string(k);
      d.model = model;
      d.nvlink_domain = domain_size > 0 ? k / domain_size : 0;
      n.gpus.push_back(std::move(d));
    }
    out->nodes.push_back(std::move(n));
  }
  return base::Status::Ok();
}

base::Status ReadCluster(YamlReader& r, const YAML::Node& c, const std::string& path,
                         ReplayCluster* out) {
  base::Status s = r.CheckKeys(c, path, {"name", "kind", "region", "prices", "datasets", "nodes"});
  if (!s.ok()) return s;
  domain::Cluster cl;
  std::string kind = "on-prem";
  if (s = r.Get(c, "name", path, &cl.name, true); !s.ok()) return s;
  if (s = r.Get(c, "kind", path, &kind); !s.ok()) return s;
  if (s = r.Get(c, "region", path, &cl.region); !s.ok()) return s;
  if (kind != "on-prem" && kind != "cloud") {
    return r.Error(c["kind"], path + ".kind", "must be on-prem or cloud, got \"" + kind + "\"");
  }
  cl.kind = kind == "cloud" ? domain::SiteKind::kCloud : domain::SiteKind::kOnPrem;
  if (const YAML::Node prices = c["prices"]) {
    if (!prices.IsMap()) return r.Error(prices, path + ".prices", "expected model: price");
    for (const auto& kv : prices) {
      double p = 0;
      if (s = r.Get(prices, kv.first.Scalar(), path + ".prices", &p); !s.ok()) return s;
      if (p < 0) return r.Error(kv.second, path + ".prices." + kv.first.Scalar(), "negative");
      cl.price_per_gpu_hour[kv.first.Scalar()] = p;
    }
  }
  if (const YAML::Node ds = c["datasets"]) {
    if (!ds.IsSequence()) return r.Error(ds, path + ".datasets", "expected a list");
    for (const auto& d : ds) cl.datasets.push_back(d.Scalar());
  }
  const YAML::Node nodes = c["nodes"];
  if (!nodes || !nodes.IsSequence() || nodes.size() == 0) {
    return r.Error(nodes ? nodes : c, path + ".nodes", "expected a non-empty list of node groups");
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    s = ReadNodeGroup(r, nodes[i], path + ".nodes[" + std::to_string(i) + "]", cl.name, out);
    if (!s.ok()) return s;
  }
  out->clusters.push_back(std::move(cl));
  return base::Status::Ok();
}

base::Status ReadProjects(YamlReader& r, const YAML::Node& list, ReplayCluster* out) {
  if (!list.IsSequence()) return r.Error(list, "projects", "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "projects[" + std::to_string(i) + "]";
    const YAML::Node p = list[i];
    base::Status s =
        r.CheckKeys(p, path, {"name", "team", "weight", "guaranteed_gpus", "limit_gpus"});
    if (!s.ok()) return s;
    ReplayProject proj;
    if (s = r.Get(p, "name", path, &proj.name, true); !s.ok()) return s;
    if (s = r.Get(p, "team", path, &proj.team); !s.ok()) return s;
    if (s = r.Get(p, "weight", path, &proj.weight); !s.ok()) return s;
    if (s = r.Get(p, "guaranteed_gpus", path, &proj.guaranteed_gpus); !s.ok()) return s;
    if (s = r.Get(p, "limit_gpus", path, &proj.limit_gpus); !s.ok()) return s;
    if (proj.weight <= 0) return r.Error(p["weight"], path + ".weight", "must be positive");
    if (proj.guaranteed_gpus < 0) {
      return r.Error(p["guaranteed_gpus"], path + ".guaranteed_gpus", "must not be negative");
    }
    if (proj.limit_gpus >= 0 && proj.limit_gpus < proj.guaranteed_gpus) {
      return r.Error(p["limit_gpus"], path + ".limit_gpus", "is below guaranteed_gpus");
    }
    out->projects.push_back(std::move(proj));
  }
  return base::Status::Ok();
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
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return base::Status::Invalid(std::string(file) + ":" + std::to_string(e.mark.line + 1) + ":" +
                                 std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  YamlReader r(file);
  ReplayCluster out;
  if (base::Status s = r.CheckKeys(root, "cluster description", {"clusters", "projects"});
      !s.ok()) {
    return s;
  }
  const YAML::Node clusters = root["clusters"];
  if (!clusters || !clusters.IsSequence() || clusters.size() == 0) {
    return r.Error(clusters ? clusters : root, "clusters", "expected a non-empty list");
  }
  for (size_t i = 0; i < clusters.size(); ++i) {
    base::Status s = ReadCluster(r, clusters[i], "clusters[" + std::to_string(i) + "]", &out);
    if (!s.ok()) return s;
  }
  if (const YAML::Node projects = root["projects"]) {
    if (base::Status s = ReadProjects(r, projects, &out); !s.ok()) return s;
  }
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
    if (t.Has("project") && !t.Field("project").empty())
      j.project = std::string(t.Field("project"));
    if (t.Has("gpu_models") && !t.Field("gpu_models").empty()) {
      for (std::string_view m : base::Split(t.Field("gpu_models"), '|')) {
        if (!m.empty()) j.gpu_models.emplace_back(m);
      }
    }
    out.push_back(std::move(j));
  }
  if (out.empty()) return t.Error(t.line_no() + 1, 1, "no jobs after the header");
  return out;
}

base::Result<std::vector<ReplayJob>> ReadReplayJobs(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseReplayJobs(*text, path);
}

}  // namespace meridian::sim
