#include "domain/job_spec.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "domain/gpu_model.h"
#include "domain/workload.h"

namespace meridian::domain {

namespace {

constexpr int64_t kMaxGpusPerTask = 64;
constexpr double kMaxSpecSeconds = 365.0 * 24 * 3600;

bool KnownMigProfile(const std::string& profile) {
  for (const GpuModel& m : GpuCatalog::Builtin().models()) {
    if (m.FindMigProfile(profile)) return true;
  }
  return false;
}

// A GPU request is one of gpus, gpuMilli and migProfile. A zero (or empty) value is no
// request: the canonical form writes every field, and reads back the same.
GpuRequest ReadGpuRequest(FieldReader& s) {
  const int64_t gpus = s.Int("gpus", 0, kMaxGpusPerTask, 0);
  const int64_t milli = s.Int("gpuMilli", 0, 999, 0);
  const int64_t memory = s.Int("gpuMemoryMib", 0, 1LL << 30, 0);
  const bool mig = s.Has("migProfile");
  const std::string profile = s.String("migProfile", false);
  if ((gpus > 0) + (milli > 0) + !profile.empty() > 1) {
    s.Error("gpus", "give only one of gpus, gpuMilli and migProfile");
  }
  if (memory > 0 && milli == 0) {
    s.Error("gpuMemoryMib", "applies only to a fraction of a GPU (gpuMilli)");
  }
  if (mig && !KnownMigProfile(profile)) {
    s.Error("migProfile", "\"" + profile + "\" is not a MIG profile of any known GPU model");
  }
  if (gpus > 0) return GpuRequest::Whole(static_cast<int32_t>(gpus));
  if (milli > 0) return GpuRequest::Fraction(static_cast<int32_t>(milli), memory);
  if (!profile.empty()) return GpuRequest::Mig(profile);
  return GpuRequest::None();
}

// Bounds the text a list or a map of strings holds (count and bytes), so one spec stays small.
void Bound(FieldReader& s, const char* key, size_t count, size_t max_count, size_t bytes) {
  if (count > max_count) {
    s.Error(key, "has " + std::to_string(count) + " entries; at most " + std::to_string(max_count) +
                     " are allowed");
  } else if (bytes > kMaxSpecTextBytes) {
    s.Error(key, "holds " + std::to_string(bytes) + " bytes; at most " +
                     std::to_string(kMaxSpecTextBytes) + " are allowed");
  }
}

// A whole non-negative decimal number, the whole of `text`.
std::optional<int64_t> Whole(std::string_view text) {
  int64_t v = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

base::Status BadArray(std::string_view text, const std::string& why) {
  return base::Status::Invalid("\"" + std::string(text) + "\" is not an array (" + why +
                               "; e.g. 0-15, 1,3,5-7, 0-999:2, 0-999%50)");
}

void ReadDependencies(FieldReader& s, JobSpec* j) {
  const std::vector<std::string> texts = s.StringList("dependencies");
  size_t named = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string key = "dependencies[" + std::to_string(i) + "]";
    auto d = ParseDependency(texts[i]);
    if (!d.ok()) {
      s.Error(key, d.status().message());
      continue;
    }
    named += d->jobs.size();
    j->dependencies.push_back(std::move(d.value()));
  }
  if (named > kMaxDependencies) {
    s.Error("dependencies", "names " + std::to_string(named) + " jobs; at most " +
                                std::to_string(kMaxDependencies) + " are allowed");
  }
}

}  // namespace

int64_t ArraySpec::Count() const {
  int64_t n = 0;
  for (const Range& r : ranges) n += (r.last - r.first) / r.step + 1;
  return n;
}

std::vector<int64_t> ArraySpec::Indices() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(Count()));
  for (const Range& r : ranges) {
    for (int64_t i = r.first; i <= r.last; i += r.step) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

base::Result<ArraySpec> ParseArray(std::string_view text) {
  ArraySpec a;
  a.text = std::string(text);
  std::string_view list = text;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    auto n = Whole(text.substr(pct + 1));
    if (!n || *n < 1) return BadArray(text, "%N needs a whole number of at least 1");
    a.max_running = *n;
    list = text.substr(0, pct);
  }
  if (list.empty()) return BadArray(text, "no indices");
  int64_t count = 0;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string_view part = list.substr(start, comma - start);
    start = comma + 1;
    ArraySpec::Range r;
    if (const size_t colon = part.find(':'); colon != std::string_view::npos) {
      auto step = Whole(part.substr(colon + 1));
      if (!step || *step < 1) return BadArray(text, "a step needs a whole number of at least 1");
      r.step = *step;
      part = part.substr(0, colon);
    }
    const size_t dash = part.find('-');
    auto first = Whole(part.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : Whole(part.substr(dash + 1));
    if (!first || !last) return BadArray(text, "\"" + std::string(part) + "\" is not N or N-M");
    if (*last < *first) return BadArray(text, "a range must not run backwards");
    if (*last > kMaxArrayIndex) {
      return BadArray(text, "indices go up to " + std::to_string(kMaxArrayIndex));
    }
    r.first = *first;
    r.last = *last - (*last - *first) % r.step;  // the last index the step reaches
    count += (r.last - r.first) / r.step + 1;
    if (count > kMaxArrayElements) {
      return BadArray(text, "more than " + std::to_string(kMaxArrayElements) + " elements");
    }
    a.ranges.push_back(r);
    if (comma == list.size()) break;
  }
  // Indices must be distinct (each names one element): ranges must not overlap. Checked on the
  // ranges, not the indices, since every element's spec is decoded with its array.
  std::vector<ArraySpec::Range> sorted = a.ranges;
  std::sort(sorted.begin(), sorted.end(),
            [](const ArraySpec::Range& x, const ArraySpec::Range& y) { return x.first < y.first; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].first <= sorted[i - 1].last) return BadArray(text, "ranges overlap");
  }
  return a;
}

