#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "domain/job_spec.h"
#include "domain/lifecycle.h"

// What the server, the node agent and the agent's task supervisor (the shim) say to each other,
// as types, each with its JSON form in one place. Encoders write every field; decoders read with
// domain::FieldReader (types and ranges checked, defaults filled in, errors naming the field, as
// "tasks[2].generation: must be an integer ...") and ignore fields they do not know, so that an
// agent and a server one version apart still understand each other.
//
// Over HTTP (docs/openapi.yaml, /api/v1/agents):
//   POST /agents/register          Registration       -> RegistrationAnswer
//   POST /agents/NODE/heartbeat    Heartbeat          -> HeartbeatAnswer (the assignments)
//   GET /agents/NODE/channel, WebSocket: the same heartbeats, and the node's doorbell
//                                  (ChannelMessage; docs/adr/0047-one-connection-per-agent.md)
// In a task's folder on the node (agent/shim.h):
//   assignment.json  Assignment (the agent's, read again after a restart)
//   spec.json        ShimSpec    (agent -> shim)
//   started.json     ShimStarted (shim -> agent)
//   exit.json        ShimExit    (shim -> agent)
//   ../../lease      LeaseTerms  (agent -> every shim; its modification time is the renewal)
// Sessions into tasks (docs/adr/0029-sessions-into-tasks.md):
//   `sessions` of the heartbeat answer      SessionOffer (server -> agent)
//   GET /agents/NODE/sessions/ID, WebSocket Frame messages (agent <-> server <-> user)
//   `meridian-shim --exec`, fd 3            ShimExec (agent -> shim)
namespace meridian::protocol {

using Json = nlohmann::json;

// --- Agent and server ------------------------------------------------------------------------

struct GpuInventory {
  int32_t index = 0;
  std::string uuid;
  std::string model;
  int64_t memory_mib = 0;
  int32_t nvlink_domain = 0;
  bool mig_capable = false;
  bool mig_enabled = false;
  bool healthy = true;
  // Held by work Meridian does not manage (the Slurm connector: a job Slurm's own users
  // submitted), described for people; empty: not.
  std::string unmanaged;
};

// A node as its agent describes it when it registers.
struct Registration {
  std::string node;
  std::string cluster;
  std::string pool;
  std::string rack;
  std::string address;  // how the other tasks of a gang reach this node
  std::map<std::string, std::string> labels;
  int64_t cpu_milli = 1000;
  int64_t memory_mib = 1024;
  // Of those, what work outside Meridian holds now (a Slurm node's jobs that Slurm's own users
  // submitted): not Meridian's to place.
  int64_t unmanaged_cpu_milli = 0;
  int64_t unmanaged_memory_mib = 0;
  bool simulated = false;
  std::string agent_version;
  std::vector<GpuInventory> gpus;
  // Why the node's runner takes no new work there, when it says so (an engine it runs for, such
  // as Slurm, drained or downed the node); empty: it does. Such a node is not schedulable.
  std::string unavailable;
};

// The timing every answer to an agent carries (domain/agent_timing.h has the rule between them).
struct AgentTerms {
  double heartbeat_interval = 2.0;
  double lease = 15.0;
  std::optional<double> fence_grace;  // absent: a task's own grace period bounds its kill
};

struct RegistrationAnswer {
  std::string node;
  AgentTerms terms;
  // To a registration with a bootstrap token: the node's own credential, which every later call
  // of its agent uses (heartbeats, reports, uploads, registering again). Empty otherwise.
  std::string credential;
};

// One device of a task's placement: a whole GPU, a share of one, or a MIG instance on it.
struct MigGrant {
  std::string profile;
  int32_t start = 0;
  std::string change = "none";  // none, create-instance, repartition, enable-mig
};
struct DeviceGrant {
  int32_t gpu = 0;  // the GPU's index on its node
  std::string uuid;
  int32_t milli = 1000;
  int64_t memory_mib = 0;    // a fraction's GPU memory; 0: not limited
  bool disable_mig = false;  // the GPU leaves MIG mode before the task starts
  // A share of a GPU: how its pool shares it, "mps" (an MPS server per GPU, the share enforced)
  // or "time-slicing" (no limits); empty for a whole GPU or a MIG instance.
  std::string sharing;
  std::optional<MigGrant> mig;
};

// What a task runs, from its job's spec (defaults: domain::JobSpec's).
struct TaskRun {
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string image;
  std::string working_dir;
  double grace_period = domain::JobSpec().grace_period;
  std::string notice_signal = domain::JobSpec().notice_signal;
  domain::RestartPolicy restart;
  int64_t cpu_milli = domain::JobSpec().cpu_milli;
  int64_t memory_mib = domain::JobSpec().memory_mib;
  double simulate_utilization = domain::JobSpec().simulate_utilization;
  double runtime_limit = 0;

