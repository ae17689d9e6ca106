#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/cgroups.h"
#include "agent/gpu_discovery.h"
#include "agent/mps.h"
#include "agent/orders_waiter.h"
#include "agent/task_isolation.h"
#include "agent/task_uids.h"
#include "base/status.h"
#include "cli/client.h"
#include "domain/failure_cause.h"
#include "protocol/agent_protocol.h"

namespace meridian::agent {

using Json = nlohmann::json;

struct AgentOptions {
  cli::ClientConfig server;  // where the control plane is, and the agent's token
  std::string node;          // the node's name (default: the host name)
  std::string cluster;
  std::string pool;
  std::string rack;
  std::string address;  // how other tasks of a gang reach this node (default: the host name)
  std::map<std::string, std::string> labels;
  int64_t cpu_milli = 0;   // 0: what the machine has
  int64_t memory_mib = 0;  // 0: what the machine has
  std::string work_dir;    // task directories and the lease file
  std::string shim;        // the meridian-shim binary, which supervises each task run
  // How images run: the command before `run` ("podman", "docker", or with global flags);
  // empty: podman, else docker, when installed.
  std::string container_runtime;
  // NVIDIA's MPS control program, for shares of GPUs in pools of gpuSharing mps (mps.h).
  std::string mps_control = "nvidia-cuda-mps-control";
  bool cgroups = true;  // limit CPU and memory of tasks
  // The uids tasks run under, one per job (docs/adr/0016-task-isolation.md); none: the agent's
  // own (`--task-uids off`). An agent that is not root cannot switch uids: it says so at start-up
  // and runs its tasks as itself, unless the range was asked for (`task_uids_asked`), when it
  // refuses to start.
  std::optional<UidRange> task_uids = kDefaultTaskUids;
  bool task_uids_asked = false;
};

// The node agent: registers its node, heartbeats inventory, telemetry and what its tasks did,
// and runs what the server assigns (level-triggered: what the heartbeat's answer lists runs,
// what it does not list is stopped). Each task run is supervised by a shim process (shim.h)
// that outlives the agent, so an agent restart loses no task; the agent finds them again in
// its work directory. It survives server restarts and network loss by retrying with backoff;
// while it cannot reach the server it stops renewing its lease, and the shims stop their tasks
// when the lease runs out. Run as root, it runs each job's tasks under a uid of their own, in
// folders only they and root enter (docs/adr/0016-task-isolation.md). Single-threaded: Run() is
// its loop.
class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<GpuDiscovery> gpus);
  ~Agent();

  // Runs until `stop` becomes true, then stops every task (notice, SIGTERM, grace, SIGKILL),
  // reports them, and returns. Fails only on a local problem (the work directory).
  base::Status Run(const std::atomic<bool>& stop);

  // Exposed for tests: one registration and one heartbeat round.
  base::Status Register();
  base::Status Beat();

 private:
  struct Task {
    int64_t job = 0;
    int32_t index = 0;
    int64_t generation = 0;
    std::string dir;
    protocol::Assignment assignment;
    int shim_pid = 0;
    bool adopted = false;              // its shim was started by an earlier life of the agent
    std::string state = "Starting";    // Starting | Running | BackingOff | Exited
    std::optional<int64_t> exit_code;  // none: unknown or still running
    int64_t restarts = 0;
    double restart_at = 0;  // BackingOff: when to start again
    std::string message;
    domain::FailureCause cause = domain::FailureCause::kNone;  // when it ended badly
    std::map<int32_t, int64_t> xids_at_start;                  // XID count per GPU it holds
    bool stop_requested = false;
    int64_t uploaded = 0;  // bytes of output the server has
    bool gone = false;     // no longer assigned and ended: removed once its output is uploaded
    // The uid (and gid) it runs under, its job's on this node; held until its folder is removed,
    // so that no other job gets the uid while files of this one are left. None: the agent's.
    std::optional<uint32_t> uid;
    // What the task is given for each of its devices (CUDA_VISIBLE_DEVICES): the GPU's UUID, or
    // its MIG device's, as PrepareGpus made it.
    std::vector<std::string> device_names;
    // A share of a GPU: how it is shared in effect, its MPS daemon when through MPS, and why it
    // is time-sliced when MPS was granted.
    std::optional<protocol::SharingNote> sharing;
    std::optional<MpsEndpoint> mps;
    // On a machine whose driver grants MIG instances as capabilities: the capability nodes it
    // may open (its own instances'), in a /dev/nvidia-caps of its own (PrepareGpus).
    std::optional<std::vector<protocol::ShimSpec::Device>> mig_caps;
  };
  using Key = std::tuple<int64_t, int32_t, int64_t>;  // job, task, generation

  base::Status Recover();  // tasks from an earlier life of the agent
  // Whether tasks run under uids of their own (root, and a range): checks the range and the
  // work directory, and says at start-up, in one line, which it is and why.
  base::Status SetUpIsolation();
  // The task's folder, before each run: the folder (root's, entered by the task's group only),
  // the bookkeeping files (root's, 0600), its output and its work directory (the task's own,
  // 0600 and 0700). Chooses the task's uid on its first run. Says why when it cannot.
  base::Status PrepareFolder(Task& t);
  void RemoveFolder(const Task& t);  // with what its uid left, when no other task holds the uid
  // What the shim binds into the task's mount namespace (ShimSpec), and the folder it gives to
  // the task's uid.
  struct Mounts {
    std::vector<std::pair<std::string, std::string>> read_only;
    std::vector<std::pair<std::string, std::string>> read_write;
    std::string owned;
  };
  // The task's datasets at <task dir>/data/<name> (read-only binds over empty folders; links
  // where tasks have no uid of their own) and its job's checkpoint folder at
  // <task dir>/checkpoint (task_data.cc). Says which dataset is missing.
  base::Status PrepareData(const Task& t, Mounts* mounts);
  // MERIDIAN_DATA_DIR, MERIDIAN_DATASET_<NAME> and MERIDIAN_CHECKPOINT_DIR; a container's
  // volumes for them.
  void AddDataEnv(const Task& t, std::map<std::string, std::string>* env) const;
  void AddDataVolumes(const Task& t, std::vector<std::string>* argv) const;
  // How the staging of its datasets goes, as its shim last wrote it (none to stage: nothing).
  std::vector<protocol::StagingProgress> StagingOf(const Task& t) const;
  // The node's credential, kept in the work directory (mode 0600) once a registration with the
  // bootstrap token returned it; every call uses it from then on. Forget goes back to the
  // bootstrap token (the credential was revoked, or the server forgot the node).
  void UseCredential(const std::string& credential, bool keep);
  void ForgetCredential(const std::string& why);
  void Reconcile(const Json& answer);  // the heartbeat's answer: what should run here
  void Start(Task& t);
  // Stops a run: its notice, SIGTERM half its grace later, SIGKILL at the grace's end, or within
  // `within` seconds when that is sooner (the server's deadline, a drain's).
  void RequestStop(Task& t, const std::string& reason, std::optional<double> within = std::nullopt);
  // The task's GPUs before it runs (task_gpus.cc): each GPU put in the mode its grant wants (the
  // MIG instance made, stale instances in its slices destroyed; MIG mode left for a whole GPU or
  // a share) and the name the task is given for each device. Says why when it cannot.
  base::Status PrepareGpus(Task& t);
  void ReleaseDevices(const Task& t);  // MIG instances of an ended run, its MPS daemon
  // A share of GPU `d`: through the GPU's MPS daemon (started if it is not running) when its pool
  // shares by MPS and MPS is installed, else time-sliced, saying why in the task's output.
  void ShareGpu(Task& t, const protocol::DeviceGrant& d);
  // Why a run ended (killed for memory, a GPU fault, a missing command, ...), from what the shim
  // wrote, the task's cgroup (read before it is removed), its GPUs and the end of its output.
  domain::Diagnosis Diagnose(const Task& t, const protocol::ShimExit& exit);
  std::map<int32_t, int64_t> XidCounts();
  void Poll();  // exits, restarts, backoffs
  // Each task's state, as a heartbeat reports it: a change the server has not heard of (a task
  // started, exited or backing off) is sent at once rather than at the next interval.
  std::map<Key, std::string> States() const;
  void UploadLogs();
  void Cleanup();
  std::vector<protocol::TaskReport> Reports() const;
  void TakeTerms(const protocol::AgentTerms& terms);  // from the server's answer
  // The answer's GPU health orders: faults to inject (simulated GPUs), remediations to run. A
  // remediation runs the Policy's command (simulated GPUs clear their fault instead), then probes
  // the GPU; its result goes with the next heartbeat.
  void TakeHealthOrders(const Json& answer);
  // The answer's sessions into this node's tasks (agent/sessions.h): each starts on a thread of
  // its own with what it needs of its task, once.
  void TakeSessions(const Json& answer);
  // What a session into `t` runs: the command inside the task (its uid, cgroups, mount
  // namespace, folder and environment, from its spec.json), or, for a job with an image, the
  // container runtime's exec into its container.
  base::Result<protocol::ShimExec> ExecInto(const Task& t,
                                            const protocol::SessionOffer& offer) const;
  // The container runtime's command words (`podman`, or as configured); empty when none.
  std::vector<std::string> RuntimeWords() const;
  protocol::RemediationResult Remediate(const protocol::Remediation& order);
  std::vector<GpuTelemetry> Telemetry();
  // The command line of a run (through the container runtime for an image, when `cleanup` gets
  // the command that removes its container); `error` says why it cannot run.
  std::vector<std::string> TaskArgv(const Task& t, const std::map<std::string, std::string>& env,
                                    std::string* error, std::vector<std::string>* cleanup) const;
  std::map<std::string, std::string> TaskEnv(const Task& t) const;
  // Dates the lease file `sent_at` (when the request that the server answered was sent, so that
  // the lease never starts after the server's record of the heartbeat); with `values`, it also
  // writes the lease and fence grace into it, where every shim, old or new, reads them.
  enum class LeaseValues { kKeep, kWrite };
  void RenewLease(double sent_at, LeaseValues values);
  std::string CgroupName(const Task& t) const;
  bool Limited(const Task& t) const;

  AgentOptions o_;
  std::unique_ptr<GpuDiscovery> gpus_;
  std::vector<std::string> gpu_models_;  // the catalogue model of each GPU, from registration
  std::unique_ptr<MpsDaemons> mps_;      // made at the first share of a GPU under MPS
  cli::Client client_;
  Cgroups cgroups_;
  std::string cgroup_prefix_;  // the node and its work directory: see Run
  bool isolated_ = false;      // tasks run under uids of the range (SetUpIsolation)
  UidClaims claims_;           // the machine's, shared with other agents on it
  std::string claim_owner_;    // this agent's name in the claims: its work directory
  bool registered_ = false;
  bool credentialed_ = false;  // calls use the node's credential, not the bootstrap token
  double interval_ = 2.0;
  double lease_ = 15.0;
  double fence_grace_ = -1;  // < 0: the server gave none; a task's own grace period applies
  double lease_renewed_at_ = 0;
  std::pair<double, double> lease_written_{-1, -1};  // lease and fence grace in the lease file
  std::map<Key, Task> tasks_;
  std::vector<protocol::RemediationResult> remediated_;  // until a heartbeat has carried them
  // News the server acts on at once (an injected fault the GPU now reports, a remediation's
  // result): the next heartbeat goes now rather than an interval later.
  bool beat_soon_ = false;
  // The server rings it when this node's orders change: the next heartbeat goes now.
  OrdersWaiter orders_;
  std::map<Key, std::string> reported_;  // States() as the last heartbeat the server took
  // Sessions started, by id, oldest first: an offer repeated before the server saw it taken up
  // starts once. The newest few hundred are kept.
  std::deque<std::string> sessions_started_;
  std::string last_error_;
};

// The host's name, CPUs (in milli-CPUs) and memory, for defaults.
std::string HostName();
int64_t HostCpuMilli();
int64_t HostMemoryMib();

}  // namespace meridian::agent
