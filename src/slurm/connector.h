#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/orders_waiter.h"
#include "base/status.h"
#include "cli/client.h"
#include "protocol/agent_protocol.h"
#include "slurm/slurm_cli.h"

namespace meridian::slurm {

// The GPU model of each GRES type Meridian knows by default (a Cluster's connector adds to it or
// overrides it with --gpu-model TYPE=MODEL); docs/user-guide.md has the table.
const std::map<std::string, std::string>& DefaultGpuModels();

struct ConnectorOptions {
  cli::ClientConfig server;  // the control plane, and the connector's agent token
  std::string cluster;       // the Meridian Cluster (backend: slurm) its nodes join
  // What its Slurm jobs' names carry (meridian-INSTANCE-JOB-GENERATION), so that Slurm jobs of
  // another Meridian installation, or of another connector, are never taken for its own (and
  // fenced); empty: the cluster's name.
  std::string instance;
  std::string slurm_conf;  // SLURM_CONF for every Slurm command; empty: Slurm's default
  // The partitions whose nodes Meridian may use (empty: every node); jobs are submitted to the
  // first, or to Slurm's default partition when none is named.
  std::vector<std::string> partitions;
  // The Slurm account each project's jobs are charged to, "*" for every project not named;
  // none: the user's default account.
  std::map<std::string, std::string> accounts;
  // The Unix user each project's jobs run as, "*" for every project not named (sbatch --uid and
  // --gid: the connector then runs as root). None: every job runs as the connector's own user.
  // With some, a job of a project that has none is refused.
  std::map<std::string, std::string> run_as;
  std::string node_prefix;  // Meridian's name of a Slurm node is this prefix and Slurm's name
  std::map<std::string, std::string> gpu_models;  // GRES type -> Meridian GPU model
  // Run folders (scripts, output, exit codes: on the filesystem that Slurm's nodes share with
  // the connector) and the nodes' credentials.
  std::string work_dir;
  double interval = 1.0;  // seconds between looks at Slurm (and heartbeats)
  // Slurm unreachable this long: its nodes' heartbeats stop, so that the server declares them
  // lost after its nodeLostTimeout and requeues their jobs, exactly once.
  double slurm_timeout = 30;
  // A run Slurm keeps pending this long (work Meridian does not manage took its nodes first) is
  // cancelled there and given back to Meridian's queue.
  double pending_timeout = 30;
};

// The user a run's job runs as (ConnectorOptions::run_as), when not the connector's own. Its
// job writes in a folder of its own in the run's folder (its output, exit codes and restarts;
// Slurm's own output), which only that user may write: the connector reads what is there as
// files of that user (ReadJobFile) and removes it without following links (RemoveTree).
struct JobUser {
  std::string name;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string home;
};
// The user of `uid`, as this host knows it (connector_users.cc); nullopt when it does not.
std::optional<JobUser> UserByUid(uint32_t uid);

// What `by_project` (ConnectorOptions::run_as, accounts) says for `project`, or for every
// project not named ("*"); nullptr when neither is there.
template <typename T>
const T* ForProject(const std::map<std::string, T>& by_project, const std::string& project) {
  auto it = by_project.find(project);
  if (it == by_project.end()) it = by_project.find("*");
  return it == by_project.end() ? nullptr : &it->second;
}

// A Slurm cluster as Meridian's back end (docs/adr/0037-slurm-connector.md). It runs where
// Slurm's commands work (a login node) and speaks for each Slurm node as that node's agent
// would: it registers the node (CPUs, memory, GPUs from GRES, and whether Slurm will start work
// there), heartbeats what Meridian's runs there do, and turns the assignments it is answered
// with into Slurm jobs. So the server's lifecycle, fencing, lost nodes, logs and quotas apply to
// Slurm's nodes unchanged; the connector never decides placement and never writes a phase.
//
// - A run (a job's generation) becomes one Slurm job named meridian-INSTANCE-JOB-GENERATION
//   (slurm_cli.h), on exactly
//   the nodes Meridian chose (--nodelist), its tasks through srun (as many on each node, as
//   Slurm asks; a run of one task in the batch step itself), each with its own GPUs
//   (--gpus-per-task), CPUs and memory, its runtime limit as --time, and its notice signal
//   before that limit.
// - A run the server asks to stop gets its notice signal at once, Slurm's stop (SIGTERM, then
//   SIGKILL after KillWait) at half its time left, and scancel again at its deadline.
// - A Slurm job of Meridian's that no answer lists (a stale generation, a job Meridian gave up)
//   is cancelled once every node it ran on has been heard from: fencing.
// - Each run's folder records its Slurm job before sbatch returns, so that a run is never
//   submitted twice, across restarts of the connector or of Slurm.
// Run() is its loop, a round every --interval; sbatch runs in submitter threads beside it, on
// copies of what a run needs (Order), and the round takes what came of it (Outcome). Round()
// alone, without Run(), submits nothing.
class SlurmConnector {
 public:
  explicit SlurmConnector(ConnectorOptions options);

