#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

// Why a task ended badly, in words a user acts on: "killed for memory" rather than "exit 137".
// The agent gathers what it knows of a run's end (ExitFacts) and Diagnose names the cause; the
// cause travels with the task's report, into the job's status, its events and `describe job`.
namespace meridian::domain {

enum class FailureCause {
  kNone,              // exited 0, or stopped on request
  kExitCode,          // exited non-zero, nothing more known
  kOomKilled,         // its cgroup's OOM killer ran
  kSignal,            // killed by a signal nobody asked for
  kCommandNotFound,   // exit 127: the program is not there
  kPermissionDenied,  // exit 126: the program cannot be run
  kImageMissing,      // the container runtime could not find or pull the image
  kRuntimeLimit,      // the job's runtimeLimit ran out
  kLeaseLost,         // its agent lost the server for longer than its lease
  kNodeLost,          // its node stopped answering; the server gave it up
  kGpuFault,          // a GPU of the task reported an XID error during the run
  kCudaOutOfMemory,   // the framework said CUDA ran out of memory
  kNcclError,         // NCCL timed out or failed (a collective across tasks)
  kNotStarted,        // the task could not be started at all (its message says why)
  kDependency,        // a dependency of the job can never be satisfied (it never ran)
  kStagingFailed,     // a dataset could not be copied to the site's cache (it never ran)
};

std::string_view CauseName(FailureCause cause);  // "oom-killed", "gpu-fault", ...
std::optional<FailureCause> ParseCause(std::string_view name);

// The reasons the task's supervisor (agent/shim) gives when it stops a task on its own.
inline constexpr std::string_view kRuntimeLimitReason = "runtime limit reached";
inline constexpr std::string_view kLeaseLostReason =
    "the agent lost the server for longer than its lease";

// What the agent knows when a run has ended.
struct ExitFacts {
  std::optional<int64_t> exit_code;  // none: it never ran, or its supervisor vanished
  std::optional<int64_t> signal;     // the signal that ended it, when one did
  std::string stop_reason;           // the supervisor's reason when it stopped the task
  bool stop_requested = false;       // the server or agent asked for the stop
  int64_t oom_kills = 0;             // by the task's cgroup during the run
  int64_t memory_limit_mib = 0;      // the cgroup's limit (0: none)
  std::optional<int64_t> xid;        // the last XID on one of its GPUs during the run
  bool image = false;                // it ran in a container
  std::string output_tail;           // the last few KiB of its output
  std::string staging_error;         // a dataset could not be staged: why (it never ran)
};

struct Diagnosis {
  FailureCause cause = FailureCause::kNone;
  std::string summary;  // one line; empty for kNone
};

Diagnosis Diagnose(const ExitFacts& facts);

}  // namespace meridian::domain