std::string_view DependencyKindName(DependencyKind kind) {
  switch (kind) {
    case DependencyKind::kAfterOk:
      return "afterok";
    case DependencyKind::kAfterAny:
      return "afterany";
    case DependencyKind::kAfterNotOk:
      return "afternotok";
    case DependencyKind::kAfterCorr:
      return "aftercorr";
  }
  return "afterok";
}

base::Result<Dependency> ParseDependency(std::string_view text) {
  const std::string shown = "\"" + std::string(text) + "\"";
  const size_t colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  Dependency d;
  bool known = false;
  for (DependencyKind k : {DependencyKind::kAfterOk, DependencyKind::kAfterAny,
                           DependencyKind::kAfterNotOk, DependencyKind::kAfterCorr}) {
    if (kind == DependencyKindName(k)) {
      d.kind = k;
      known = true;
    }
  }
  if (!known) {
    return base::Status::Invalid(shown +
                                 ": the kind must be afterok, afterany, afternotok or aftercorr");
  }
  if (colon == std::string_view::npos) {
    return base::Status::Invalid(shown + ": name at least one job, e.g. " + std::string(kind) +
                                 ":12");
  }
  size_t start = colon + 1;
  while (start <= text.size()) {
    const size_t next = std::min(text.find(':', start), text.size());
    auto id = Whole(text.substr(start, next - start));
    if (!id || *id < 1) {
      return base::Status::Invalid(shown + ": \"" + std::string(text.substr(start, next - start)) +
                                   "\" is not a job id");
    }
    d.jobs.push_back(*id);
    start = next + 1;
    if (next == text.size()) break;
  }
  return d;
}

std::string DependencyText(const Dependency& d) {
  std::string out(DependencyKindName(d.kind));
  for (int64_t id : d.jobs) out += ":" + std::to_string(id);
  return out;
}

