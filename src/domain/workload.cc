#include "domain/workload.h"

namespace meridian::domain {

const char* JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kTraining:
      return "training";
    case JobKind::kInference:
      return "inference";
    case JobKind::kInteractive:
      return "interactive";
    case JobKind::kBatch:
      return "batch";
  }
  return "batch";
}

std::optional<JobKind> ParseJobKind(std::string_view name) {
  for (JobKind k :
       {JobKind::kTraining, JobKind::kInference, JobKind::kInteractive, JobKind::kBatch}) {
    if (name == JobKindName(k)) return k;
  }
  return std::nullopt;
}

const char* PoolPurposeName(PoolPurpose purpose) {
  switch (purpose) {
    case PoolPurpose::kAny:
      return "any";
    case PoolPurpose::kTraining:
      return "training";
    case PoolPurpose::kInference:
      return "inference";
    case PoolPurpose::kInteractive:
      return "interactive";
  }
  return "any";
}

std::optional<PoolPurpose> ParsePoolPurpose(std::string_view name) {
  for (PoolPurpose p : {PoolPurpose::kAny, PoolPurpose::kTraining, PoolPurpose::kInference,
                        PoolPurpose::kInteractive}) {
    if (name == PoolPurposeName(p)) return p;
  }
  return std::nullopt;
}

const char* GpuSharingName(GpuSharing sharing) {
  switch (sharing) {
    case GpuSharing::kMps:
      return "mps";
    case GpuSharing::kTimeSlicing:
      return "time-slicing";
    case GpuSharing::kExclusive:
      return "exclusive";
  }
  return "mps";
}

std::optional<GpuSharing> ParseGpuSharing(std::string_view name) {
  for (GpuSharing s : {GpuSharing::kMps, GpuSharing::kTimeSlicing, GpuSharing::kExclusive}) {
    if (name == GpuSharingName(s)) return s;
  }
  return std::nullopt;
}

bool PoolServes(PoolPurpose purpose, JobKind kind) {
  switch (purpose) {
    case PoolPurpose::kAny:
      return true;
    case PoolPurpose::kTraining:
      return kind == JobKind::kTraining || kind == JobKind::kBatch;
    case PoolPurpose::kInference:
      return kind == JobKind::kInference;
    case PoolPurpose::kInteractive:
      return kind == JobKind::kInteractive;
  }
  return false;
}

}  // namespace meridian::domain
