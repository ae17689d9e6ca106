// Idle-GPU reclamation end to end (docs/adr/0019-idle-reclamation.md): a real `meridian server`
// and a real agent on loopback whose GPUs are simulated (a fake: no NVIDIA GPU here; a task's
// GPU use is its spec's simulateUtilization). IdlePolicy documents are applied through the real
// CLI; an idle interactive job gets its notice, is stopped through the lifecycle after the grace
// and ends Cancelled, with its GPU-hours in its events and on /metrics; an exempt one and an
// idle inference job are left alone; an idle training job raises the job-idle alert and runs
// on. Timings: the defaults (a 2 s heartbeat) except the policies' idleFor and grace (4 s each,
// which IdlePolicy allows) and the jobs' gracePeriod (2 s, which a job spec allows).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
const std::string kSource = MERIDIAN_SOURCE_DIR;

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: east}
spec: {type: on-prem, region: eu-east}
---
kind: NodePool
metadata: {name: east-h100}
spec: {cluster: east, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: IdlePolicy
metadata: {name: notebooks}
spec:
  jobTypes: [interactive]
  action: reclaim
  threshold: 0.05
  idleFor: 4
  grace: 4
  exemptLabel: idle-exempt
---
kind: IdlePolicy
metadata: {name: training}
spec: {jobTypes: [training], action: alert, idleFor: 4}
---
kind: IdlePolicy
metadata: {name: serving}
spec: {jobTypes: [inference], action: none}
)";

class IdleReclaimE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Cli(kBinary, "apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate),
                      server_->url(), admin_);
    ASSERT_EQ(r.code, 0) << r.output;
    Json user = {{"spec", {{"roles", Json::array({{{"role", "agent"}}})}}}};
    ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/agents", admin_, user.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_,
                        Json{{"user", "agents"}, {"description", "test agents"}}.dump());
    ASSERT_EQ(t.status, 201) << t.text;
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    agent_ = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "east", "--pool", "east-h100", "--node", "n1",
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-n1"), "--cpu-milli", "16000", "--memory-mib",
                                 "65536"},
        dir_.File("agent-n1.log"));
    agent_->Start(server_->url(), t.body.value("token", ""));
  }

  int64_t Submit(const std::string& name, Json spec) {
    spec["gpus"] = 1;
    spec["command"] = {"sleep", "600"};
    spec["gracePeriod"] = 2;
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::vector<std::string> Events(int64_t id, const std::string& reason) {
    std::vector<std::string> out;
    for (const Json& e : JobEvents(*server_, admin_, id)) {
      if (e.value("reason", "") == reason) out.push_back(e.value("message", ""));
    }
    return out;
  }
  std::string Logs() {
    return ReadFile(dir_.File("data.log")) + "\n--- agent ---\n" +
           ReadFile(dir_.File("agent-n1.log"));
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<AgentProcess> agent_;
  std::string admin_;
};

TEST_F(IdleReclaimE2ETest, AnIdleInteractiveJobIsNoticedThenStoppedAndTheOthersAreNot) {
  const int64_t notebook =
      Submit("notebook", {{"type", "interactive"}, {"simulateUtilization", 0.01}});
  const int64_t exempt = Submit("exempt", {{"type", "interactive"},
                                           {"simulateUtilization", 0.0},
                                           {"labels", {{"idle-exempt", "true"}}}});
  const int64_t training = Submit("training", {{"type", "training"}, {"simulateUtilization", 0.0}});
  const int64_t serving = Submit("serving", {{"type", "inference"}, {"simulateUtilization", 0.0}});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, notebook) == "Cancelled"; }, 90))
      << JobPhase(*server_, admin_, notebook) << Logs();
  // Its events, in order: started, noticed, a grace (4 s) later reclaimed, then its task seen to
  // stop and the job cancelled.
  double started = 0, noticed = 0, reclaimed = 0, stopped = 0;
  std::string notice, reclaim;
  for (const Json& e : JobEvents(*server_, admin_, notebook)) {
    const std::string reason = e.value("reason", "");
    const double at = e.value("at", 0.0);
    if (reason == "Started") started = at;
    if (reason == "IdleNotice") noticed = at, notice = e.value("message", "");
    if (reason == "Reclaimed") reclaimed = at, reclaim = e.value("message", "");
    if (reason == "Stopped") stopped = at;
  }
  ASSERT_GT(started, 0) << Logs();
  ASSERT_GT(noticed, 0) << "a notice first";
  ASSERT_GT(reclaimed, 0);
  ASSERT_GT(stopped, 0) << "its task was seen to stop";
  EXPECT_GE(noticed - started, 4 - 0.1) << "idle for idleFor first";
  EXPECT_GE(reclaimed - noticed, 4 - 0.1) << "the grace between notice and stop";
  // Not long after the grace either: the reclaimer looks every 2 s, and a loaded CI machine (two
  // end-to-end tests at once, or a sanitizer) adds seconds; a stop that waited for anything else
  // (another idleFor, the job's own end) would take far longer.
  EXPECT_LT(reclaimed - noticed, 4 + 10) << "stopped when the grace ends";
  EXPECT_GE(stopped, reclaimed);
  EXPECT_NE(notice.find("(IdlePolicy notebooks); it will be stopped in 4 s unless its GPUs are "
                        "used"),
            std::string::npos)
      << notice;
  EXPECT_NE(reclaim.find("1.00 GPU(s) given back after"), std::string::npos) << reclaim;
  // The others run on: the exempt one and inference untouched, the training job alerted on.
  for (int64_t id : {exempt, training, serving}) {
    EXPECT_EQ(JobPhase(*server_, admin_, id), "Running") << id;
    EXPECT_TRUE(Events(id, "IdleNotice").empty()) << id;
  }
  ASSERT_TRUE(Eventually(
      [&] {
        for (const Json& a :
             Http(*server_, "GET", "/api/v1/alerts", admin_).body.value("items", Json::array())) {
          const Json& l = a["labels"];
          if (l.value("alertname", "") == "MeridianJobIdle" &&
              l.value("job_id", "") == std::to_string(training) && l.value("action", "") == "alert")
            return true;
        }
        return false;
      },
      30))
      << Http(*server_, "GET", "/api/v1/alerts", admin_).text;
  // GET /api/v1/idle and `meridian get idle` list the training job as alerting, nothing else,
  // once the reclaimer has looked since the notebook ended (it looks every 2 s).
  Json idle;
  EXPECT_TRUE(Eventually([&] {
    idle = Http(*server_, "GET", "/api/v1/idle", admin_).body["items"];
    return idle.size() == 1;
  }));
  ASSERT_EQ(idle.size(), 1u) << idle.dump();
  EXPECT_EQ(idle[0].value("job", int64_t{0}), training);
  EXPECT_EQ(idle[0].value("state", ""), "alerting");
  CliResult listed = Cli(kBinary, "get idle", server_->url(), admin_);
  EXPECT_EQ(listed.code, 0) << listed.output;
  EXPECT_NE(listed.output.find("alerting"), std::string::npos) << listed.output;
  // Reclaimed GPU-hours are a metric.
  const std::string metrics = Http(*server_, "GET", "/metrics", admin_).text;
  EXPECT_NE(metrics.find("meridian_idle_reclaimed_jobs_total{project=\"research\",type="
                         "\"interactive\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("meridian_idle_reclaimed_gpu_hours_total{project=\"research\""),
            std::string::npos);
  std::printf(
      "idle reclamation: started -> notice %.1f s, notice -> stop %.1f s, stop -> "
      "task stopped %.1f s\n",
      noticed - started, reclaimed - noticed, stopped - reclaimed);
  std::printf("idle reclamation: %s\n", reclaim.c_str());
  std::fflush(stdout);
}

