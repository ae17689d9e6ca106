#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/api.h"
#include "base/clock.h"
#include "domain/gpu_warnings.h"
#include "domain/lifecycle.h"
#include "domain/node_ops.h"
#include "protocol/agent_protocol.h"
#include "server/backend.h"
#include "server/estate.h"
#include "store/store.h"

namespace meridian::server {

// A registration (protocol::Registration) as the Node object it describes, failing with the
// field's name; the GPUs of one node must be of one known model.
base::Result<store::Object> NodeFromRegistration(const Json& body);

// A job's restart policy; a spec that no longer decodes (a damaged row) restarts by the
// defaults, so that its reports, its node's loss and its GPU's faults still move the job.
domain::RestartPolicy RestartOf(const store::JobRecord& job);

// Every job holding resources (Placed, Running, Stopping) with a task on one of `nodes`.
base::Result<std::vector<store::JobRecord>> JobsHolding(store::Tx& tx,
                                                        const std::set<std::string>& nodes);

// Asks `job` (holding resources on a node being drained) to stop and be requeued, within
// `deadline`, with `reason` and a Drained event, in `tx`. Returns the last event's sequence, 0
// when the job was stopping already for as strong a reason (nothing written).
base::Result<int64_t> DrainJob(store::Tx& tx, store::JobRecord* job, const std::string& reason,
                               double deadline, double now);

// The side of the server that node agents talk to.
//
// Agents register their node (stored as a `Node` object, which the scheduler's estate is built
// from), then heartbeat. A heartbeat carries telemetry and what each task did; it is answered
// with every task that should be on the node (the assignments, level-triggered: an agent runs
// what is listed and stops what is not). Task reports move jobs: Placed -> Running when a task
// starts, Succeeded when all exited 0, Failed when one failed for good, and a preempted job
// (Stopping) back to Pending once all its tasks stopped. Reports of another generation than the
// job's are ignored: the task is not listed, so its agent stops it (fencing).
//
// A registered node that has not heartbeated for the policy's nodeLostTimeout is lost: it is
// unschedulable, and its jobs are requeued (restartPolicy on-failure, within maxRestarts) or
// failed. Its agent stops its tasks on its own after half that time without the server, so a
// task never runs in two places.
//
// A heartbeat whose GPU samples count a new XID is acted on by NVIDIA's resolution for it
// (gpu_health.cc, domain/gpu_health.h): the job on the GPU is stopped; a GPU that needs a reset
// (or its NVLink domain) is cordoned in the Node's ops, and its jobs stopped; a GPU fallen off
// the bus drains the node. A cordoned GPU that no task holds any more is remediated by its
// agent (the Policy's gpuHealth.remediation, then a health probe) and uncordoned when the probe
// passes; one that faulted too often stays cordoned.
//
// Operators cordon, drain and delete registered nodes through it (api::NodeOperations; the
// implementation is in node_ops.cc): their intent is kept in the Node object's spec apart from
// what the agent registers, and a drain stops jobs only through the lifecycle. Thread-safe.
class NodeService final : public Backend, public api::AgentHooks, public api::NodeOperations {
 public:
  NodeService(store::Store* store, const base::Clock* clock, api::EventBus* bus);

  base::Result<Json> Register(const std::string& user, const Json& body) override;
  base::Result<Json> Heartbeat(const std::string& node, const Json& body) override;
  base::Status MayUpload(const std::string& node, int64_t job, int32_t task,
                         int64_t generation) override;

  base::Result<Json> Cordon(const std::string& node, const std::string& by, bool cordoned) override;
  base::Result<Json> Drain(const std::string& node, const std::string& by,
                           const domain::DrainRequest& request) override;
  base::Result<Json> Delete(const std::string& node, const std::string& by, bool force) override;
  Json Operations(const std::string& node) override;
  // GPU health (gpu_health.cc): fault injection into simulated GPUs, and an operator's uncordon
  // of a GPU cordoned for a fault.
  base::Result<Json> InjectFault(const std::string& node, const std::string& by, int32_t gpu,
                                 const domain::FaultInjection& fault) override;
  base::Result<Json> UncordonGpu(const std::string& node, const std::string& by,
                                 int32_t gpu) override;

