#include "sim/alibaba_trace.h"

#include <fstream>
#include <map>
#include <sstream>

#include "base/strings.h"
#include "domain/gpu_model.h"
#include "sim/csv.h"

namespace meridian::sim {
namespace {

constexpr long long kMaxInt = 1LL << 50;

}  // namespace

base::Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::Status::Io(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return base::Status::Io(path + ": read error");
  return ss.str();
}

base::Result<std::vector<TraceNode>> ParseAlibabaNodes(std::string_view text,
                                                       std::string_view file) {
  CsvTable t(text, file);
  base::Status s = t.ReadHeader({"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!s.ok()) return s;
  std::vector<TraceNode> out;
  while (t.NextLine()) {
    if (s = t.CheckWidth(); !s.ok()) return s;
    TraceNode n;
    long long v = 0;
    n.name = std::string(t.Field("sn"));
    if (n.name.empty()) return t.Error(t.line_no(), t.Column("sn"), "sn: empty node name");
    if (s = t.Int("cpu_milli", 0, kMaxInt, &v); !s.ok()) return s;
    n.cpu_milli = v;
    if (s = t.Int("memory_mib", 0, kMaxInt, &v); !s.ok()) return s;
    n.memory_mib = v;
    if (s = t.Int("gpu", 0, 64, &v); !s.ok()) return s;
    n.gpus = static_cast<int32_t>(v);
    n.model = std::string(t.Field("model"));
    if (n.gpus > 0 && n.model.empty()) {
      return t.Error(t.line_no(), t.Column("model"), "model: a node with GPUs needs a model");
    }
    out.push_back(std::move(n));
  }
  if (out.empty()) return t.Error(t.line_no() + 1, 1, "no nodes after the header");
  return out;
}

base::Result<std::vector<TraceTask>> ParseAlibabaTasks(std::string_view text,
                                                       std::string_view file) {
  CsvTable t(text, file);
  // The task lists come in two schemas: the full one, and one of only the first five columns.
  // What the short one lacks takes the defaults of TraceTask (any GPU model, no times).
  base::Status s = t.ReadHeader({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!s.ok()) return s;
  auto text_of = [&t](const std::string& column) {
    return t.Has(column) ? t.Field(column) : std::string_view();
  };
  std::vector<TraceTask> out;
  const long long kUnset = -1;
  while (t.NextLine()) {
    if (s = t.CheckWidth(); !s.ok()) return s;
    TraceTask k;
    long long v = 0;
    k.name = std::string(t.Field("name"));
    if (s = t.Int("cpu_milli", 0, kMaxInt, &v); !s.ok()) return s;
    k.cpu_milli = v;
    if (s = t.Int("memory_mib", 0, kMaxInt, &v); !s.ok()) return s;
    k.memory_mib = v;
    if (s = t.Int("num_gpu", 0, 64, &v); !s.ok()) return s;
    k.num_gpu = static_cast<int32_t>(v);
    if (s = t.Int("gpu_milli", 0, 1000, &v); !s.ok()) return s;
    k.gpu_milli = static_cast<int32_t>(v);
    if (k.num_gpu > 1 && k.gpu_milli != 1000) {
      return t.Error(t.line_no(), t.Column("gpu_milli"),
                     "gpu_milli: a task with several GPUs must take whole GPUs (1000)");
    }
    if (k.num_gpu == 0 && k.gpu_milli != 0) {
      return t.Error(t.line_no(), t.Column("gpu_milli"),
                     "gpu_milli: a task without GPUs cannot take a share of one");
    }
    if (k.num_gpu > 0 && k.gpu_milli == 0) {
      return t.Error(t.line_no(), t.Column("gpu_milli"),
                     "gpu_milli: a task with GPUs must take a share of them");
    }
    std::string_view spec = text_of("gpu_spec");
    if (!spec.empty()) {
      for (std::string_view m : base::Split(spec, '|')) {
        if (!m.empty()) k.gpu_spec.emplace_back(m);
      }
    }
    k.qos = std::string(text_of("qos"));
    k.phase = std::string(text_of("pod_phase"));
    if (t.Has("creation_time")) {
      if (s = t.Int("creation_time", 0, kMaxInt, &v); !s.ok()) return s;
      k.creation_time = v;
    }
    if (t.Has("deletion_time")) {
      if (s = t.Int("deletion_time", 0, kMaxInt, &v, &kUnset); !s.ok()) return s;
      k.deletion_time = v;
    }
    if (t.Has("scheduled_time")) {
      if (s = t.Int("scheduled_time", 0, kMaxInt, &v, &kUnset); !s.ok()) return s;
      k.scheduled_time = v;
    }
    out.push_back(std::move(k));
  }
  if (out.empty()) return t.Error(t.line_no() + 1, 1, "no tasks after the header");
  return out;
}

base::Result<std::vector<TraceNode>> ReadAlibabaNodes(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseAlibabaNodes(*text, path);
}

base::Result<std::vector<TraceTask>> ReadAlibabaTasks(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseAlibabaTasks(*text, path);
}

void EstateFromTrace(const std::vector<TraceNode>& nodes, domain::Cluster* cluster,
                     std::vector<domain::Node>* out) {
  cluster->name = "openb";
  cluster->region = "alibaba";
  out->clear();
  out->reserve(nodes.size());
  for (const TraceNode& n : nodes) {
    domain::Node d;
    d.name = n.name;
    d.cluster = cluster->name;
    d.rack = n.name;
    d.cpu_milli = n.cpu_milli;
    d.memory_mib = n.memory_mib;
    for (int32_t i = 0; i < n.gpus; ++i) {
      domain::GpuDevice g;
      g.uuid = n.name + "-gpu" + std::to_string(i);
      g.model = n.model;
      d.gpus.push_back(std::move(g));
    }
    out->push_back(std::move(d));
  }
}

base::Result<sched::Snapshot> SnapshotFromTrace(const std::vector<TraceNode>& nodes) {
  domain::Cluster cluster;
  std::vector<domain::Node> dn;
  EstateFromTrace(nodes, &cluster, &dn);
  return sched::Snapshot::Build({cluster}, dn, domain::GpuCatalog::Builtin());
}

sched::TaskSpec GpuTaskSpec(int64_t cpu_milli, int64_t memory_mib, int32_t gpus, int32_t gpu_milli,
                            const std::vector<std::string>& models,
                            const sched::Snapshot& snapshot) {
  sched::TaskSpec t;
  t.cpu_milli = cpu_milli;
  t.memory_mib = memory_mib;
  if (gpus > 0) {
    t.gpu_count = gpus;
    t.gpu_milli = gpu_milli;
    t.gpu_kind = gpu_milli >= 1000 ? sched::GpuKind::kWhole : sched::GpuKind::kFraction;
  }
  if (!models.empty()) {
    t.allowed_models = 0;
    for (const std::string& m : models) {
      sched::ModelId id = snapshot.FindModel(m);
      if (id != sched::kNoModel) t.allowed_models |= sched::Bit(id);
    }
  }
  return t;
}

std::vector<sched::TaskSpec> TasksFromTrace(const std::vector<TraceTask>& tasks,
                                            const sched::Snapshot& snapshot) {
  std::vector<sched::TaskSpec> out;
  out.reserve(tasks.size());
  for (const TraceTask& k : tasks) {
    out.push_back(
        GpuTaskSpec(k.cpu_milli, k.memory_mib, k.num_gpu, k.gpu_milli, k.gpu_spec, snapshot));
  }
  return out;
}

}  // namespace meridian::sim
