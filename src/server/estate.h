#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/api.h"
#include "base/status.h"
#include "domain/agent_timing.h"
#include "domain/cluster.h"
#include "domain/gpu_health.h"
#include "domain/gpu_warnings.h"
#include "domain/workload.h"
#include "sched/assembly.h"
#include "sched/quota.h"
#include "sched/scheduler.h"
#include "sched/snapshot.h"
#include "store/store.h"

namespace meridian::server {

using Json = nlohmann::json;

// What a pool gives every node in it, declared or registered: its purpose (which types of job
// it runs), its labels and its taints.
struct PoolTraits {
  domain::PoolPurpose purpose = domain::PoolPurpose::kAny;
  domain::GpuSharing gpu_sharing = domain::GpuSharing::kMps;
  std::map<std::string, std::string> labels;
  std::vector<domain::Taint> taints;
};

// A NodePool that a provisioner grows and shrinks between its bounds (server/elastic_pools.h).
struct ElasticPoolSpec {
  std::string name;
  std::string cluster;
  std::string region;  // the pool's, or its cluster's
  std::string provisioner;
  domain::Node shape;  // a new node: the pool's shape and traits
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  bool spot = false;
  double boot_seconds = 60;
  double idle_timeout = 600;
  double join_timeout = 120;      // an instance not registered by then is deleted
  double price_per_gpu_hour = 0;  // spot or on-demand as the pool is; else its cluster's
  double speed = 1;               // its cluster's speedFactors for its model
};

// The scheduler's inputs built from the live desired state: the estate's capacity (clusters;
// nodes that agents registered, and nodes that node pools declare with `nodes: N`, which no
// agent runs), the quota tree, the priority classes and the policy.
struct Estate {
  std::vector<domain::Cluster> clusters;
  // The Dataset documents, by name; their locations are in the clusters' dataset lists too.
  std::map<std::string, domain::Dataset> datasets;
  // Copies staged into sites' caches (DatasetCopy objects): local to the data score.
  std::vector<domain::DatasetCopy> copies;
  // As built (plus nodes that joined since): names, devices and pools for the API and the
  // allocations. Whether a node is schedulable now is the scheduler's snapshot's to say.
  std::vector<domain::Node> nodes;
  // One node of each pool's declared shape: what agents may still register into it, for the
  // check at submission that something could ever hold a job (domain/admission.h).
  std::vector<domain::Node> pool_shapes;
  std::map<std::string, std::string> agent_address;  // registered node -> its agent's address
  std::map<std::string, PoolTraits> pool_traits;     // by pool name
  std::vector<ElasticPoolSpec> elastic_pools;
  // Each cluster's `speedFactors`: how fast a job runs on a model there, relative to 1.
  std::map<std::string, std::map<std::string, double>> speed_factors;
  sched::Snapshot snapshot;
  sched::QuotaTree quotas;
  std::map<std::string, int32_t> tenant_of_project;
  std::map<std::string, int32_t> priority_of_class;
  std::map<std::string, bool> preempting_of_class;
  sched::SchedulerOptions options;
  std::string placement = "meridian";
  double cycle_interval = 1.0;
  double heartbeat_interval = domain::AgentTiming{}.heartbeat_interval;  // what agents are told
  // A registered node silent this long is lost.
  double node_lost_timeout = domain::AgentTiming{}.node_lost_timeout;
  // What agents are told: how long their tasks run on without reaching the server, and the most
  // a task gets between SIGTERM and SIGKILL once that lease has run out (domain/agent_timing.h).
  double agent_lease = domain::AgentTiming{}.agent_lease;
  double fence_grace = domain::AgentTiming{}.fence_grace;
  // The Policy's gpuHealth: the remediation agents run on faulted GPUs, and the repeat limit.
  domain::GpuHealthPolicy gpu_health;
  // The Policy's gpuWarnings and failingNodes (domain/gpu_warnings.h).
  domain::GpuWarningPolicy gpu_warnings;
  domain::FailingNodePolicy failing_nodes;
  // Objects left out (a node of an unknown cluster) or taken in part (a project of an unknown
  // team, a root of the quota tree then), each with why: one bad object never stops the rest.
  std::vector<api::ConfigProblem> problems;

  bool Registered(const std::string& node) const { return agent_address.count(node) > 0; }
};

// Builds the estate from the live objects. An object that cannot be scheduled (a node or pool
// of a cluster that does not exist, a node whose GPUs the scheduler refuses) is left out and
// named in Estate::problems; an error only when the estate as a whole is beyond the
// scheduler's limits (more than 64 clusters or GPU models).
base::Result<std::unique_ptr<Estate>> BuildEstate(const std::vector<store::Object>& objects);

// How the server assembles its scheduler from the estate (sched/assembly.h): the Policy's
// placement and options, and stops that wait for their runners' word.
sched::Assembly AssemblyOf(const Estate& estate);

// A DatasetCopy object (server/nodes_data.cc writes it) as the copy it records.
domain::DatasetCopy CopyOfObject(const store::Object& o);
Json CopySpec(const domain::DatasetCopy& c);

// A node an agent registered (server/nodes.cc writes the spec); not schedulable unless Ready.
domain::Node NodeOfObject(const store::Object& o);
// Whether two versions of a node have the same hardware: everything but its traits (purpose,
// labels, taints) and its schedulability.
bool SameHardware(const domain::Node& a, const domain::Node& b);
// Gives a node its pool's purpose, labels and taints (the node's own labels win).
void ApplyPoolTraits(const Estate& estate, domain::Node* node);

// A stored job as the scheduler sees it; an error names what no longer exists (its project).
base::Result<sched::JobSpec> ToSchedulerJob(const store::JobRecord& job, const Estate& estate);

// A job's placements as stored in its allocation, and back. The stored form names clusters,
// nodes and GPUs (index within the node, UUID) so that it stays meaningful to people and agents,
// and with what accounting reads when the run ends (api/usage.h): each task's pool, model, GPU
// share, price of a GPU-hour, and `placed_at`.
Json AllocationToJson(const std::vector<sched::Placement>& placements, const Estate& estate,
                      double placed_at);
// The MIG layout changes a start carries out (sched::StartDecision::layout_changes), marked on
// the allocation's devices ("mig": {"change": ...}, or "change": "disable-mig") for the agent and
// views; returns them in words for the job's Placed event ("GPU 0 of n1 into MIG mode for
// 1g.10gb"), empty when there are none.
std::string MarkLayoutChanges(const std::vector<sched::DeviceGrant>& changes, const Estate& estate,
                              Json* allocation);
base::Result<std::vector<sched::Placement>> AllocationFromJson(const Json& allocation,
                                                               const Estate& estate);

}  // namespace meridian::server
