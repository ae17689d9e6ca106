#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "domain/failure_cause.h"
#include "domain/job_spec.h"

// A job's life, in one place: its phases, and every transition between them as a pure function
// of the record, the input and `now`, returning the new record and the events that say why.
//
// What the control plane wants of a job (desired: run generation g; stop it by a deadline, and
// then requeue or cancel it) is kept apart from what its runners report (observed: each task
// placed, running or exited with a code), as Nomad keeps an allocation's desired and client
// status apart, so that neither side overwrites the other. Callers (the API for submit and
// cancel; the controller for place, preempt, requeue and node loss; the back ends' reports) ask
// for a transition and store what it returns; none of them writes a phase. A job's resources
// are free only once it leaves a phase that holds them (`Transition::released`): after every
// task has been observed stopped, or when its node is lost past the fencing deadline. That is
// what keeps two copies of a job from ever overlapping on the same devices.
namespace meridian::domain {

using Json = nlohmann::json;

enum class Phase { kPending, kPlaced, kRunning, kStopping, kSucceeded, kFailed, kCancelled };

std::string_view PhaseName(Phase phase);
std::optional<Phase> ParsePhase(std::string_view name);
bool IsTerminal(Phase phase);
// Placed, Running and Stopping: the phases in which a job holds devices on nodes.
bool HoldsResources(Phase phase);

// What a job in Stopping becomes once all of its tasks have stopped, weakest first: a later stop
// request replaces the intent only with a stronger one.
enum class StopIntent {
  kNone,
  kRequeue,  // preemption, drain: back to the queue
  kCancel,   // a user cancelled it
  kFail,     // one task failed for good: the others are stopped before the job fails
};

// One task of the current run, as its runner reported it.
struct TaskStatus {
  enum class State { kPlaced, kRunning, kExited };
  State state = State::kPlaced;
  std::optional<int64_t> exit_code;  // for kExited; none when the runner could not tell
  int64_t restarts = 0;              // in-place restarts by the runner (restartPolicy)
  std::string node;
  std::string message;  // the runner's word on why it stopped the task, when it did
  FailureCause cause = FailureCause::kNone;  // for kExited: why it ended badly, when it did
};

struct JobLife {
  Phase phase = Phase::kPending;
  std::string reason;      // why it is in its phase
  int64_t generation = 0;  // bumped by every placement; reports of another run are stale
  // Desired.
  StopIntent stop = StopIntent::kNone;  // set in Stopping only
  double stop_deadline = 0;             // the runner kills what still runs by then
  int64_t preempted_for = 0;            // the job whose preemption it is stopping for; 0: none
  // Observed, for `generation`: one entry per task while the job holds resources.
  std::vector<TaskStatus> tasks;
  int64_t requeues = 0;  // runs given up after a lost node (counted against maxRestarts)
  // Placements its runners gave back in a row, nothing of them started (a Slurm cluster that
  // keeps the job waiting for a reason Meridian cannot see), and the time before which it is
  // not placed again: from the second in a row on, each waits twice as long as the one before
  // (kRefusalBackoff, at most kRefusalBackoffMax). Both go back to 0 once a run starts.
  int64_t refusals = 0;
  double eligible_at = 0;
  // Why the job failed (its first failed task's cause); kNone unless it failed or is failing.
  FailureCause cause = FailureCause::kNone;
  double started_at = 0;
  double finished_at = 0;
};

inline constexpr double kRefusalBackoff = 30;       // seconds, after the second refusal
inline constexpr double kRefusalBackoffMax = 1800;  // seconds

struct LifeEvent {
  bool warning = false;
  std::string reason;  // CamelCase: Placed, Started, Preempted, Stopped, Cancelled, ...
  std::string message;
};

struct Transition {
  JobLife life;
  std::vector<LifeEvent> events;  // empty: nothing changed
  // The job left a phase that holds resources: what it held is free from now on.
  bool released = false;
};

// What a runner says of one task.
struct TaskReport {
  int32_t task = 0;
  int64_t generation = 0;
  TaskStatus::State state = TaskStatus::State::kRunning;  // kRunning or kExited
  std::optional<int64_t> exit_code;
  int64_t restarts = 0;
  std::string message;
  FailureCause cause = FailureCause::kNone;  // the runner's diagnosis of an exit (Diagnose)
  // With kExited: the task never started, and its runner gives the placement back (Slurm kept
  // the job waiting because work Meridian does not manage took its nodes). A Placed job returns
  // to the queue with the message as its reason; no restart is counted.
  bool refused = false;