  // Loops until `stop`; fails only on a local problem (the work directory).
  base::Status Run(const std::atomic<bool>& stop);
  // One look at Slurm, one heartbeat per node, and what the answers ask for.
  base::Status Round();

 private:
  // GPUs, CPUs and memory of a node held by jobs.
  struct Held {
    int32_t gpus = 0;
    int32_t cpus = 0;
    int64_t memory_mib = 0;
    bool operator==(const Held&) const = default;
  };
  struct Link {  // one Slurm node, as its agent
    std::string slurm_name;
    protocol::Registration registration;
    bool registered = false;
    std::unique_ptr<cli::Client> client;  // with the node's credential once it has one
    bool heard = false;                   // its heartbeat was answered this round
    // What Slurm's own users' jobs hold: as registered, and as last counted (a count is
    // registered once two looks in a row agree, as sinfo and squeue are not read at one instant).
    Held foreign, foreign_seen;
    // What the connector did on its own on this node (a fenced Slurm job): events of the node,
    // sent with each heartbeat until one is answered (at most kMaxNotices kept).
    std::vector<protocol::NodeNotice> notices;
  };
  struct TaskState {
    protocol::Assignment assignment;
    std::string node;      // Meridian's node name
    int64_t uploaded = 0;  // bytes of output the server has
  };
  // How a run's tasks were started (InBatchStep in connector.cc), as its folder records it: how
  // its notice and an immediate kill reach them. Unknown for a run found in squeue whose folder
  // is gone.
  enum class Launch { kUnknown, kSrun, kBatchStep };
  struct RunState {
    RunTag tag;
    Launch launch = Launch::kUnknown;
    std::string files;  // where its job writes; empty: the run's own folder (runs from before)
    std::optional<JobUser> user;  // none: the connector's own user
    // Since when every task's exit code has been there while Slurm still shows the job (0: not
    // so): the connector's own clock, not the files' times, which the job may set.
    double exits_seen_at = 0;
    // Since when no answer lists it and Slurm shows it ended (0: not so): its output is
    // uploaded until then and a while after, not for as long as a job's process grows it.
    double ended_at = 0;
    int removal_rounds = 0;              // rounds its folder's removal has taken (Cleanup)
    std::map<int32_t, TaskState> tasks;  // as last assigned
    int64_t slurm_id = 0;                // 0: not submitted
    bool submitted = false;              // sbatch was run (the folder says so)
    std::string slurm_state;             // as squeue last showed it; "GONE" once it left squeue
    std::string slurm_reason;
    int64_t wait_status = 0;
    std::string refused;    // sbatch's refusal
    bool stop = false;      // the server asked for a stop
    double noticed_at = 0;  // the notice signal was sent (0: not yet)
    double term_at = 0, kill_at = 0;
    bool termed = false, killed = false;
    double kill_ordered_at = 0;   // KillNow's order went to the batch shell (0: not yet)
    bool kill_cancelled = false;  // and Slurm's cancel followed it (FollowKillOrders)
    bool listed = false;          // an answer listed it this round
    bool in_flight = false;       // handed to the submitters, its outcome not yet taken
    // Since when Slurm has shown it pending without a break (0: not pending), and whether it was
    // ever seen running (then it is never given back: its tasks may still run).
    double pending_since = 0;
    bool ran = false;
    std::string give_back_why;  // cancelled while pending; given back once squeue says so
    std::string given_back;     // why it was cancelled in Slurm and given back to Meridian's queue
    std::string slurm_nodes;    // Slurm's host list of it, as squeue shows it
  };

