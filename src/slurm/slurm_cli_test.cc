#include "slurm/slurm_cli.h"

#include <gtest/gtest.h>

namespace meridian::slurm {
namespace {

// What Slurm 22.05's `sinfo --json` writes (abridged from real output).
const char* kSinfo2205 = R"J({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [],
  "nodes": [
    {"name": "n1", "address": "127.0.0.1", "cpus": 16, "real_memory": 64000,
     "gres": "gpu:h100:4", "gres_used": "gpu:h100:2(IDX:0-1)", "state": "mixed",
     "state_flags": [], "reason": "", "partitions": ["gpu"]},
    {"name": "n4", "cpus": 16, "real_memory": 64000, "gres": "gpu:h100:4",
     "gres_used": "gpu:h100:0(IDX:N/A)", "state": "idle", "state_flags": ["DRAIN"],
     "reason": "maintenance", "partitions": ["gpu", "debug"]}]})J";

// What 23.02 and later write: states as lists of flags, numbers as {set, infinite, number},
// exit codes as objects.
const char* kSinfo2311 = R"J({"nodes": [
    {"name": "n1", "cpus": 16, "real_memory": {"set": true, "infinite": false, "number": 64000},
     "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:3(IDX:0-2)", "state": ["IDLE", "DRAIN"],
     "reason": "bad fan", "partitions": ["gpu"]}]})J";

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

// A line as the connector's squeue (slurm_cli.cc, kSqueueFields) writes it: the fields, each ended
// by the unit separator, then the name.
std::string Line(const std::vector<std::string>& fields, const std::string& name) {
  std::string out;
  for (const std::string& f : fields) out += f + "\x1f";
  return out + name + "\n";
}

TEST(SlurmCli, JobsDecodeFromSqueuesLines) {
  // As Slurm 22.05 wrote them here: a job that exited with code 3, one killed by SIGKILL, one
  // running on two nodes, one pending, and names with a '|' and a space in them.
  const std::string squeue =
      Line({"3", "FAILED", "NonZeroExitCode", "768", "gpu", "root", "n1"}, "meridian-hpc-1-1") +
      Line({"5", "CANCELLED", "None", "9", "gpu", "root", "n2"}, "meridian-hpc-2-3") +
      Line({"4", "RUNNING", "None", "0", "gpu", "alice", "n[2-3]"}, "alice-training") +
      Line({"6", "PENDING", "Resources", "0", "gpu", "bob", ""}, "odd|name with space");
  auto jobs = DecodeJobLines(squeue);
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 4u);
  const SlurmJob& failed = (*jobs)[0];
  EXPECT_EQ(failed.id, 3);
  EXPECT_EQ(failed.state, "FAILED");
  EXPECT_EQ(failed.reason, "NonZeroExitCode");
  EXPECT_EQ(failed.exit_code, 3 << 8);
  EXPECT_EQ(failed.partition, "gpu");
  EXPECT_EQ(failed.user, "root");
  EXPECT_EQ(failed.nodes, "n1");
  EXPECT_EQ(failed.name, "meridian-hpc-1-1");
  EXPECT_FALSE(failed.Active());
  EXPECT_EQ((*jobs)[1].exit_code, 9);  // killed by SIGKILL
  EXPECT_TRUE((*jobs)[2].Active()) << "a running job must never read as ended";
  EXPECT_EQ((*jobs)[2].nodes, "n[2-3]");
  EXPECT_EQ((*jobs)[3].nodes, "");
  EXPECT_EQ((*jobs)[3].name, "odd|name with space");
  EXPECT_TRUE((*jobs)[3].Active());
  auto none = DecodeJobLines("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(SlurmCli, AJobWhoseStateCannotBeReadRefusesTheWholeAnswer) {
  // Read as ended, a running job would be reported exited and never fenced.
  const std::string ok = Line({"1", "RUNNING", "None", "0", "gpu", "root", "n1"}, "x");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {Line({"1", "", "None", "0", "gpu", "root", "n1"}, "x"), "line 1: job state \"\""},
      {Line({"1", "running now", "None", "0", "gpu", "root", "n1"}, "x"),
       "line 1: job state \"running now\""},
      {ok + Line({"2", "RUNNING", "None", "zero", "gpu", "root", "n1"}, "y"),
       "line 2: exit code \"zero\" is not a wait status"},
      {Line({"1_[0-2]", "PENDING", "None", "0", "gpu", "root", ""}, "x"),
       "line 1: job ID \"1_[0-2]\""},
      {"1\x1fRUNNING\x1fNone\x1f"
       "0\n",
       "line 1: 4 fields where 8 were asked for"},
      // A name with a line break in it: the rest of the name reads as a line, here as a forged
      // end of job 1.
      {Line({"1", "RUNNING", "None", "0", "gpu", "root", "n1"}, "a\n") +
           Line({"1", "COMPLETED", "None", "0", "gpu", "root", "n1"}, "meridian-hpc-1-1"),
       "line 3: job 1 shown twice"}};
  for (const auto& [text, says] : bad) {
    auto jobs = DecodeJobLines(text);
    ASSERT_FALSE(jobs.ok()) << text;
    EXPECT_NE(jobs.status().message().find(says), std::string::npos) << jobs.status().message();
  }
  EXPECT_FALSE(DecodeJobLines("1|RUNNING|None|0|gpu|root|n1|x\n").ok())
      << "the fields are ended by the unit separator, not '|'";
  EXPECT_FALSE(DecodeNodes(Json::parse(R"J({"nodes": [{"name": "n1", "state": 3}]})J")).ok());
}

