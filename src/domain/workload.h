#pragma once

#include <optional>
#include <string_view>

#include "domain/cluster.h"
#include "domain/job.h"

namespace meridian::domain {

// The names documents use for job types and pool purposes ("training", "inference", ...).
const char* JobKindName(JobKind kind);
std::optional<JobKind> ParseJobKind(std::string_view name);
const char* PoolPurposeName(PoolPurpose purpose);
std::optional<PoolPurpose> ParsePoolPurpose(std::string_view name);
// "mps", "time-slicing", "exclusive" (a NodePool's gpuSharing).
const char* GpuSharingName(GpuSharing sharing);
std::optional<GpuSharing> ParseGpuSharing(std::string_view name);

// Whether the nodes of a pool of `purpose` may run work of `kind`. A pool of purpose `any` runs
// every kind; a training, inference or interactive pool runs jobs of its own type, and a
// training pool also runs batch jobs: batch work (evaluation, preprocessing, offline scoring) is
// throughput work that fits between training runs, while inference and interactive pools are
// kept free for work that someone is waiting on. A job without a type is a batch job, so it runs
// wherever it ran before pools had purposes, as long as the pool is not kept for inference or
// interactive work (see docs/adr/0008-workload-pools.md).
bool PoolServes(PoolPurpose purpose, JobKind kind);

}  // namespace meridian::domain