  // Called by the scheduler controller, which follows every change to jobs: what each node
  // should run. `Reset` starts over from every active job (after a rebuild), replacing the
  // assignments at once; `Track` records one job as stored now. Until the first Reset,
  // heartbeats are answered "unavailable": an empty list would tell agents to stop everything.
  // Backend: agents run the nodes they registered.
  bool Runs(const Estate& estate, const std::string& node) const override {
    return estate.Registered(node);
  }
  void Reset(const Estate& estate, const std::vector<store::JobRecord>& jobs) override;
  void Track(const store::JobRecord& job) override;

  // Marks lost every registered node silent for longer than the timeout, and requeues or fails
  // its jobs, in one transaction. Returns whether anything changed (the estate must be rebuilt).
  base::Result<bool> ExpireNodes() override;
  // Ready nodes not heard from for three heartbeat intervals (at least 1 s, and at most half the
  // lost timeout).
  std::set<std::string> Unreachable() const override;

  // Liveness and telemetry of a registered node, for /api/v1/nodes: {state, lastHeartbeat,
  // simulated, gpus: [{index, utilization, ...}]}; null when the node is not registered.
  Json NodeStatus(const std::string& node);

  // What /metrics exports of a registered node (server/telemetry_metrics.h): liveness, the
  // operator's intent, the last GPU samples, and the jobs holding each GPU as the assignments
  // list them (the tasks on the node, until each has stopped).
  struct GpuHolder {
    int64_t job = 0;
    std::string project;
  };
  struct NodeReport {
    std::string state;  // Ready | Lost
    domain::NodeOps ops;
    bool held = false;  // a job holds resources on it (what tells draining from drained)
    std::vector<protocol::GpuSample> gpus;
    std::map<int32_t, std::vector<GpuHolder>> holders;  // GPU index -> jobs, by job id
    int64_t rejected_samples = 0;  // GPU samples dropped because they did not decode
    std::vector<domain::NodeCondition> conditions;  // warnings and the failing-jobs flag
  };
  std::map<std::string, NodeReport> Reports();
  // Whether a run of `job` (this generation) is still copying a dataset into its site's cache, as
  // its node last said: its GPUs wait for data, they are not idle.
  bool Staging(int64_t job, int64_t generation) const;

  // Called when this server becomes the leader of its database's replicas (docs/adr/0028): every
  // node is taken as seen now, so that none is declared lost before a full nodeLostTimeout from
  // the takeover (its heartbeats went to the previous leader until then).
  void TakeOver();

  // Called whenever a job changed here, so the scheduler looks soon.
  void OnChange(std::function<void()> wake) { wake_ = std::move(wake); }
  // Told each node whose orders changed (a task placed, stopped or moved; a fault to inject), so
  // that its agent heartbeats at once for them (api/doorbells.h). Set before serving.
  // Called with each node whose orders changed, and its cluster (empty when unknown, and for the
  // cluster's other nodes in the same ring: each cluster's bell rings once).
  void OnOrders(std::function<void(const std::string& node, const std::string& cluster)> ring) {
    ring_ = std::move(ring);
  }