  static TaskRun Of(const domain::JobSpec& spec);
};

// A dataset a task reads, where its node finds it (docs/adr/0044-datasets.md): `path`, a folder
// of the site's shared filesystem, is mounted read-only at <task dir>/data/<name>. With
// `stage_from`, `path` is in the site's cache, and the dataset is copied there first from
// `stage_from` (a path or URL at another site) with `staging_command` ({source} and {target}
// in its words; empty: cp -a), unless a copy is there already.
struct DataMount {
  std::string name;
  std::string path;
  std::string stage_from;
  std::vector<std::string> staging_command;
  double size_gib = 0;  // for progress
  // Before staging: copies in the same cache to remove, least recently used first, to keep the
  // cache within its capacity (the server's choice: none is pinned or read by a task).
  std::vector<std::string> evict;

  bool operator==(const DataMount&) const = default;
};

// One task that should be on the node. Level-triggered: the agent runs what is listed, stops
// what is listed with `stop`, and stops what is not listed at all.
struct Assignment {
  int64_t job = 0;
  int32_t task = 0;
  int64_t generation = 0;
  std::string name;
  std::string project;
  std::string user;
  bool stop = false;
  std::string stop_reason;
  // With stop: the seconds left, from the answer, until what still runs is killed (the stop's
  // deadline: a drain's, shorter than the task's grace, wins). Absent: the task's grace.
  std::optional<double> stop_within;
  std::vector<DeviceGrant> devices;
  int32_t world_size = 1;
  std::string master_addr;  // the node of task 0
  // An array's element: the array's id and the element's index (MERIDIAN_ARRAY_JOB_ID and
  // MERIDIAN_ARRAY_INDEX). 0 and -1 otherwise.
  int64_t array_id = 0;
  int64_t array_index = -1;
  TaskRun run;
  std::vector<DataMount> data;  // the job's datasets, as this node's site has them
  // The job's checkpoint folder on the site's shared filesystem (MERIDIAN_CHECKPOINT_DIR);
  // empty: it asked for none.
  std::string checkpoint_dir;
};

// What one task did, as its agent reports it.
// How the staging of one dataset into the site's cache goes, as the shim writes it
// (staging.json, one per dataset the task stages or finds staged) and the agent reports it.
struct StagingProgress {
  std::string dataset;
  std::string state;  // copying, staged (copied now), cached (there already), failed
  int64_t done_bytes = 0;
  int64_t total_bytes = 0;
  int32_t attempt = 0;
  double seconds = 0;                // copying so far, or in all once staged
  std::string error;                 // failed: why (the last attempt's)
  std::vector<std::string> evicted;  // cache folders removed to make room for it

