#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "domain/gpu_model.h"

namespace meridian::domain {

inline constexpr int32_t kMilliPerGpu = 1000;

// What one task asks of a GPU: nothing, whole GPUs, a fraction of one GPU (milli-GPU and/or GPU
// memory) or one MIG instance of a named profile.
struct GpuRequest {
  enum class Kind { kNone, kWhole, kFraction, kMig };
  Kind kind = Kind::kNone;
  int32_t count = 0;        // kWhole: number of GPUs; 1 for kFraction and kMig
  int32_t milli = 0;        // kFraction: share of compute, 1..999
  int64_t memory_mib = 0;   // kFraction: GPU memory wanted (0: not constrained)
  std::string mig_profile;  // kMig

  static GpuRequest None() { return {}; }
  static GpuRequest Whole(int32_t n) { return {Kind::kWhole, n, kMilliPerGpu, 0, {}}; }
  static GpuRequest Fraction(int32_t milli, int64_t memory_mib = 0) {
    return {Kind::kFraction, 1, milli, memory_mib, {}};
  }
  static GpuRequest Mig(std::string profile) { return {Kind::kMig, 1, 0, 0, std::move(profile)}; }
};

struct Request {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  GpuRequest gpu;
};

struct Toleration {
  std::string key;
  std::string value;  // empty: tolerates any value of the key
};

// Where a job may run. Empty lists mean "anywhere".
struct Constraints {
  std::vector<std::string> clusters;
  std::vector<std::string> regions;
  std::vector<std::string> gpu_models;
  std::map<std::string, std::string> node_labels;
  std::vector<Toleration> tolerations;
  bool on_prem_only = false;
  bool checkpoint = false;  // only clusters that keep checkpoints (storage.checkpoints)
  bool image = false;       // runs in a container: only clusters whose back end runs images
};

struct TaskGroup {
  std::string name;
  int32_t replicas = 1;
  Request request;
};

enum class JobKind { kTraining, kInference, kInteractive, kBatch };

struct Job {
  std::string name;
  JobKind kind = JobKind::kBatch;
  std::string project;
  std::string user;
  std::string priority_class;
  bool gang = false;  // all tasks placed together in one cluster, or none
  Constraints constraints;
  std::vector<std::string> datasets;  // what its tasks read (Dataset names)
  int64_t runtime_estimate_s = 0;
  int64_t runtime_limit_s = 0;  // 0: no limit
  bool preemptible = true;
  std::vector<TaskGroup> task_groups;

  int32_t TaskCount() const;
};

// Checks a job against the rules every later stage relies on; the message names the field
// ("task_groups[1].request.gpu.milli: ...").
base::Status ValidateJob(const Job& job, const GpuCatalog& catalog);

}  // namespace meridian::domain
