#pragma once

#include <cstdint>
#include <map>
#include <string>
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
  RestartPolicy restart;
  // Sent with the notice file when the task is to stop: none, SIGUSR1, SIGUSR2, SIGHUP, SIGINT.
  std::string notice_signal = "none";
  double simulate_utilization = 0.5;  // on simulated GPUs, what the task reports while it runs
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
