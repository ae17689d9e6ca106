#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "domain/job.h"
#include "domain/spec.h"

namespace meridian::domain {

// What a job's tasks do when one exits non-zero, and how often it may run again (also after a
// lost node).
struct RestartPolicy {
  bool on_failure = false;  // restartPolicy on-failure; otherwise never
  int64_t max_restarts = 3;
};
// A task restarted in place waits 1, 2, 4 ... seconds before its n-th restart, at most this.
inline constexpr int kMaxRestartBackoffSeconds = 60;

// A job array (`spec.array`, Slurm's `--array`): the indices of its elements, as ranges, and how
// many of them may hold resources at once. The ranges are kept, not the indices, so that
// decoding one element's spec costs the same for an array of 16 as of 50,000.
struct ArraySpec {
  struct Range {
    int64_t first = 0;
    int64_t last = 0;
    int64_t step = 1;
  };
  std::vector<Range> ranges;  // in the order written; indices are distinct
  int64_t max_running = 0;    // `%N`; 0: no limit
  std::string text;           // as written, the canonical form

  int64_t Count() const;
  std::vector<int64_t> Indices() const;  // ascending
};

inline constexpr int64_t kMaxArrayElements = 100000;
inline constexpr int64_t kMaxArrayIndex = 9999999;

// "0-15", "1,3,5-7", "0-999:2", each with an optional "%N". Errors say what is wrong with the
// text (the caller names the field).
base::Result<ArraySpec> ParseArray(std::string_view text);

// One entry of `spec.dependencies` (Slurm's `--dependency`): a kind and the jobs it names. A job
// that is an array stands for all of its elements, as in Slurm.
enum class DependencyKind { kAfterOk, kAfterAny, kAfterNotOk, kAfterCorr };
struct Dependency {
  DependencyKind kind = DependencyKind::kAfterOk;
  std::vector<int64_t> jobs;
};
inline constexpr size_t kMaxDependencies = 64;  // entries, and jobs named by all of them

std::string_view DependencyKindName(DependencyKind kind);  // "afterok", ...
// "afterok:12:13": one kind and at least one job id.
base::Result<Dependency> ParseDependency(std::string_view text);
std::string DependencyText(const Dependency& dependency);  // back to "afterok:12:13"

// The spec of a job as its user wrote it (`spec:` of a Job document), decoded once. Every default
// is here, in the member initialisers, and nowhere else: the validator, the scheduler's view, the
// agent's assignment and the lifecycle all read this type. Times are seconds.
struct JobSpec {
  JobKind type = JobKind::kBatch;
  std::string priority_class;  // empty: the default class
  int32_t tasks = 1;
  GpuRequest gpu;  // per task: none, whole GPUs, a fraction or a MIG profile
  int64_t cpu_milli = 1000;
  int64_t memory_mib = 4096;
  std::vector<std::string> gpu_models;
  std::vector<std::string> clusters;
  std::map<std::string, std::string> node_selector;  // labels every node of the job must carry
  std::vector<Toleration> tolerations;               // node taints it may run on
  bool gang = false;                                 // default: true when tasks > 1
  double runtime_estimate = 0;                       // 0: unknown
  double runtime_limit = 0;                          // 0: none
  bool preemptible = true;
  double min_runtime = 0;    // not preempted before it has run this long
  double grace_period = 30;  // from the stop notice to SIGKILL (SIGTERM half-way)
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string image;  // empty: the command runs on the node itself
  std::string working_dir;
  // `spec.ports`: ports the task serves on its node (a notebook, a shell server, TensorBoard),
  // which `meridian port-forward` reaches; `submit` and `describe` say how.
  std::vector<int64_t> ports;
  RestartPolicy restart;
  // Sent with the notice file when the task is to stop: none, SIGUSR1, SIGUSR2, SIGHUP, SIGINT.
  std::string notice_signal = "none";
  double simulate_utilization = 0.5;  // on simulated GPUs, what the task reports while it runs
  // The job's own labels (`spec.labels`): what policies select or exempt it by, e.g. the label an
  // IdlePolicy lets a project's jobs carry to be left alone (domain/idle_policy.h).
  std::map<std::string, std::string> labels;
  // `spec.array`: submitted as one array of elements, each a job of this spec (its element's
  // index in MERIDIAN_ARRAY_INDEX).
  std::optional<ArraySpec> array;
  // `spec.dependencies`: what must have happened to other jobs before this one may be queued.
  std::vector<Dependency> dependencies;
  // `spec.datasets`: the Dataset documents the tasks read, each at a stable path
  // (MERIDIAN_DATASET_<NAME>); placement counts what bringing them costs (docs/adr/0044).
  std::vector<std::string> datasets;
  // `spec.checkpoint`: a folder on the site's shared filesystem that outlives requeues and
  // preemptions (MERIDIAN_CHECKPOINT_DIR).
  bool checkpoint = false;
};

// Bounds on what one spec may hold, so that no tenant can make the server keep (and send to
// agents) megabytes per job.
inline constexpr size_t kMaxEnvVars = 1024;
inline constexpr size_t kMaxCommandArgs = 4096;
inline constexpr size_t kMaxSpecTextBytes = 128 * 1024;  // env and command, each

// Reads a job's spec through `reader`: checks types, ranges and the rules between fields,
// writes the canonical form (with defaults) to the reader's output, and returns the typed value.
// Errors go to the reader's list, named by field.
JobSpec ReadJobSpec(FieldReader& reader);

// A spec in canonical form (as stored) back to its type, through the same reader. A stored spec
// that no longer validates (a corrupted row, a field a later version removed) is an error that
// names the field.
base::Result<JobSpec> DecodeJobSpec(const Json& spec);

// The scheduler's view of the job: one task group of `tasks` replicas with the spec's request
// and constraints.
Job JobOfSpec(const std::string& name, const std::string& project, const JobSpec& spec);

}  // namespace meridian::domain