  friend bool operator==(const TaskReport&, const TaskReport&) = default;
};

// What one dependency of a pending job names, as the store has it now: each (kind, job) pair of
// the job's `spec.dependencies`, with the phases of the jobs it stands for (an array's every
// element; for aftercorr, the element of the same index). `found` false: the job (or, for
// aftercorr, its element of that index) does not exist.
struct DependencyState {
  DependencyKind kind = DependencyKind::kAfterOk;
  int64_t job = 0;
  std::vector<Phase> phases;
  bool found = true;
};

// Whether a pending job's dependencies let it be queued.
struct DependencyVerdict {
  enum class State { kMet, kWaiting, kNever };
  State state = State::kMet;
  std::string reason;  // kWaiting: what it waits for; kNever: why it can never run
};

namespace lifecycle {

// Judges a pending job's dependencies, all of which must be met (Slurm's `,`): afterok wants
// every job it names Succeeded, afternotok every one ended otherwise (Failed or Cancelled),
// afterany every one ended, aftercorr the element of the same index Succeeded. One that can no
// longer be met (afterok on a job that failed or was cancelled, afternotok on one that
// succeeded, a job that is gone) makes the verdict kNever; otherwise the first one not met yet
// is what the job waits for.
DependencyVerdict JudgeDependencies(const std::vector<DependencyState>& dependencies);

// Pending -> Failed: a dependency can never be satisfied (JudgeDependencies said kNever). The job
// never ran; cause `dependency`, event `DependencyNeverSatisfied` with the reason.
base::Result<Transition> DependencyNeverMet(const JobLife& life, const std::string& why,
                                            double now);

// Pending -> Placed on `tasks` tasks, as a new generation. `where` names the nodes.
base::Result<Transition> Place(const JobLife& life, int32_t tasks, const std::string& where,
                               double now);

// What the control plane wants when it stops a job.
struct StopRequest {
  StopIntent intent = StopIntent::kRequeue;
  std::string reason;         // the job's reason from now on
  std::string event_reason;   // the event's: Preempted, Drained, Cancelled
  double deadline = 0;        // the runner kills what still runs by then
  int64_t preempted_for = 0;  // a preemption: the job it frees room for
};

// The control plane wants the job stopped: Placed or Running -> Stopping, to be requeued
// (preemption, drain) or cancelled once every task has stopped. A job already Stopping keeps the
// earlier deadline; a cancel overrides a requeue, never the other way round.
base::Result<Transition> RequestStop(const JobLife& life, const StopRequest& request, double now);

// A user cancels: a pending job ends at once; one that holds resources stops first (through
// RequestStop, so its devices stay taken until its tasks have stopped). Cancelling a job that
// is already being cancelled changes nothing; an ended job cannot be cancelled.
base::Result<Transition> Cancel(const JobLife& life, const std::string& by, double grace,
                                double now);

// What a runner on `node` reported of the current run. `task_nodes` is where each task of the
// current placement runs; reports of another generation, of a task not on `node` or out of
// range are stale and ignored. Moves Placed -> Running on the first running task, ends the job
// when every task exited 0 (Succeeded), fails it when one failed for good (at once when no
// other task still runs; through Stopping otherwise, so that its devices stay taken until the
// others have stopped), and completes a Stopping job once every task has exited (Pending,
// Cancelled or Failed, per its intent). A task its runner refused (TaskReport::refused) sends
// a Placed job of which nothing runs back to the queue, without counting a restart; once a task
// of the run has run, a refusal is an exit like any other.
Transition Report(const JobLife& life, const std::string& node,
                  const std::vector<TaskReport>& reports,
                  const std::vector<std::string>& task_nodes, int64_t max_restarts, double now);

// A back end with no runner to wait for (nodes declared by a pool) observes the stop at once.
base::Result<Transition> Stopped(const JobLife& life, const std::string& why, double now);

// Nodes of the job's tasks were lost, past their fencing deadline: what ran there is dead
// (`lost[i]`: task i's node is lost; empty: every task's). When no task of the job still runs
// elsewhere, its run is over: it is requeued (restartPolicy on-failure within maxRestarts, or it
// was being stopped for a requeue anyway), cancelled (it was being cancelled) or failed. When
// tasks on live nodes still run, it goes through Stopping with that intent, so that their devices
// stay taken until they are seen to stop.
base::Result<Transition> NodeLost(const JobLife& life, const std::string& node,
                                  const std::vector<bool>& lost, const RestartPolicy& policy,
                                  double now);

// A GPU fault took the job's run: an XID on a GPU it holds (`what` names it), or its node
// drained for one. The whole job stops (a gang's every task) and, once its tasks are seen to
// stop, is requeued by its restart policy (on-failure within maxRestarts, counted with the
// requeues of lost nodes) or fails with cause gpu-fault. Its devices stay taken meanwhile; what
// still runs is killed by `deadline`. Event `GpuFault`.
base::Result<Transition> GpuFault(const JobLife& life, const std::string& what,
                                  const RestartPolicy& policy, double deadline, double now);

// The placement is no longer valid (its nodes left the estate): back to the queue.
base::Result<Transition> Requeue(const JobLife& life, const std::string& why, double now);

}  // namespace lifecycle

// The stored form: the phase's name, and the observed and desired parts in the job's status
// object ({tasks: [{state, exitCode, restarts, node, message}], restarts, startedAt,
// finishedAt, stop: {intent, deadline}}), which the API shows as it is.
base::Result<JobLife> DecodeLife(std::string_view phase, std::string reason, int64_t generation,
                                 const Json& status);
// Writes `life` over the fields it owns in `status`, keeping any others.
void EncodeLife(const JobLife& life, Json* status);

}  // namespace meridian::domain
