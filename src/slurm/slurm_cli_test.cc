#include "slurm/slurm_cli.h"

#include <gtest/gtest.h>

namespace meridian::slurm {
namespace {

// What Slurm 22.05's `sinfo --json` and `squeue --json` write (abridged from real output).
const char* kSinfo2205 = R"J({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [],
  "nodes": [
    {"name": "n1", "address": "127.0.0.1", "cpus": 16, "real_memory": 64000,
     "gres": "gpu:h100:4", "gres_used": "gpu:h100:2(IDX:0-1)", "state": "mixed",
     "state_flags": [], "reason": "", "partitions": ["gpu"]},
    {"name": "n4", "cpus": 16, "real_memory": 64000, "gres": "gpu:h100:4",
     "gres_used": "gpu:h100:0(IDX:N/A)", "state": "idle", "state_flags": ["DRAIN"],
     "reason": "maintenance", "partitions": ["gpu", "debug"]}]})J";

const char* kSqueue2205 = R"J({"jobs": [
    {"job_id": 3, "name": "meridian-1-1", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
     "exit_code": 768, "partition": "gpu", "user_name": "root", "nodes": "n1"},
    {"job_id": 4, "name": "alice-training", "job_state": "RUNNING", "state_reason": "None",
     "exit_code": 0, "nodes": "n[2-3]"},
    {"job_id": 5, "name": "meridian-2-3", "job_state": "CANCELLED", "exit_code": 9}]})J";

// What 23.02 and later write: states as lists of flags, numbers as {set, infinite, number},
// exit codes as objects.
const char* kSinfo2311 = R"J({"nodes": [
    {"name": "n1", "cpus": 16, "real_memory": {"set": true, "infinite": false, "number": 64000},
     "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:3(IDX:0-2)", "state": ["IDLE", "DRAIN"],
     "reason": "bad fan", "partitions": ["gpu"]}]})J";

const char* kSqueue2311 = R"J({"jobs": [
    {"job_id": 7, "name": "meridian-9-2", "job_state": ["RUNNING"], "state_reason": "None",
     "exit_code": {"status": ["RUNNING"], "return_code": {"set": true, "number": 0}}},
    {"job_id": 8, "name": "meridian-9-1", "job_state": ["FAILED"],
     "exit_code": {"status": ["ERROR"], "return_code": {"set": true, "number": 3},
                   "signal": {"id": {"set": false, "number": 0}, "name": ""}}},
    {"job_id": 9, "name": "x", "job_state": ["CANCELLED"],
     "exit_code": {"status": "SIGNALED", "return_code": 0, "signal": {"id": 9, "name": "KILL"}}}]})J";

TEST(SlurmCli, NodesOf2205AndOfLaterReleasesDecodeAlike) {
  auto old = DecodeNodes(Json::parse(kSinfo2205));
  ASSERT_TRUE(old.ok()) << old.status().message();
  ASSERT_EQ(old->size(), 2u);
  EXPECT_EQ((*old)[0].gpus, 4);
  EXPECT_EQ((*old)[0].gpus_used, 2);
  EXPECT_EQ((*old)[0].gpu_type, "h100");
  EXPECT_EQ((*old)[0].Unavailable(), "");
  EXPECT_EQ((*old)[1].Unavailable(), "drained in Slurm: maintenance");
  EXPECT_EQ((*old)[1].partitions, (std::vector<std::string>{"gpu", "debug"}));

  auto later = DecodeNodes(Json::parse(kSinfo2311));
  ASSERT_TRUE(later.ok()) << later.status().message();
  const SlurmNode& n = (*later)[0];
  EXPECT_EQ(n.memory_mib, 64000);
  EXPECT_EQ(n.gpus, 8);
  EXPECT_EQ(n.gpus_used, 3);
  EXPECT_EQ(n.gpu_type, "a100");
  EXPECT_EQ(n.state, "IDLE");
  EXPECT_EQ(n.Unavailable(), "drained in Slurm: bad fan");
}