TEST(SlurmCli, JobsOfOtherUsersDecodeWithoutTheirNamesOrReasons) {
  // squeue --user=... without what a job's owner may write (SlurmCli::JobsOf): six fields, each
  // ended by the unit separator, and nothing after them; such a job has no name and no reason.
  auto jobs =
      DecodeJobLines(Line({"7", "RUNNING", "0", "gpu", "alice", "n1"}, ""), JobNames::kWithout);
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id, 7);
  EXPECT_EQ((*jobs)[0].state, "RUNNING");
  EXPECT_EQ((*jobs)[0].partition, "gpu");
  EXPECT_EQ((*jobs)[0].user, "alice");
  EXPECT_EQ((*jobs)[0].nodes, "n1");
  EXPECT_EQ((*jobs)[0].name, "");
  EXPECT_EQ((*jobs)[0].reason, "");
  // A job's owner may complete its job with any exit code (slurm_complete_job): 0xFFFFFFFF
  // prints as -1, and must not refuse the answer (every node would go silent).
  auto odd = DecodeJobLines(Line({"8", "FAILED", "-1", "gpu", "alice", "n1"}, "") +
                                Line({"9", "FAILED", "-2147483648", "gpu", "alice", "n1"}, ""),
                            JobNames::kWithout);
  ASSERT_TRUE(odd.ok()) << odd.status().message();
  EXPECT_EQ((*odd)[0].exit_code, 0xFFFFFFFFLL);
  EXPECT_EQ((*odd)[1].exit_code, 0x80000000LL);
  for (const std::string& bad : {Line({"7", "RUNNING", "0", "gpu", "alice", "n1"}, "x"),
                                 Line({"7", "RUNNING", "None", "0", "gpu", "alice", "n1"}, "")}) {
    auto more = DecodeJobLines(bad, JobNames::kWithout);
    ASSERT_FALSE(more.ok()) << bad;
    EXPECT_NE(more.status().message().find("were asked for"), std::string::npos)
        << more.status().message();
  }
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

TEST(SlurmCli, ACommandRunWithOnlyItsEnvironmentGetsNothingOfThisProcesss) {
  // What sbatch passes on to a job: the connector's token must not be in it.
  ::setenv("MERIDIAN_TOKEN", "secret", 1);
  auto r =
      base::RunCommandWithOnly({"/usr/bin/env"}, {{"PATH", "/usr/bin:/bin"}, {"X", "1"}}, "", 10);
  ::unsetenv("MERIDIAN_TOKEN");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "PATH=/usr/bin:/bin\nX=1\n");
}

}  // namespace
}  // namespace meridian::slurm