  bool operator==(const StagingProgress&) const = default;
};

// How the agent shares a task's GPU when the task holds a share of one (issue 20): the mode in
// effect ("mps" or "time-slicing") and, when it is not the one granted, why.
struct SharingNote {
  int32_t gpu = 0;
  std::string mode;
  std::string why;
};

struct TaskReport {
  int64_t job = 0;
  domain::TaskReport report;
  std::vector<StagingProgress> staging = {};
  std::optional<SharingNote> sharing = {};
};

// What one GPU is doing, as the agent's GpuDiscovery measured it (NVML, or the simulation).
// Counters that NVML cannot read on a device (ECC off, no row remapping before Ampere, no page
// retirement after it) are absent rather than zero, so that /metrics exports no made-up value.
struct GpuSample {
  int32_t index = 0;
  double utilization = 0;  // 0..1, compute
  int64_t memory_used_mib = 0;
  std::optional<int64_t> memory_total_mib;
  double temperature_c = 0;
  double power_w = 0;
  std::optional<int64_t> sm_clock_mhz;
  // ECC errors since the driver loaded (NVML's volatile counters): single-bit (corrected) and
  // double-bit (uncorrected; `eccErrors` on the wire, as agents before these fields sent it).
  std::optional<int64_t> ecc_single_bit;
  std::optional<int64_t> ecc_double_bit;
  // Pages retired for repeated single-bit and for double-bit errors (before Ampere), and rows
  // remapped for correctable and uncorrectable errors (Ampere and after), with whether a remap
  // waits for a GPU reset and whether one ever failed.
  std::optional<int64_t> retired_pages_single_bit;
  std::optional<int64_t> retired_pages_double_bit;
  std::optional<int64_t> remapped_rows_correctable;
  std::optional<int64_t> remapped_rows_uncorrectable;
  std::optional<bool> row_remap_pending;
  std::optional<bool> row_remap_failed;
  int64_t xid_errors = 0;  // critical XID events seen since the agent started
  int32_t last_xid = 0;    // the latest one's code (0: none), e.g. 79 "fallen off the bus"
  std::vector<std::string> mig_instances;  // the MIG layout, "profile@start" ("1g.10gb@0")
  // A MIG mode change that NVML took but that waits for a GPU reset (NVML's pending mode differs
  // from its current one): absent where the GPU has no MIG.
  std::optional<bool> mig_mode_pending;
  // Warnings before failures (domain/gpu_warnings.h): the temperature at which the GPU slows
  // itself down (NVML's slowdown threshold), its clock throttle reason bits, and NVLink CRC
  // errors (flit and data) summed over its links since the driver loaded.
  std::optional<double> slowdown_temperature_c;
  std::optional<int64_t> throttle_reasons;
  std::optional<int64_t> nvlink_crc_errors;
};

// GPU health (domain/gpu_health.h). Fault injection, for simulated GPUs only: the server asks the
// agent to make GPU `gpu` report `xid`, which it then reports as NVML reports an XID event.
// Or, with `warning` set (and no XID), a warning before failure (domain/gpu_warnings.h:
// ecc-corrected, temperature, power-cap, nvlink-crc, or clear).
struct InjectedFault {
  int32_t gpu = 0;
  int32_t xid = 0;
  std::string warning;
};
// The server asks the agent to remediate a GPU cordoned for a fault that no task holds any more:
// run `command` (the Policy's, "{gpu}" already replaced; simulated GPUs clear their fault
// instead), then probe the GPU's health.
struct Remediation {
  int32_t gpu = 0;
  std::vector<std::string> command;
};
// What came of a remediation, in the next heartbeat: the probe passed (`healthy`), or why not.
struct RemediationResult {
  int32_t gpu = 0;
  bool healthy = false;
  std::string message;
};

// What a node's agent (or a back end's connector, for the nodes it speaks for) did on its own
// that operators should see: a Slurm job of Meridian's cancelled because no answer lists it any
// more. Each becomes a Warning event of the node, `reason` as given (CamelCase, as events'
// reasons are: "BackendJobFenced"). Sent until a heartbeat carrying it is answered.
struct NodeNotice {
  std::string reason;
  std::string message;
};

struct Heartbeat {
  std::vector<GpuSample> telemetry;
  std::vector<TaskReport> tasks;
  // Samples that did not decode, each as its error ("telemetry[1].utilization: ..."): they are
  // dropped, and the rest of the heartbeat (task reports above all) is taken as usual.
  std::vector<std::string> telemetry_errors;
  std::vector<RemediationResult> remediations;
  std::vector<NodeNotice> notices;
};

struct HeartbeatAnswer {
  std::vector<Assignment> tasks;
  AgentTerms terms;
  std::vector<InjectedFault> faults;      // each sent once
  std::vector<Remediation> remediations;  // each sent until its result comes back
};

Json ToJson(const Registration& r);
Json ToJson(const RegistrationAnswer& a);
Json ToJson(const DeviceGrant& d);
Json ToJson(const StagingProgress& p);
base::Result<StagingProgress> DecodeStagingProgress(const Json& j);
Json ToJson(const Assignment& a);
Json ToJson(const TaskReport& r);
Json ToJson(const GpuSample& g);
Json ToJson(const Heartbeat& h);
Json ToJson(const HeartbeatAnswer& a);

base::Result<Registration> DecodeRegistration(const Json& j);
base::Result<RegistrationAnswer> DecodeRegistrationAnswer(const Json& j);
// The devices of one task of a stored allocation (`devices` of store::JobRecord::allocation
// items, which AllocationToJson writes in this form).
base::Result<std::vector<DeviceGrant>> DecodeDevices(const Json& devices);
base::Result<Assignment> DecodeAssignment(const Json& j);
base::Result<Heartbeat> DecodeHeartbeat(const Json& j);
base::Result<GpuSample> DecodeGpuSample(const Json& j);
// The answer's terms, and its assignments one by one: a bad one comes back as its error (and
// the key it names, when it could be read), so that one bad item does not hide the rest.
struct DecodedAssignment {
  base::Result<Assignment> assignment;
  std::optional<std::tuple<int64_t, int32_t, int64_t>> key;  // job, task, generation
};
base::Result<AgentTerms> DecodeTerms(const Json& answer);
// The answer's GPU health orders: faults to inject and remediations to run.
struct HealthOrders {
  std::vector<InjectedFault> faults;
  std::vector<Remediation> remediations;
};
base::Result<HealthOrders> DecodeHealthOrders(const Json& answer);
std::vector<DecodedAssignment> DecodeAssignments(const Json& answer);

// A message the server sends on an agent's channel: the answer to the heartbeat the agent sent
// last, as "STATUS BODY" (what POST .../heartbeat would have answered), or the node's doorbell,
// as "ring BODY" (what GET .../wait answers).
struct ChannelMessage {
  bool ring = false;
  int status = 0;  // an answer's HTTP status
  std::string body;
};
std::string ChannelAnswer(int status, std::string_view body);
std::string ChannelRing(std::string_view body);
// Neither a ring nor an answer that starts with an HTTP status: nullopt.
std::optional<ChannelMessage> DecodeChannelMessage(std::string_view m);

// --- Agent and shim --------------------------------------------------------------------------

struct ShimSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string output;  // the task's output file
  double grace = domain::JobSpec().grace_period;
  int notice_signal = 0;  // a signal number; 0: none
  std::string notice_file;
  std::string lease_file;
  double lease = 0;  // 0: no lease
  std::optional<double> fence_grace;
  double runtime_limit = 0;
  std::vector<std::string> cgroup_procs;  // cgroup.procs files the task joins before exec
  std::vector<std::string> cleanup;       // run once the task has ended (removes a container)
  // The uid and gid the task runs under (the shim leaves root for them just before exec);
  // absent: the shim's own, when the agent cannot switch uids or a container runtime does it.
  std::optional<int64_t> uid;
  std::optional<int64_t> gid;
  // GPU device nodes of GPUs the task was not given: the shim puts /dev/null over each, in a
  // mount namespace of the task's own, before it leaves root.
  std::vector<std::string> hide_devices;
  // On a machine with MIG: the folder of its capability nodes (/dev/nvidia-caps), which the shim
  // makes anew in the task's mount namespace with only `devices` in it (its own instances'),
  // read-only. Empty: left as it is.
  struct Device {
    std::string name;  // "nvidia-cap139"
    int64_t major = 0, minor = 0;
    int64_t mode = 0444;
  };
  std::string devices_dir;
  std::vector<Device> devices;
  // Folders bound into the task's mount namespace, source to target: read-only (its datasets)
  // and read-write (its job's checkpoint folder).
  std::vector<std::pair<std::string, std::string>> read_only;
  std::vector<std::pair<std::string, std::string>> read_write;
  // A folder the shim gives to `owner` (the task's uid, in a container too) before it starts:
  // its checkpoint folder, written by earlier runs under other uids perhaps (ChownTree).
  std::string owned;
  int64_t owner = 0;
  // Datasets to copy into the site's cache before the task starts, one after another.
  struct Stage {
    std::string dataset;
    // The copy command, {source} filled in; {target} is the shim's to fill: a folder beside
    // `target`, renamed to it once the command has exited 0.
    std::vector<std::string> argv;
    std::string source;  // what argv copies from, for messages
    std::string target;
    std::vector<std::string> evict;  // cache folders to remove first, to make room
    int64_t bytes = 0;               // the dataset's size, for progress
  };
  std::vector<Stage> stages;
};

