#include "domain/failure_cause.h"

#include <array>
#include <csignal>
#include <cstring>
#include <utility>

namespace meridian::domain {

namespace {

constexpr std::array<std::pair<FailureCause, std::string_view>, 16> kNames = {{
    {FailureCause::kNone, "none"},
    {FailureCause::kExitCode, "exit-code"},
    {FailureCause::kOomKilled, "oom-killed"},
    {FailureCause::kSignal, "signal"},
    {FailureCause::kCommandNotFound, "command-not-found"},
    {FailureCause::kPermissionDenied, "permission-denied"},
    {FailureCause::kImageMissing, "image-missing"},
    {FailureCause::kRuntimeLimit, "runtime-limit"},
    {FailureCause::kLeaseLost, "lease-lost"},
    {FailureCause::kNodeLost, "node-lost"},
    {FailureCause::kGpuFault, "gpu-fault"},
    {FailureCause::kCudaOutOfMemory, "cuda-out-of-memory"},
    {FailureCause::kNcclError, "nccl-error"},
    {FailureCause::kNotStarted, "not-started"},
    {FailureCause::kDependency, "dependency"},
    {FailureCause::kStagingFailed, "staging-failed"},
}};

bool Contains(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

bool AnyOf(const std::string& text, std::initializer_list<std::string_view> needles) {
  for (std::string_view n : needles) {
    if (Contains(text, n)) return true;
  }
  return false;
}

std::string SignalName(int64_t signal) {
  switch (signal) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGSEGV:
      return "SIGSEGV (a segmentation fault)";
    case SIGABRT:
      return "SIGABRT (it aborted)";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal " + std::to_string(signal);
  }
}

Diagnosis Say(FailureCause cause, std::string summary) { return {cause, std::move(summary)}; }

}  // namespace

std::string_view CauseName(FailureCause cause) {
  for (const auto& [c, name] : kNames) {
    if (c == cause) return name;
  }
  return "exit-code";
}

std::optional<FailureCause> ParseCause(std::string_view name) {
  for (const auto& [c, n] : kNames) {
    if (n == name) return c;
  }
  return std::nullopt;
}

// The strongest evidence first: what the supervisor did, then the kernel's and the GPU's word,
// then what the program printed, then its exit status.
Diagnosis Diagnose(const ExitFacts& f) {
  if (f.exit_code && *f.exit_code == 0) return {};
  if (f.stop_reason == kRuntimeLimitReason) {
    return Say(FailureCause::kRuntimeLimit, std::string(kRuntimeLimitReason));
  }
  if (f.stop_reason == kLeaseLostReason) {
    return Say(FailureCause::kLeaseLost, std::string(kLeaseLostReason));
  }
  if (f.stop_requested) return {};  // it was asked to stop: however it ended is no failure
  if (!f.staging_error.empty()) return Say(FailureCause::kStagingFailed, f.staging_error);
  if (f.oom_kills > 0) {
    return Say(FailureCause::kOomKilled,
               "killed for memory: its cgroup's OOM killer ran" +
                   (f.memory_limit_mib > 0
                        ? " (limit " + std::to_string(f.memory_limit_mib) + " MiB; raise memoryMib)"
                        : std::string()));
  }
  if (f.xid) {
    return Say(FailureCause::kGpuFault, "a GPU fault during the run (XID " +
                                            std::to_string(*f.xid) + " on one of its GPUs)");
  }
  const std::string& out = f.output_tail;
  if (AnyOf(out, {"CUDA out of memory", "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
                  "cudaErrorMemoryAllocation"})) {
    return Say(FailureCause::kCudaOutOfMemory,
               "CUDA ran out of GPU memory (see the end of its output): a smaller batch, or more "
               "GPU memory");
  }
  if (Contains(out, "NCCL") &&
      AnyOf(out, {"timeout", "Timeout", "timed out", "Watchdog caught collective", "NCCL error",
                  "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError",
                  "ncclRemoteError"})) {
    return Say(FailureCause::kNcclError,
               "NCCL failed or timed out (see the end of its output): often another task of the "
               "gang failed first, or the network between nodes");
  }
  if (f.image && f.exit_code && *f.exit_code == 125 &&
      AnyOf(out, {"image not known", "manifest unknown", "pull access denied",
                  "Unable to find image", "No such image", "failed to resolve"})) {
    return Say(FailureCause::kImageMissing, "its image could not be found or pulled");
  }
  if (!f.exit_code) {
    return Say(FailureCause::kNotStarted,
               f.stop_reason.empty() ? "it ended without an exit status" : f.stop_reason);
  }
  const int64_t code = *f.exit_code;
  if (code == 127) {
    return Say(FailureCause::kCommandNotFound,
               "its command was not found; check spec.command, or the image's PATH");
  }
  if (code == 126) {
    return Say(FailureCause::kPermissionDenied,
               "its command could not be run (not executable, or not permitted)");
  }
  if (f.signal || code > 128) {
    const int64_t sig = f.signal ? *f.signal : code - 128;
    return Say(FailureCause::kSignal, "killed by " + SignalName(sig));
  }
  return Say(FailureCause::kExitCode, "exited with code " + std::to_string(code));
}

}  // namespace meridian::domain