// Policies are validated through the real CLI with file, line and field, and nothing is applied
// when one fails: the shipped example, planned over this estate, covers inference jobs of every
// project a second time (this estate's "serving" does already), and interactive ones too.
TEST_F(IdleReclaimE2ETest, PoliciesAreValidatedWithFileLineAndFieldAndNothingIsApplied) {
  const std::string example = kSource + "/examples/idle-policies.yaml";
  CliResult plan = Cli(kBinary, "plan -f " + example, server_->url(), admin_);
  EXPECT_NE(plan.code, 0) << plan.output;
  // Said of the document (its line, as the desired state's other rules say theirs).
  EXPECT_NE(plan.output.find("idle-policies.yaml:26:0: spec.jobTypes: inference jobs of every "
                             "project are covered by IdlePolicy \"serving\" already"),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("idle-policies.yaml:9:0: spec.jobTypes: interactive jobs of every "
                             "project are covered by IdlePolicy \"notebooks\" already"),
            std::string::npos)
      << plan.output;
  const std::string bad = WriteTestFile(dir_.File("bad.yaml"),
                                        "kind: IdlePolicy\n"
                                        "metadata: {name: notebooks}\n"
                                        "spec:\n"
                                        "  jobTypes: [interactive]\n"
                                        "  action: alert\n"
                                        "  grace: 60\n");
  CliResult applied = Cli(kBinary, "apply -f " + bad, server_->url(), admin_);
  EXPECT_NE(applied.code, 0);
  EXPECT_NE(applied.output.find("bad.yaml:6:3: spec.grace: is not used by action alert (only by "
                                "reclaim)"),
            std::string::npos)
      << applied.output;
  HttpResult kept = Http(*server_, "GET", "/api/v1/idlepolicies/notebooks", admin_);
  ASSERT_EQ(kept.status, 200) << kept.text;
  EXPECT_EQ(kept.body["spec"].value("action", ""), "reclaim") << "nothing applied";
  // Everyone reads them, as the estate's other policies.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/idlepolicies", admin_).body["items"].size(), 3u);
}

}  // namespace
}  // namespace meridian::testing