 private:
  struct NodeEntry {
    std::string state = "Ready";  // Ready | Lost
    std::string cluster;          // as its registration says
    double last_seen = 0;
    bool simulated = false;
    std::vector<protocol::GpuSample> telemetry;
    int64_t rejected_samples = 0;  // GPU samples of its heartbeats that did not decode
    domain::NodeOps ops;           // what operators asked of it (cordoned, draining)
    // How long after its last answered heartbeat the agent's tasks are surely dead, by the lease
    // and fence grace it was last told (plus two heartbeats): never lost sooner, even when the
    // Policy has since been shortened.
    double fenced_within = 0;
    // XID events counted so far per GPU, as its samples say; a count that grows is a new fault.
    // After a server restart the first sample is taken as it is (the faults it counts were seen
    // before); after a registration counts start from zero.
    std::map<int32_t, int64_t> xids_seen;
    bool xids_from_zero = false;
    std::vector<protocol::InjectedFault> faults_to_send;  // fault injection, sent once
    // Warnings before failures, from its samples; failed runs whose cause points at the node,
    // within the Policy's failingNodes window, and whether it was flagged for them (and since).
    domain::GpuWarningTracker warnings;
    std::vector<domain::NodeFailure> failures;
    double failing_since = 0;  // when the flag last rose
  };
  // A new XID on one GPU, from its samples.
  struct XidSeen {
    int32_t gpu = 0;
    int32_t xid = 0;
  };
  std::vector<XidSeen> NewXidsLocked(NodeEntry& e, const std::vector<protocol::GpuSample>& samples);
  // Acts on new XIDs by their class, in one transaction: the GPUs' records and the node's drain
  // (Node events first, so that the scheduler follows them before the jobs requeue), then each
  // affected job's stop. Returns the last event's sequence (0: nothing written).
  base::Result<int64_t> ApplyXids(const std::string& node, const std::vector<XidSeen>& xids,
                                  std::vector<domain::NodeFailure>* failed);
  // MIG mode changes that wait for a GPU reset, from the samples: GPUs newly pending (`pending`)
  // and GPUs whose pending change is in effect now (`settled`, reset by the remediation or by
  // hand).
  struct MigModes {
    std::vector<int32_t> pending, settled;
    bool empty() const { return pending.empty() && settled.empty(); }
  };
  MigModes MigModesLocked(const NodeEntry& e, const std::vector<protocol::GpuSample>& samples);
  // A pending GPU is cordoned until reset (not a fault) and the jobs that hold it are stopped and
  // requeued (drained through the lifecycle); the Policy's remediation resets it once no task
  // holds it. A settled one cordoned for nothing else is back in service. Node events first, in
  // one transaction; returns the last event's sequence (0: nothing written).
  base::Result<int64_t> ApplyMigModes(const std::string& node, const MigModes& modes);
  // Remediations the agent ran: a GPU whose probe passed is uncordoned; one that failed is held.
  base::Result<int64_t> ApplyRemediations(const std::string& node,
                                          const std::vector<protocol::RemediationResult>& results);
  // What the answer to a heartbeat orders of the node's GPUs: injected faults and remediations
  // of cordoned GPUs that no task holds any more.
  void HealthOrdersLocked(const std::string& node, NodeEntry& e, protocol::HeartbeatAnswer* answer);
  // Warnings before failures and failing nodes (gpu_warnings.cc). The conditions that hold on a
  // node now: its GPU warnings, and FailingJobs while it is flagged.
  std::vector<domain::NodeCondition> ConditionsLocked(const NodeEntry& e, double now) const;
  // Takes a heartbeat's samples into the node's warnings; returns the conditions that began.
  std::vector<domain::NodeCondition> ObserveWarningsLocked(
      NodeEntry& e, const std::vector<protocol::GpuSample>& samples, double now);
  // Appends a Warning event of the node for each notice its agent or connector sent: at most
  // kMaxNotices of one heartbeat, a reason of 1-64 letters (others are dropped, and logged), a
  // message cut at 1,024 bytes.
  base::Result<int64_t> RecordNotices(const std::string& node,
                                      const std::vector<protocol::NodeNotice>& notices);
  // Appends an event for each warning that began (nothing is cordoned for one).
  base::Result<int64_t> RecordWarnings(const std::string& node,
                                       const std::vector<domain::NodeCondition>& began);
  // Counts failed runs that point at the node; when that flags it, says so in an event and, if
  // the Policy says so, cordons it. Returns the last event's sequence (0: none written).
  base::Result<int64_t> RecordFailures(const std::string& node,
                                       const std::vector<domain::NodeFailure>& failures);
  base::Status Load();  // the registered nodes, once, seen "now" (a grace after a restart)
  // Also adds to `failed` each run that failed for a cause pointing at the node.
  // Staging as the node's tasks report it (nodes_data.cc): progress in the job's events, and the
  // site's cache as it is now (DatasetCopy objects, with an event the scheduler follows).
  base::Result<int64_t> ApplyStaging(const std::string& node,
                                     const std::vector<protocol::TaskReport>& tasks);
  // How the node shares its tasks' GPUs (nodes_gpus.cc): an event on the job when a share starts
  // through MPS or time-sliced, with why when MPS was granted and is not there.
  base::Result<int64_t> ApplySharing(const std::string& node,
                                     const std::vector<protocol::TaskReport>& tasks);
  // Copies in `cluster`'s cache to remove, least recently used first, so that `m` fits within
  // the cache's capacity: never a pinned one or one a task assigned there reads.
  std::vector<std::string> EvictionsLocked(const std::string& cluster,
                                           const protocol::DataMount& m) const;
  // Commits what the reports change of their jobs. Reports that are known to change nothing
  // (Assigned::quiet) cost no transaction: most heartbeats say only that tasks still run.
  base::Result<int64_t> ApplyReports(const std::string& node,
                                     const std::vector<protocol::TaskReport>& tasks,
                                     std::vector<domain::NodeFailure>* failed);
  // Whether this report of a task assigned to `node` was found to change nothing at the job's
  // version the server tracks.
  bool QuietLocked(const std::string& node, const protocol::TaskReport& t) const;
  // Adds to `changed` each node whose orders the job's change changed.
  void TrackLocked(const store::JobRecord& job, std::set<std::string>* changed);
  void AssignLocked(const store::JobRecord& job);  // the job's tasks into assigned_
  void ResetLocked(const Estate& estate, const std::vector<store::JobRecord>& jobs);
  void Ring(const std::set<std::string>& nodes) const;
  protocol::AgentTerms TermsLocked() const;  // what agents are told
  Json OperationsLocked(const std::string& node);
  // After a node operation's write: the in-memory entry, watchers and the scheduler.
  void Operated(const std::string& node, const domain::NodeOps& ops, int64_t seq);

