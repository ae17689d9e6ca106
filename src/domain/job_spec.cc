#include "domain/job_spec.h"

#include "domain/gpu_model.h"
#include "domain/workload.h"

namespace meridian::domain {

namespace {

constexpr int64_t kMaxGpusPerTask = 64;
constexpr double kMaxSeconds = 365.0 * 24 * 3600;

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

}  // namespace

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
  j.runtime_estimate = s.Number("runtimeEstimate", 0, kMaxSeconds, d.runtime_estimate);
  j.runtime_limit = s.Number("runtimeLimit", 0, kMaxSeconds, d.runtime_limit);
  if (j.runtime_limit > 0 && j.runtime_estimate > j.runtime_limit) {
    s.Error("runtimeEstimate", "must not exceed runtimeLimit");
  }
  j.preemptible = s.Bool("preemptible", d.preemptible);
  j.min_runtime = s.Number("minRuntime", 0, kMaxSeconds, d.min_runtime);
  j.grace_period = s.Number("gracePeriod", 0, 3600, d.grace_period);
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
  j.restart.on_failure = s.Enum("restartPolicy", {"never", "on-failure"},
                                d.restart.on_failure ? "on-failure" : "never") == "on-failure";
  j.restart.max_restarts = s.Int("maxRestarts", 0, 100, d.restart.max_restarts);
  // The task may checkpoint when it gets the notice, before SIGTERM comes half its grace later.
  j.notice_signal =
      s.Enum("noticeSignal", {"none", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT"}, d.notice_signal);
  j.simulate_utilization = s.Number("simulateUtilization", 0, 1, d.simulate_utilization);
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
  TaskGroup g;
  g.replicas = spec.tasks;
  g.request.cpu_milli = spec.cpu_milli;
  g.request.memory_mib = spec.memory_mib;
  g.request.gpu = spec.gpu;
  j.task_groups.push_back(std::move(g));
  return j;
}

}  // namespace meridian::domain