// The agent's request to stop a run (the `stop` file): why, and how long it may take at most.
struct ShimStop {
  std::string reason;
  std::optional<double> within;  // absent: the spec's grace
};

struct ShimStarted {
  int64_t pid = 0;
  double started_at = 0;
  std::string cgroup_error;
};

struct ShimExit {
  std::optional<int64_t> exit_code;  // absent: it never ran, or nothing is known
  std::optional<int64_t> signal;
  std::string reason;  // why it was stopped, when it was
  double started_at = 0;
  double finished_at = 0;
  std::string staging_error;  // the task never started: a dataset could not be staged
};

struct LeaseTerms {
  double lease = 0;
  std::optional<double> fence_grace;
};

Json ToJson(const ShimSpec& s);
Json ToJson(const ShimStop& s);
Json ToJson(const ShimStarted& s);
Json ToJson(const ShimExit& e);
Json ToJson(const LeaseTerms& l);

// --- Sessions into tasks ---------------------------------------------------------------------

// A session a user opened into a running task (`meridian exec`, `meridian port-forward`),
// offered to the task's node in the heartbeat answer (`sessions`) until its agent takes it up:
// the agent opens GET /agents/NODE/sessions/ID as a WebSocket and carries the session's frames.
struct SessionOffer {
  std::string id;
  int64_t job = 0;
  int32_t task = 0;
  int64_t generation = 0;
  std::string kind = "exec";         // exec | port-forward
  std::vector<std::string> command;  // exec: what to run inside the task
  bool tty = false;                  // exec: on a terminal of its own
  int32_t port = 0;                  // port-forward: the task's port on its node's loopback
};