TEST(SlurmCli, JobsOf2205AndOfLaterReleasesDecodeAlike) {
  auto old = DecodeJobs(Json::parse(kSqueue2205));
  ASSERT_TRUE(old.ok()) << old.status().message();
  ASSERT_EQ(old->size(), 3u);
  EXPECT_EQ((*old)[0].state, "FAILED");
  EXPECT_EQ((*old)[0].exit_code, 768);  // code 3
  EXPECT_TRUE((*old)[1].Active());
  EXPECT_FALSE((*old)[2].Active());

  auto later = DecodeJobs(Json::parse(kSqueue2311));
  ASSERT_TRUE(later.ok()) << later.status().message();
  EXPECT_EQ((*later)[0].state, "RUNNING");
  EXPECT_TRUE((*later)[0].Active()) << "a running job must never read as ended";
  EXPECT_EQ((*later)[1].exit_code, 3 << 8);
  EXPECT_EQ((*later)[2].exit_code, 9);  // killed by SIGKILL
}

TEST(SlurmCli, AJobWhoseStateCannotBeReadRefusesTheWholeAnswer) {
  // Read as ended, a running job would be reported exited and never fenced.
  const std::vector<std::string> bad = {
      R"J({"jobs": [{"job_id": 1, "name": "meridian-1-1", "job_state": {"now": "RUNNING"}}]})J",
      R"J({"jobs": [{"job_id": 1, "job_state": "RUNNING", "exit_code": "zero"}]})J",
      R"J({"jobs": [{"name": "meridian-1-1", "job_state": "RUNNING"}]})J", R"J({"nodes": []})J",
      R"J([1, 2])J"};
  for (const std::string& b : bad) EXPECT_FALSE(DecodeJobs(Json::parse(b)).ok()) << b;
  EXPECT_FALSE(DecodeNodes(Json::parse(R"J({"nodes": [{"name": "n1", "state": 3}]})J")).ok());
}

TEST(SlurmCli, GresAndRunTags) {
  EXPECT_EQ(ParseGpuGres("gpu:h100:4").count, 4);
  EXPECT_EQ(ParseGpuGres("gpu:4(S:0-1)").count, 4);
  EXPECT_EQ(ParseGpuGres("gpu:4(S:0-1)").type, "");
  EXPECT_EQ(ParseGpuGres("tmpdisk:100,gpu:a100:2").type, "a100");
  EXPECT_EQ(ParseGpuGres("(null)").count, 0);
  EXPECT_EQ(ParseGpuGres("gpu:a100:x").count, 0);
  EXPECT_EQ(TagName({42, 3}, "hpc"), "meridian-hpc-42-3");
  auto tag = ParseTagName("meridian-hpc-42-3");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->tag, (RunTag{42, 3}));
  EXPECT_EQ(tag->instance, "hpc");
  // An instance may have dashes and digits: the job and generation are the last two fields.
  tag = ParseTagName(TagName({7, 1}, "lab-2"));
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->tag, (RunTag{7, 1}));
  EXPECT_EQ(tag->instance, "lab-2");
  // Names from before instances.
  tag = ParseTagName("meridian-42-3");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->tag, (RunTag{42, 3}));
  EXPECT_EQ(tag->instance, "");
  for (const char* not_ours : {"meridian-42", "meridian--3", "meridian-4x-3", "alice-42-3",
                               "meridian-42-3-", "meridian-99999999999999999999-1",
                               "meridian-hpc--3", "meridian-h p c-4-3", "meridian-hpc-4x-3"}) {
    EXPECT_FALSE(ParseTagName(not_ours)) << not_ours;
  }
  EXPECT_TRUE(ValidInstance("hpc_eu-1.b"));
  EXPECT_FALSE(ValidInstance(""));
  EXPECT_FALSE(ValidInstance("a/b"));
  EXPECT_FALSE(ValidInstance(std::string(65, 'a')));
}

TEST(SlurmCli, RunCommandFeedsItsInputAndSaysHowItEnded) {
  auto r = RunCommand({"sh", "-c", "cat; echo err >&2; exit 3"}, {{"X", "1"}}, "hello\n", 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "hello\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  auto env = RunCommand({"sh", "-c", "printf %s \"$X\""}, {{"X", "given"}}, "", 10);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->out, "given");
  auto slow = RunCommand({"sleep", "5"}, {}, "", 0.3);
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.status().message().find("did not answer"), std::string::npos);
  EXPECT_FALSE(RunCommand({"/nonexistent/command"}, {}, "", 5).ok());
}

}  // namespace
}  // namespace meridian::slurm