  base::Status LoadRuns();  // the run folders an earlier life left
  // `others`: the other users whose jobs `jobs` holds (OtherUsers when asked): a run of a user
  // not among them is left as it was, not taken for ended.
  void Observe(const std::vector<SlurmJob>& jobs, const std::set<uint32_t>& others);
  void Sync(const std::vector<SlurmNode>& nodes);  // registrations
  base::Status Register(Link& link);
  void Beat(Link& link);
  std::vector<protocol::TaskReport> ReportsFor(const std::string& node) const;
  void Act();
  // A run handed to the submitters, with what Submit needs copied, so that the round goes on
  // beside it; and what came of it, applied to the run by the round (TakeOutcomes).
  struct Order {
    RunTag tag;
    std::map<int32_t, TaskState> tasks;
    std::map<std::string, std::string> slurm_names;  // Meridian node -> Slurm node
    double deadline = 0;  // the lease's end when handed over: not submitted after it
  };
  struct Outcome {
    RunTag tag;
    bool submitted = false;  // its folder says so: never submitted again
    Launch launch = Launch::kUnknown;
    std::string files;
    std::optional<JobUser> user;
    int64_t slurm_id = 0;     // 0: sbatch refused it, or its answer was lost
    std::string slurm_state;  // PENDING; SUBMITTING: taken or not, nobody knows yet
    double pending_since = 0;
    std::string refused, given_back;
  };
  // Writes the run's folder and runs sbatch; reads nothing the round changes.
  Outcome Submit(const Order& order) const;
  void Submitter();        // one of kSubmitters threads: submits orders until stopping_
  bool SubmissionsDone();  // outcomes wait to be taken, and no order waits for a submitter
  bool NothingOut();       // no order waits for a submitter or is being submitted
  void TakeOutcomes();
  void Stop(RunState& run);
  void Fence();
  // Says `message` in an event of the run's first node (of any node when its tasks are unknown).
  void Notify(const RunState& run, const std::string& reason, const std::string& message);
  void UploadLogs();
  void Cleanup();
  std::string RunDir(const RunTag& tag) const;
  // A task's output (".out") or exit code (".exit", written by the wrapper) in its job's folder.
  std::string TaskFile(const RunState& run, int32_t task, const char* ext) const;
  // The user a project's jobs run as; nullptr: the connector's own user (or none, when others
  // have users: ResolveUsers' run_as_ is then not empty).
  const JobUser* UserOf(const std::string& project) const;
  // run_as_ from the options, once, before the first round, and what they need of the work
  // directory (connector_users.cc).
  base::Status ResolveUsers();
  uint32_t OwnerOf(const RunState& run) const { return run.user ? run.user->uid : own_.uid; }
  // The users other than the connector's own whose jobs it must see (those of run_as_, of the
  // runs it keeps, across a change of --run-as, and of unanswered submissions), of those this
  // host still knows: squeue leaves out a user it cannot resolve, and says nothing.
  std::set<uint32_t> OtherUsers() const;
  // Jobs of other users whose sbatch never answered are looked for by name among their users'
  // jobs (SlurmCli::JobsNamed): those of runs it keeps, and those of runs given back and gone
  // (unanswered_), which are then taken up again to be fenced.
  void FindUnanswered();
  // Makes the run's folder (the connector's, 0711) and the job's in it (its user's, 0700), and
  // writes the job's script there, its user's alone (it holds the job's environment).
  base::Status MakeRunFolder(const std::string& dir, const std::string& files,
                             const std::string& script, const JobUser& user) const;
  // sbatch's whole environment, and so the job's: the user's, nothing of the connector's.
  std::map<std::string, std::string> JobEnv(const JobUser& user) const;
  // sbatch_env_, from this process's environment.
  static std::map<std::string, std::string> SbatchEnv();
  // The node as its agent would register it, with what Slurm's own users' work holds: `foreign`
  // GPUs (none that Meridian's runs hold) marked as such, and its CPUs and memory.
  protocol::Registration RegistrationOf(const SlurmNode& node, const Held& foreign,
                                        const std::set<int32_t>& ours) const;
  // Per node, the GPU indices Meridian's runs hold, and what of it Slurm runs now (in Slurm's
  // units: whole CPUs, as --cpus-per-task asked): worked out once a round for every node.
  struct NodeUse {
    std::set<int32_t> devices;
    Held running;
  };
  std::map<std::string, NodeUse> MeridianUse() const;
  // Whether every node `run` is on was heard from this round (every node, when its tasks are
  // not known): only then can no answer still list it.
  bool HeardFromAll(const RunState& run) const;
  void GiveBackStuck();
  // Kills a Slurm job at once (SIGKILL to its steps, then cancels it), not after Slurm's KillWait:
  // what the server counts as stopped (a lost lease, a fenced run) must not run on.
  base::Status KillNow(RunState& run);
  // Slurm's cancel of a run whose batch shell was ordered to kill its task (KillNow) and that
  // Slurm still shows running kKillOrderTime later: the order was lost, or the wrapper hung.
  void FollowKillOrders();
  static constexpr double kKillOrderTime = 2;
  // The server silent past the lease: every Slurm job of Meridian's is killed.
  void EnforceLease();

