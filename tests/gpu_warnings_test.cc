// Warnings before failures and failing nodes end to end
// (docs/adr/0020-gpu-warnings-and-failing-nodes.md): a real `meridian server` and a real
// `meridian agent` on loopback, whose GPUs are simulated (a fake: no NVIDIA GPU runs here) and
// take injected warnings and XIDs through the CLI and the API. Default settings (a heartbeat
// every 2 s, alert evaluation every 2 s, the built-in alert rules and warning thresholds),
// except the Policy's failingNodes in the second test: 2 failures of 2 projects, and cordon.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

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
kind: Project
metadata: {name: vision}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
)";

// A task that runs until it is told to stop (the notice file).
const Json kWorker = {"sh", "-c", "while [ ! -e \"$MERIDIAN_NOTICE_FILE\" ]; do sleep 0.05; done"};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class GpuWarningsTest : public ::testing::Test {
 protected:
  void Start(const std::string& extra_config) {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r =
        Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate + extra_config));
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
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", "n1",
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-n1"), "--cpu-milli", "16000", "--memory-mib",
                                 "65536", "--address", "127.0.0.1"},
        dir_.File("agent-n1.log"));
    agent_->Start(server_->url(), t.body.value("token", ""));
    ASSERT_TRUE(Eventually([&] { return Node().value("state", "") == "Ready"; }))
        << ReadFile(dir_.File("agent-n1.log"));
  }
  CliResult Run(const std::string& args) { return Cli(kBinary, args, server_->url(), admin_); }
  Json Node() {
    HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& n : nodes.body.value("items", Json::array())) {
      if (n.value("name", "") == "n1") return n;
    }
    return Json::object();
  }
  // The node's condition of `type` (on `gpu`, -1 for the node's own); empty when it has none.
  Json Condition(const std::string& type, int gpu) {
    for (const Json& c : Node().value("conditions", Json::array())) {
      if (c.value("type", "") == type && c.value("gpu", -1) == gpu) return c;
    }
    return Json::object();
  }
  // The alert of `rule` on `gpu` of n1 (-1: the node's), with its state; empty when none.
  Json Alert(const std::string& rule, int gpu) {
    HttpResult r = Http(*server_, "GET", "/api/v1/alerts", admin_);
    for (const Json& a : r.body.value("items", Json::array())) {
      const Json& l = a["labels"];
      if (l.value("rule", "") == rule && l.value("node", "") == "n1" &&
          l.value("gpu", "") == (gpu < 0 ? "" : std::to_string(gpu))) {
        return a;
      }
    }
    return Json::object();
  }
  std::vector<std::string> NodeEvents(const std::string& reason) {
    HttpResult r = Http(*server_, "GET", "/api/v1/events?limit=1000", admin_);
    std::vector<std::string> out;
    for (const Json& e : r.body.value("items", Json::array())) {
      if (e.value("objectKind", "") == "Node" && e.value("object", "") == "n1" &&
          e.value("reason", "") == reason) {
        out.push_back(e.value("message", ""));
      }
    }
    return out;
  }
  int64_t Submit(const std::string& project, const Json& spec) {
    Json job = {{"metadata", {{"name", "job"}, {"project", project}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  // The GPU indexes a job's first task holds ("GPU-sim-n1-K").
  std::set<int> Gpus(int64_t id) {
    std::set<int> out;
    const Json job = GetJob(*server_, admin_, id);
    for (const Json& t : job["status"].value("allocation", Json::array())) {
      for (const Json& d : t.value("devices", Json::array())) out.insert(d.value("gpu", -1));
    }
    return out;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<AgentProcess> agent_;
  std::string admin_;
};

// Corrected ECC errors (through the CLI) and a temperature near slowdown (through the API),
// injected into simulated GPUs: both become node conditions in /api/v1/nodes with an event each,
// the ECC rate fires its warning alert, `get nodes` says so, and nothing is cordoned: a 4-GPU job
// is placed on the warned GPUs. Clearing the temperature clears its condition.
TEST_F(GpuWarningsTest, AnInjectedWarningIsANodeConditionAndAFiringAlertWhileTheGpuStaysInService) {
  Start("");
  const auto injected = std::chrono::steady_clock::now();
  CliResult cli = Run("fault inject n1 --gpu 1 --warning ecc-corrected");
  ASSERT_EQ(cli.code, 0) << cli.output;
  EXPECT_NE(cli.output.find("warning ecc-corrected injected into GPU 1 of node n1"),
            std::string::npos)
      << cli.output;
  HttpResult hot = Http(*server_, "POST", "/api/v1/nodes/n1/gpus/2/faults", admin_,
                        Json{{"warning", "temperature"}}.dump());
  ASSERT_EQ(hot.status, 202) << hot.text;
  // Bad input names its field.
  HttpResult bad = Http(*server_, "POST", "/api/v1/nodes/n1/gpus/2/faults", admin_,
                        Json{{"warning", "smoke"}}.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.text.find("warning: unknown warning \\\"smoke\\\""), std::string::npos) << bad.text;

  ASSERT_TRUE(Eventually([&] { return !Condition("EccCorrectedRate", 1).empty(); }, 10))
      << Node().dump();
  const double to_condition = Seconds(injected);
  const Json ecc = Condition("EccCorrectedRate", 1);
  EXPECT_EQ(ecc.value("value", 0.0), 1000);  // the simulated GPU's injected corrected errors
  EXPECT_EQ(ecc.value("severity", ""), "warning");
  EXPECT_NE(ecc.value("message", "").find("1000 corrected ECC errors"), std::string::npos)
      << ecc.dump();
  ASSERT_TRUE(Eventually([&] { return !Condition("TemperatureNearSlowdown", 2).empty(); }, 10));
  EXPECT_EQ(Condition("TemperatureNearSlowdown", 2).value("value", 0.0), 88);
  EXPECT_TRUE(Condition("EccCorrectedRate", 0).empty());  // only where it was injected

  ASSERT_TRUE(Eventually(
      [&] { return Alert("gpu-ecc-corrected-rate", 1).value("state", "") == "firing"; }, 10))
      << Http(*server_, "GET", "/api/v1/alerts", admin_).text;
  const double to_alert = Seconds(injected);
  const Json alert = Alert("gpu-ecc-corrected-rate", 1);
  EXPECT_EQ(alert["labels"].value("alertname", ""), "MeridianGpuEccCorrectedRate");
  EXPECT_EQ(alert["labels"].value("severity", ""), "warning");
  EXPECT_EQ(alert["labels"].value("UUID", ""), "GPU-sim-n1-1");
  // The temperature's rule waits 120 s before it fires: pending once an evaluation has seen its
  // condition (which may have come a heartbeat after the ECC's), and not firing.
  ASSERT_TRUE(Eventually([&] { return !Alert("gpu-temperature-near-slowdown", 2).empty(); }, 10))
      << Http(*server_, "GET", "/api/v1/alerts", admin_).text;
  EXPECT_EQ(Alert("gpu-temperature-near-slowdown", 2).value("state", ""), "pending");
  std::printf(
      "GPU warnings: corrected ECC on GPU 1 was a node condition %.2f s after injection and a "
      "firing alert %.2f s after it\n",
      to_condition, to_alert);
  EXPECT_EQ(NodeEvents("GpuWarning").size(), 2u);

  // Nothing is cordoned for a warning: the node and its GPUs take work, the warned ones too.
  const Json n = Node();
  EXPECT_TRUE(n.value("schedulable", false));
  for (const Json& g : n["gpus"]) EXPECT_TRUE(g.value("healthy", false)) << g.dump();
  EXPECT_TRUE(n.value("gpuHealth", Json::array()).empty()) << n.dump();
  const std::string listed = Run("get nodes").output;
  EXPECT_NE(listed.find("Ready,2 warnings"), std::string::npos) << listed;
  const std::string described = Run("describe node n1").output;
  EXPECT_NE(described.find("TemperatureNearSlowdown"), std::string::npos) << described;
  const int64_t job = Submit("research", {{"gpus", 4}, {"command", kWorker}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; }, 30));
  EXPECT_EQ(Gpus(job), (std::set<int>{0, 1, 2, 3}));

  // The temperature comes down: its condition goes (the ECC errors stay counted for the hour).
  ASSERT_EQ(Run("fault inject n1 --gpu 2 --warning clear").code, 0);
  ASSERT_TRUE(Eventually([&] { return Condition("TemperatureNearSlowdown", 2).empty(); }, 10));
  EXPECT_FALSE(Condition("EccCorrectedRate", 1).empty());
  EXPECT_EQ(Phase(job), "Running");
}

// Application-level XIDs (13: the GPU stays in service) fail a job of each of two projects on
// the node: with failingNodes {minFailures: 2, minProjects: 2, cordon: true} the node is flagged
// (a FailingJobs condition, an event, a firing alert) and cordoned by the policy; a job's own
// non-zero exit before that is not counted.
TEST_F(GpuWarningsTest, ANodeFailingJobsOfTwoProjectsIsFlaggedAndCordonedByPolicy) {
  Start(R"(---
kind: Policy
metadata: {name: default}
spec:
  failingNodes: {minFailures: 2, minProjects: 2, cordon: true}
)");
  // The user's own failure: exit 3, a cause that points at the job.
  const int64_t own = Submit("vision", {{"gpus", 1}, {"command", {"sh", "-c", "exit 3"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(own) == "Failed"; }, 30));

  const int64_t a = Submit("research", {{"gpus", 1}, {"command", kWorker}});
  const int64_t b = Submit("vision", {{"gpus", 1}, {"command", kWorker}});
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Running" && Phase(b) == "Running"; }, 30));
  const int gpu_a = *Gpus(a).begin();
  const int gpu_b = *Gpus(b).begin();
  ASSERT_NE(gpu_a, gpu_b);

  CliResult first = Run("fault inject n1 --gpu " + std::to_string(gpu_a) + " --xid 13");
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Failed"; }, 20));
  // One project's failure, and the user's own exit: not flagged yet, still schedulable.
  EXPECT_TRUE(Condition("FailingJobs", -1).empty());
  EXPECT_TRUE(Node().value("schedulable", false));

  const auto injected = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("fault inject n1 --gpu " + std::to_string(gpu_b) + " --xid 13").code, 0);
  ASSERT_TRUE(Eventually([&] { return !Condition("FailingJobs", -1).empty(); }, 10))
      << Node().dump();
  const double to_flag = Seconds(injected);
  EXPECT_EQ(Condition("FailingJobs", -1).value("value", 0.0), 2);
  ASSERT_TRUE(Eventually([&] { return Node().value("cordoned", false); }, 10)) << Node().dump();
  EXPECT_FALSE(Node().value("schedulable", true));
  EXPECT_TRUE(Node().value("gpuHealth", Json::array()).empty());  // no GPU was cordoned
  ASSERT_EQ(NodeEvents("NodeFailingJobs").size(), 1u);
  EXPECT_NE(NodeEvents("NodeFailingJobs")[0].find("2 runs of jobs of 2 projects"),
            std::string::npos);
  ASSERT_EQ(NodeEvents("NodeCordoned").size(), 1u);
  EXPECT_NE(NodeEvents("NodeCordoned")[0].find("cordoned by failing-nodes"), std::string::npos);
  ASSERT_TRUE(Eventually(
      [&] { return Alert("node-failing-jobs", -1).value("state", "") == "firing"; }, 10));
  const double to_alert = Seconds(injected);
  std::printf(
      "Failing nodes: n1 flagged %.2f s after the second project's failure, its alert firing "
      "%.2f s after it; cordoned by policy\n",
      to_flag, to_alert);
  EXPECT_NE(Run("get nodes").output.find("FailingJobs"), std::string::npos);
  // Cordoned: a new job waits.
  const int64_t next = Submit("research", {{"gpus", 1}, {"command", kWorker}});
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Phase(next), "Pending");
}

}  // namespace
}  // namespace meridian::testing