JobSpec ReadJobSpec(FieldReader& s) {
  const JobSpec d;  // the defaults
  JobSpec j;
  j.type = ParseJobKind(s.Enum("type", {"batch", "training", "inference", "interactive"},
                               JobKindName(d.type)))
               .value_or(d.type);
  j.priority_class = s.Name("priorityClass", false);
  j.tasks = static_cast<int32_t>(s.Int("tasks", 1, 10000, d.tasks));
  j.gpu = ReadGpuRequest(s);
  j.cpu_milli = s.Int("cpuMilli", 1, 1LL << 30, d.cpu_milli);
  j.memory_mib = s.Int("memoryMib", 1, 1LL << 30, d.memory_mib);
  j.gpu_models = s.StringList("gpuModels");
  j.clusters = s.StringList("clusters");
  j.node_selector = s.StringMap("nodeSelector");
  s.ObjectList("tolerations", [&](FieldReader& t) {
    Toleration tol;
    tol.key = t.String("key", true);
    if (tol.key.empty() && t.Has("key")) t.Error("key", "must not be empty");
    tol.value = t.String("value", false);
    j.tolerations.push_back(std::move(tol));
  });
  j.gang = s.Bool("gang", j.tasks > 1);
  j.runtime_estimate = s.Duration("runtimeEstimate", 0, kMaxSpecSeconds, d.runtime_estimate);
  j.runtime_limit = s.Duration("runtimeLimit", 0, kMaxSpecSeconds, d.runtime_limit);
  if (j.runtime_limit > 0 && j.runtime_estimate > j.runtime_limit) {
    s.Error("runtimeEstimate", "must not exceed runtimeLimit");
  }
  j.preemptible = s.Bool("preemptible", d.preemptible);
  j.min_runtime = s.Duration("minRuntime", 0, kMaxSpecSeconds, d.min_runtime);
  j.grace_period = s.Duration("gracePeriod", 0, 3600, d.grace_period);
  j.command = s.StringList("command");
  size_t bytes = 0;
  for (const std::string& a : j.command) bytes += a.size();
  Bound(s, "command", j.command.size(), kMaxCommandArgs, bytes);
  j.env = s.StringMap("env");
  bytes = 0;
  for (const auto& [k, v] : j.env) bytes += k.size() + v.size();
  Bound(s, "env", j.env.size(), kMaxEnvVars, bytes);
  j.image = s.String("image", false);
  j.working_dir = s.String("workingDir", false);
  j.ports = s.IntList("ports", 1, 65535);
  Bound(s, "ports", j.ports.size(), 16, 0);
  j.restart.on_failure = s.Enum("restartPolicy", {"never", "on-failure"},
                                d.restart.on_failure ? "on-failure" : "never") == "on-failure";
  j.restart.max_restarts = s.Int("maxRestarts", 0, 100, d.restart.max_restarts);
  // The task may checkpoint when it gets the notice, before SIGTERM comes half its grace later.
  j.notice_signal =
      s.Enum("noticeSignal", {"none", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT"}, d.notice_signal);
  j.simulate_utilization = s.Number("simulateUtilization", 0, 1, d.simulate_utilization);
  j.labels = s.StringMap("labels");
  size_t label_bytes = 0;
  for (const auto& [k, v] : j.labels) label_bytes += k.size() + v.size();
  Bound(s, "labels", j.labels.size(), 64, label_bytes);
  if (s.Has("array")) {
    const std::string text = s.String("array", false);
    auto a = ParseArray(text);
    if (a.ok()) {
      j.array = std::move(a.value());
    } else {
      s.Error("array", a.status().message());
    }
  }
  ReadDependencies(s, &j);
  const std::vector<std::string> datasets = s.StringList("datasets");
  for (size_t i = 0; i < datasets.size(); ++i) {
    if (!IsValidName(datasets[i])) {
      s.Error("datasets[" + std::to_string(i) + "]",
              "\"" + datasets[i] + "\" is not a dataset name (lowercase letters, digits, '-')");
    } else if (std::find(j.datasets.begin(), j.datasets.end(), datasets[i]) == j.datasets.end()) {
      j.datasets.push_back(datasets[i]);
    }
  }
  Bound(s, "datasets", j.datasets.size(), 16, 0);
  j.checkpoint = s.Bool("checkpoint", d.checkpoint);
  return j;
}

base::Result<JobSpec> DecodeJobSpec(const Json& spec) {
  const SourceDoc doc{spec, "stored job spec", {}};
  ErrorList errors;
  Json canonical;
  FieldReader reader(doc, spec, "spec", &errors, &canonical);
  JobSpec out = ReadJobSpec(reader);
  reader.Finish();
  if (!errors.empty()) return base::Status::Invalid(errors.ToString());
  return out;
}

Job JobOfSpec(const std::string& name, const std::string& project, const JobSpec& spec) {
  Job j;
  j.name = name;
  j.kind = spec.type;
  j.project = project;
  j.priority_class = spec.priority_class;
  j.gang = spec.gang;
  j.constraints.clusters = spec.clusters;
  j.constraints.gpu_models = spec.gpu_models;
  j.constraints.node_labels = spec.node_selector;
  j.constraints.tolerations = spec.tolerations;
  j.runtime_estimate_s = static_cast<int64_t>(spec.runtime_estimate);
  j.runtime_limit_s = static_cast<int64_t>(spec.runtime_limit);
  j.preemptible = spec.preemptible;
  j.datasets = spec.datasets;
  j.constraints.checkpoint = spec.checkpoint;
  j.constraints.image = !spec.image.empty();
  TaskGroup g;
  g.replicas = spec.tasks;
  g.request.cpu_milli = spec.cpu_milli;
  g.request.memory_mib = spec.memory_mib;
  g.request.gpu = spec.gpu;
  j.task_groups.push_back(std::move(g));
  return j;
}

}  // namespace meridian::domain
