#include "domain/failure_cause.h"

#include <gtest/gtest.h>

namespace meridian::domain {
namespace {

TEST(FailureCauseTest, EachEndHasTheCauseAUserActsOn) {
  struct Case {
    const char* name;
    ExitFacts facts;
    FailureCause cause;
    const char* says;  // part of the summary
  };
  auto exit = [](int64_t code) {
    ExitFacts f;
    f.exit_code = code;
    return f;
  };
  auto with = [](ExitFacts f, auto change) {
    change(f);
    return f;
  };
  const std::vector<Case> cases = {
      {"success", exit(0), FailureCause::kNone, ""},
      {"plain failure", exit(3), FailureCause::kExitCode, "exited with code 3"},
      {"oom, by the cgroup's counter",
       with(exit(137),
            [](ExitFacts& f) { f.signal = 9, f.oom_kills = 1, f.memory_limit_mib = 64; }),
       FailureCause::kOomKilled, "killed for memory: its cgroup's OOM killer ran (limit 64 MiB"},
      {"SIGKILL without an OOM is no OOM", with(exit(137), [](ExitFacts& f) { f.signal = 9; }),
       FailureCause::kSignal, "killed by SIGKILL"},
      {"segfault", exit(139), FailureCause::kSignal, "SIGSEGV"},
      {"missing program", exit(127), FailureCause::kCommandNotFound, "command was not found"},
      {"not executable", exit(126), FailureCause::kPermissionDenied, "could not be run"},
      {"runtime limit",
       with(exit(143), [](ExitFacts& f) { f.stop_reason = std::string(kRuntimeLimitReason); }),
       FailureCause::kRuntimeLimit, "runtime limit"},
      {"lost lease",
       with(exit(137), [](ExitFacts& f) { f.stop_reason = std::string(kLeaseLostReason); }),
       FailureCause::kLeaseLost, "lost the server"},
      {"asked to stop", with(exit(143), [](ExitFacts& f) { f.stop_requested = true; }),
       FailureCause::kNone, ""},
      {"a gpu fault", with(exit(1), [](ExitFacts& f) { f.xid = 79; }), FailureCause::kGpuFault,
       "XID 79"},
      {"cuda oom",
       with(exit(1),
            [](ExitFacts& f) {
              f.output_tail =
                  "Traceback...\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
                  "allocate 2.00 GiB\n";
            }),
       FailureCause::kCudaOutOfMemory, "CUDA ran out of GPU memory"},
      {"nccl timeout",
       with(exit(1),
            [](ExitFacts& f) {
              f.output_tail =
                  "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)";
            }),
       FailureCause::kNcclError, "NCCL failed or timed out"},
      {"image missing",
       with(exit(125),
            [](ExitFacts& f) {
              f.image = true;
              f.output_tail = "Error: docker.io/library/nope: image not known\n";
            }),
       FailureCause::kImageMissing, "image could not be found"},
      {"never ran", with(ExitFacts{}, [](ExitFacts& f) { f.stop_reason = "nothing to run"; }),
       FailureCause::kNotStarted, "nothing to run"},
      // The cgroup's word is stronger than what the program printed.
      {"oom beats text",
       with(exit(137),
            [](ExitFacts& f) {
              f.oom_kills = 2;
              f.output_tail = "NCCL timeout";
            }),
       FailureCause::kOomKilled, "killed for memory"},
  };
  for (const Case& c : cases) {
    const Diagnosis d = Diagnose(c.facts);
    EXPECT_EQ(d.cause, c.cause) << c.name << ": " << d.summary;
    EXPECT_NE(d.summary.find(c.says), std::string::npos) << c.name << ": " << d.summary;
    if (c.cause == FailureCause::kNone) {
      EXPECT_TRUE(d.summary.empty()) << c.name;
    }
  }
}

TEST(FailureCauseTest, NamesRoundTrip) {
  for (FailureCause c :
       {FailureCause::kNone, FailureCause::kExitCode, FailureCause::kOomKilled,
        FailureCause::kSignal, FailureCause::kCommandNotFound, FailureCause::kPermissionDenied,
        FailureCause::kImageMissing, FailureCause::kRuntimeLimit, FailureCause::kLeaseLost,
        FailureCause::kNodeLost, FailureCause::kGpuFault, FailureCause::kCudaOutOfMemory,
        FailureCause::kNcclError, FailureCause::kNotStarted}) {
    EXPECT_EQ(ParseCause(CauseName(c)), c) << CauseName(c);
  }
  EXPECT_FALSE(ParseCause("gremlins"));
}

}  // namespace
}  // namespace meridian::domain
