#include "sim/alibaba_trace.h"

#include <fstream>
#include <map>
#include <sstream>

#include "base/strings.h"
#include "domain/gpu_model.h"

namespace meridian::sim {
namespace {

// A CSV table whose first line names the columns. Fields hold no quotes or commas in this trace;
// a quote is reported as an error rather than misread.
class CsvTable {
 public:
  CsvTable(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  base::Status ReadHeader(const std::vector<std::string>& required) {
    if (!NextLine()) return Error(1, 1, "empty file: expected a header line");
    for (size_t i = 0; i < fields_.size(); ++i) {
      columns_[std::string(base::Trim(fields_[i]))] = static_cast<int>(i);
    }
    header_width_ = fields_.size();
    for (const std::string& name : required) {
      if (!columns_.count(name)) return Error(line_no_, 1, "missing column \"" + name + "\"");
    }
    return base::Status::Ok();
  }

  // Advances to the next non-empty line; false at the end.
  bool NextLine() {
    while (pos_ < text_.size() || (pos_ == text_.size() && !done_)) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) {
        end = text_.size();
        done_ = true;
      }
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      ++line_no_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (base::Trim(line).empty()) {
        if (done_) return false;
        continue;
      }
      line_ = line;
      fields_ = base::Split(line, ',');
      return true;
    }
    return false;
  }

  base::Status CheckWidth() const {
    if (fields_.size() != header_width_) {
      return Error(line_no_, 1,
                   "expected " + std::to_string(header_width_) + " fields, found " +
                       std::to_string(fields_.size()));
    }
    if (line_.find('"') != std::string_view::npos) {
      return Error(line_no_, static_cast<int>(line_.find('"')) + 1,
                   "quoted fields are not supported");
    }
    return base::Status::Ok();
  }

  std::string_view Field(const std::string& column) const {
    return base::Trim(fields_[columns_.at(column)]);
  }

  int Column(const std::string& column) const {
    int idx = columns_.at(column);
    int col = 1;
    for (int i = 0; i < idx; ++i) col += static_cast<int>(fields_[i].size()) + 1;
    return col;
  }

  // A non-negative integer in [lo, hi]; an empty field is `empty_value` when that is allowed.
  base::Status Int(const std::string& column, long long lo, long long hi, long long* out,
                   const long long* empty_value = nullptr) const {
    std::string_view f = Field(column);
    if (f.empty() && empty_value) {
      *out = *empty_value;
      return base::Status::Ok();
    }
    if (!base::ParseInt64(f, out)) {
      return Error(line_no_, Column(column),
                   column + ": expected an integer, found \"" + std::string(f) + "\"");
    }
    if (*out < lo || *out > hi) {
      return Error(line_no_, Column(column),
                   column + ": " + std::to_string(*out) + " is outside [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + "]");
    }
    return base::Status::Ok();
  }

  base::Status Error(int line, int col, const std::string& what) const {
    return base::Status::Invalid(std::string(file_) + ":" + std::to_string(line) + ":" +
                                 std::to_string(col) + ": " + what);
  }
  int line_no() const { return line_no_; }

 private:
  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  bool done_ = false;
  int line_no_ = 0;
  std::string_view line_;
  std::vector<std::string_view> fields_;
  std::map<std::string, int> columns_;
  size_t header_width_ = 0;
};

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
  base::Status s =
      t.ReadHeader({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                    "pod_phase", "creation_time", "deletion_time", "scheduled_time"});
  if (!s.ok()) return s;
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
    std::string_view spec = t.Field("gpu_spec");
    if (!spec.empty()) {
      for (std::string_view m : base::Split(spec, '|')) {
        if (!m.empty()) k.gpu_spec.emplace_back(m);
      }
    }
    k.qos = std::string(t.Field("qos"));
    k.phase = std::string(t.Field("pod_phase"));
    if (s = t.Int("creation_time", 0, kMaxInt, &v); !s.ok()) return s;
    k.creation_time = v;
    if (s = t.Int("deletion_time", 0, kMaxInt, &v, &kUnset); !s.ok()) return s;
    k.deletion_time = v;
    if (s = t.Int("scheduled_time", 0, kMaxInt, &v, &kUnset); !s.ok()) return s;
    k.scheduled_time = v;
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

base::Result<sched::Snapshot> SnapshotFromTrace(const std::vector<TraceNode>& nodes) {
  domain::Cluster cluster;
  cluster.name = "openb";
  cluster.region = "alibaba";
  std::vector<domain::Node> dn;
  dn.reserve(nodes.size());
  for (const TraceNode& n : nodes) {
    domain::Node d;
    d.name = n.name;
    d.cluster = cluster.name;
    d.rack = n.name;
    d.cpu_milli = n.cpu_milli;
    d.memory_mib = n.memory_mib;
    for (int32_t i = 0; i < n.gpus; ++i) {
      domain::GpuDevice g;
      g.uuid = n.name + "-gpu" + std::to_string(i);
      g.model = n.model;
      d.gpus.push_back(std::move(g));
    }
    dn.push_back(std::move(d));
  }
  return sched::Snapshot::Build({cluster}, dn, domain::GpuCatalog::Builtin());
}

std::vector<sched::TaskSpec> TasksFromTrace(const std::vector<TraceTask>& tasks,
                                            const sched::Snapshot& snapshot) {
  std::vector<sched::TaskSpec> out;
  out.reserve(tasks.size());
  for (const TraceTask& k : tasks) {
    sched::TaskSpec t;
    t.cpu_milli = k.cpu_milli;
    t.memory_mib = k.memory_mib;
    if (k.num_gpu > 0) {
      t.gpu_count = k.num_gpu;
      t.gpu_milli = k.gpu_milli;
      t.gpu_kind = k.gpu_milli >= 1000 ? sched::GpuKind::kWhole : sched::GpuKind::kFraction;
    }
    if (!k.gpu_spec.empty()) {
      t.allowed_models = 0;
      for (const std::string& m : k.gpu_spec) {
        sched::ModelId id = snapshot.FindModel(m);
        if (id != sched::kNoModel) t.allowed_models |= sched::Bit(id);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace meridian::sim