  store::Store* store_;
  const base::Clock* clock_;
  api::EventBus* bus_;
  std::function<void()> wake_;
  std::function<void(const std::string& node, const std::string& cluster)> ring_;

  mutable std::mutex mu_;
  bool loaded_ = false;
  std::map<std::string, NodeEntry> nodes_;
  double heartbeat_interval_ = 2.0;
  double lost_timeout_ = 30.0;
  double agent_lease_ = domain::AgentTiming{}.agent_lease;  // what agents are told
  double fence_grace_ = domain::AgentTiming{}.fence_grace;
  domain::GpuHealthPolicy gpu_health_;
  domain::GpuWarningPolicy gpu_warnings_;
  domain::FailingNodePolicy failing_nodes_;
  // What tasks' data mounts and checkpoint folders come from (server/data_mounts.h).
  std::map<std::string, domain::Dataset> datasets_;
  std::map<std::string, domain::Cluster> sites_;
  std::map<std::string, std::map<std::string, domain::DatasetCopy>> copies_;  // cluster, dataset
  // The last staging step said of each run's dataset (job, task, generation, restarts,
  // dataset): events only for a new one.
  std::map<std::tuple<int64_t, int32_t, int64_t, int64_t, std::string>, int> staging_steps_;
  // The runs (job, task, generation, restarts) whose GPU sharing is said.
  std::set<std::tuple<int64_t, int32_t, int64_t, int64_t>> sharing_said_;
  // registered node -> its agent's address: set by registrations (and Load), erased by deletions
  std::map<std::string, std::string> address_;
  // node -> (job, task) -> assignment; job -> the nodes it has tasks on
  struct Assigned {
    protocol::Assignment assignment;
    double stop_deadline = 0;  // a Stopping job's, on this server's clock; sent as stopWithin
    std::string cluster;       // of the node, as the allocation says
    int64_t version = 0;       // of the job record it was made from
    // A report of the task's run that changed nothing when the job was at `version` (read in a
    // transaction): the same report changes nothing until the job changes, which makes a new
    // Assigned. Never an exit (an exit's report also says what failed on the node).
    std::optional<domain::TaskReport> quiet;
  };
  std::map<std::string, std::map<std::pair<int64_t, int32_t>, Assigned>> assigned_;
  std::map<int64_t, std::set<std::string>> nodes_of_job_;
  // Which node each run of a task was given to (job, task, generation), the latest runs only:
  // the output of a run that was preempted or requeued is still uploaded after the job moved on.
  std::map<std::tuple<int64_t, int32_t, int64_t>, std::string> ran_on_;
  std::deque<std::tuple<int64_t, int32_t, int64_t>> ran_order_;  // oldest first, bounded
  bool indexed_ = false;                                         // Reset has run
};

}  // namespace meridian::server