  // Keeps the cluster's doorbell: a wait on the bell of the whole cluster (ADR 0030), under the
  // credential of one of its nodes, so that new orders and stops start a round at once rather
  // than at the next interval.
  void KeepBell();

  ConnectorOptions o_;
  SlurmCli slurm_;
  std::map<std::string, JobUser> run_as_;  // by project ("*": every other)
  JobUser own_;  // the connector's own user (set once, by the constructor)
  // What every sbatch runs with besides its job user's HOME, USER and LOGNAME (JobEnv): PATH,
  // how Slurm's commands find the cluster, the operator's SBATCH_* defaults. Read once.
  std::map<std::string, std::string> sbatch_env_;
  // Runs of other users whose sbatch never answered, gone from runs_ (given back, cleaned up):
  // looked for by name until `until`, so that a job Slurm took after all is found and fenced.
  struct Unanswered {
    uint32_t uid = 0;
    double until = 0;
  };
  std::map<RunTag, Unanswered> unanswered_;
  static constexpr double kUnansweredWatch = 600;
  std::map<std::string, Link> links_;  // by Meridian node name
  std::unique_ptr<agent::OrdersWaiter> bell_;
  std::string bell_node_, bell_token_;  // whose credential the wait is under
  std::map<RunTag, RunState> runs_;
  double slurm_seen_at_ = 0;   // Slurm last answered
  double server_seen_at_ = 0;  // a heartbeat was last answered
  // When each node's heartbeat was last answered (kept for a node that left Slurm's
  // partitions: its runs' lease runs out from then).
  std::map<std::string, double> answered_at_;
  double lease_ = 15;  // from the server's terms
  // Several sbatch at once: Slurm takes them faster so.
  static constexpr size_t kSubmitters = 16;
  static constexpr size_t kMaxUnstarted = 128;
  std::mutex submit_mu_;  // guards orders_, outcomes_, submitting_ and stopping_
  std::condition_variable submit_cv_;
  std::deque<Order> orders_;
  std::vector<Outcome> outcomes_;
  size_t submitting_ = 0;  // orders a submitter has taken and not yet handed back
  bool stopping_ = false;
  std::vector<std::thread> submitters_;
  size_t queued_ = 0;                         // orders handed over, for the log
  mutable std::atomic<size_t> submitted_{0};  // sbatch runs, for the log
  size_t logged_submitted_ = 0;               // submitted_ at the last round's log line
  bool slurm_lost_said_ = false;
};

}  // namespace meridian::slurm
