#include "domain/job.h"

namespace meridian::domain {

int32_t Job::TaskCount() const {
  int32_t n = 0;
  for (const TaskGroup& g : task_groups) n += g.replicas;
  return n;
}

namespace {

base::Status Invalid(const std::string& field, const std::string& why) {
  return base::Status::Invalid(field + ": " + why);
}

base::Status ValidateGpu(const GpuRequest& gpu, const std::string& field,
                         const GpuCatalog& catalog) {
  switch (gpu.kind) {
    case GpuRequest::Kind::kNone:
      return base::Status::Ok();
    case GpuRequest::Kind::kWhole:
      if (gpu.count < 1 || gpu.count > 64) {
        return Invalid(field + ".count",
                       "must be between 1 and 64, got " + std::to_string(gpu.count));
      }
      return base::Status::Ok();
    case GpuRequest::Kind::kFraction:
      if (gpu.milli < 0 || gpu.milli >= kMilliPerGpu) {
        return Invalid(field + ".milli", "a fraction must be between 1 and 999 milli-GPU, got " +
                                             std::to_string(gpu.milli));
      }
      if (gpu.memory_mib < 0) return Invalid(field + ".memory_mib", "must not be negative");
      if (gpu.milli == 0 && gpu.memory_mib == 0) {
        return Invalid(field, "a fraction needs milli-GPU, GPU memory or both");
      }
      return base::Status::Ok();
    case GpuRequest::Kind::kMig: {
      for (const GpuModel& m : catalog.models()) {
        if (m.FindMigProfile(gpu.mig_profile)) return base::Status::Ok();
      }
      return Invalid(field + ".mig_profile",
                     "no known GPU model has MIG profile \"" + gpu.mig_profile + "\"");
    }
  }
  return Invalid(field, "unknown kind");
}

}  // namespace

base::Status ValidateJob(const Job& job, const GpuCatalog& catalog) {
  if (job.name.empty()) return Invalid("name", "must not be empty");
  if (job.task_groups.empty()) return Invalid("task_groups", "a job needs at least one group");
  if (job.runtime_limit_s < 0) return Invalid("runtime_limit_s", "must not be negative");
  if (job.runtime_estimate_s < 0) return Invalid("runtime_estimate_s", "must not be negative");
  for (size_t i = 0; i < job.task_groups.size(); ++i) {
    const TaskGroup& g = job.task_groups[i];
    std::string field = "task_groups[" + std::to_string(i) + "]";
    if (g.replicas < 1) return Invalid(field + ".replicas", "must be at least 1");
    if (g.request.cpu_milli < 0)
      return Invalid(field + ".request.cpu_milli", "must not be negative");
    if (g.request.memory_mib < 0) {
      return Invalid(field + ".request.memory_mib", "must not be negative");
    }
    base::Status s = ValidateGpu(g.request.gpu, field + ".request.gpu", catalog);
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < job.constraints.gpu_models.size(); ++i) {
    if (job.constraints.gpu_models[i].empty()) {
      return Invalid("constraints.gpu_models[" + std::to_string(i) + "]", "must not be empty");
    }
  }
  return base::Status::Ok();
}

}  // namespace meridian::domain