// A session's WebSocket carries binary messages whose first byte is the channel and whose rest
// is the data, as Kubernetes' channel protocol does.
enum class Channel : uint8_t {
  kStdin = 0,     // user -> task (port-forward: to the task's port)
  kStdout = 1,    // task -> user (port-forward: from the task's port)
  kStderr = 2,    // task -> user
  kStatus = 3,    // -> user, last: SessionEnd as JSON
  kResize = 4,    // user -> task: TerminalSize as JSON
  kStdinEnd = 5,  // user -> task: no more input (the command sees the end of its stdin)
};
std::string Frame(Channel channel, std::string_view data);

// How a session ended: the command's exit code (or the signal that ended it), or why it could
// not run at all.
struct SessionEnd {
  std::optional<int64_t> exit_code;
  std::optional<int64_t> signal;
  std::string error;
};

// The last frame of a session (Channel::kStatus): its end, or the error that ended it.
std::string EndFrame(const SessionEnd& end);
std::string ErrorFrame(const std::string& error);

struct TerminalSize {
  int32_t cols = 80;
  int32_t rows = 24;
};

// What the agent hands `meridian-shim --exec` on its fd 3: a command to run inside a task, in
// its cgroups and mount namespace, under its uid, in its folder, with its environment.
struct ShimExec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  std::optional<int64_t> uid;
  std::optional<int64_t> gid;
  std::vector<std::string> cgroup_procs;
  int64_t namespace_pid = 0;  // a process of the task whose mount namespace to enter; 0: none
  bool tty = false;           // stdin is a terminal: it becomes the controlling one
};

Json ToJson(const SessionOffer& o);
Json ToJson(const SessionEnd& e);
Json ToJson(const TerminalSize& t);
Json ToJson(const ShimExec& e);
// The heartbeat answer's offers; a bad one comes back as its error.
std::vector<base::Result<SessionOffer>> DecodeSessionOffers(const Json& answer);
base::Result<SessionEnd> DecodeSessionEnd(const Json& j);
base::Result<TerminalSize> DecodeTerminalSize(const Json& j);
base::Result<ShimExec> DecodeShimExec(const Json& j);

base::Result<ShimSpec> DecodeShimSpec(const Json& j);
base::Result<ShimStop> DecodeShimStop(const Json& j);
base::Result<ShimStarted> DecodeShimStarted(const Json& j);
base::Result<ShimExit> DecodeShimExit(const Json& j);
base::Result<LeaseTerms> DecodeLeaseTerms(const Json& j);

}  // namespace meridian::protocol
