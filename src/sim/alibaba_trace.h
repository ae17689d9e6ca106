#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "domain/cluster.h"
#include "sched/snapshot.h"
#include "sched/task.h"

namespace meridian::sim {

// Readers for Alibaba's GPU-sharing trace of 2023 ("openb", cluster-trace-gpu-v2023), the trace of
// the FGD paper. See ../shared/traces/README.md for its columns.

struct TraceNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t gpus = 0;
  std::string model;  // empty for CPU-only nodes
};

struct TraceTask {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;              // per GPU; below 1000 only when num_gpu is 1
  std::vector<std::string> gpu_spec;  // allowed models; empty: any
  std::string qos;
  std::string phase;
  int64_t creation_time = 0;
  int64_t deletion_time = -1;   // -1 when the trace leaves it empty
  int64_t scheduled_time = -1;  // -1 when the trace leaves it empty
};

// Parse the CSV text of a node list or a task list; `file` names it in errors, which read
// "file:line:column: what is wrong". Columns are found by their header names, in any order.
base::Result<std::vector<TraceNode>> ParseAlibabaNodes(std::string_view text,
                                                       std::string_view file);
base::Result<std::vector<TraceTask>> ParseAlibabaTasks(std::string_view text,
                                                       std::string_view file);
base::Result<std::vector<TraceNode>> ReadAlibabaNodes(const std::string& path);
base::Result<std::vector<TraceTask>> ReadAlibabaTasks(const std::string& path);

// One on-prem cluster ("openb") holding the trace's nodes, one rack each, GPUs in one NVLink
// domain per node.
void EstateFromTrace(const std::vector<TraceNode>& nodes, domain::Cluster* cluster,
                     std::vector<domain::Node>* out);
base::Result<sched::Snapshot> SnapshotFromTrace(const std::vector<TraceNode>& nodes);
// A task of `gpus` GPUs taking `gpu_milli` of each (fractions below 1000), on any of `models`
// (all when empty; names the snapshot lacks match nothing). Shared by every trace reader.
sched::TaskSpec GpuTaskSpec(int64_t cpu_milli, int64_t memory_mib, int32_t gpus, int32_t gpu_milli,
                            const std::vector<std::string>& models,
                            const sched::Snapshot& snapshot);

// Each trace task as a placement request against `snapshot`.
std::vector<sched::TaskSpec> TasksFromTrace(const std::vector<TraceTask>& tasks,
                                            const sched::Snapshot& snapshot);

base::Result<std::string> ReadFile(const std::string& path);

}  // namespace meridian::sim
