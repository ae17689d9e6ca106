// GPU health end to end (docs/adr/0015-gpu-health.md): a real `meridian server` and real
// `meridian agent` processes on loopback, whose GPUs are simulated (a fake: no NVIDIA GPU runs
// here) and take injected faults through the API and the CLI. Default Policy settings: a
// heartbeat every 2 s, jobs with their default 30 s grace, NVIDIA's reset as the remediation.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

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
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
)";

// A training task that checkpoints and exits when it is told to stop (the notice file), as a
// well-behaved job does within its grace period.
const Json kTrainer = {"sh", "-c",
                       "while [ ! -e \"$MERIDIAN_NOTICE_FILE\" ]; do sleep 0.05; done; "
                       "echo checkpointed"};

// The same, with a checkpoint that takes 3 s after the notice: the faulty GPU stays held (and
// cordoned, its fault on record) for that long, a window the test looks through. Orders reach
// agents at once (ADR 0030), so without it the GPU could heal before the test looks.
const Json kSlowTrainer = {"sh", "-c",
                           "while [ ! -e \"$MERIDIAN_NOTICE_FILE\" ]; do sleep 0.05; done; "
                           "sleep 3; echo checkpointed"};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class GpuHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate));
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
  }

  // An agent for `name` with 4 simulated H100s (one NVLink domain), registered and Ready.
  void StartAgent(const std::string& name) {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    auto& a = agents_[name];
    a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", name,
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-" + name), "--cpu-milli", "16000", "--memory-mib",
                                 "65536", "--address", "127.0.0.1"},
        dir_.File("agent-" + name + ".log"));
    a->Start(server_->url(), agent_token_);
    ASSERT_TRUE(Eventually([&] { return Node(name).value("state", "") == "Ready"; }))
        << ReadFile(dir_.File("agent-" + name + ".log"));
  }
  CliResult Run(const std::string& args) { return Cli(kBinary, args, server_->url(), admin_); }
  Json Node(const std::string& name) {
    HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& n : nodes.body.value("items", Json::array())) {
      if (n.value("name", "") == name) return n;
    }
    return Json::object();
  }
  // The node's GPU health record of `gpu` (empty when it has none).
  Json GpuRecord(const std::string& node, int gpu) {
    const Json n = Node(node);
    if (!n.contains("gpuHealth") || !n["gpuHealth"].is_array()) return Json::object();
    for (const Json& g : n["gpuHealth"]) {
      if (g.value("index", -1) == gpu) return g;
    }
    return Json::object();
  }
  bool Cordoned(const std::string& node, int gpu) {
    const Json g = GpuRecord(node, gpu);
    return g.is_object() && g.value("cordoned", false);
  }
  std::vector<std::string> NodeEvents(const std::string& node, const std::string& reason) {
    HttpResult r = Http(*server_, "GET", "/api/v1/events?limit=1000", admin_);
    std::vector<std::string> out;
    for (const Json& e : r.body.value("items", Json::array())) {
      if (e.value("objectKind", "") == "Node" && e.value("object", "") == node &&
          e.value("reason", "") == reason) {
        out.push_back(e.value("message", ""));
      }
    }
    return out;
  }
  int64_t Submit(const Json& spec) {
    Json job = {{"metadata", {{"name", "job"}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  bool HasEvent(int64_t id, const std::string& reason, const std::string& text) {
    for (const Json& e : JobEvents(*server_, admin_, id)) {
      if (e.value("reason", "") == reason &&
          e.value("message", "").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  // Where each task of a job runs: (node, GPU uuids).
  std::vector<std::pair<std::string, std::set<std::string>>> Placement(int64_t id) {
    std::vector<std::pair<std::string, std::set<std::string>>> out;
    for (const Json& t : Job(id)["status"].value("allocation", Json::array())) {
      std::set<std::string> uuids;
      for (const Json& d : t.value("devices", Json::array())) uuids.insert(d.value("uuid", ""));
      out.emplace_back(t.value("node", ""), uuids);
    }
    return out;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents_;
  std::string admin_;
  std::string agent_token_;
};

// XID 48 (double-bit ECC, NVIDIA: reset the GPU) injected into a GPU of a running 2x4 gang: the
// GPU is cordoned within 5 s, the gang requeued whole within 10 s with the XID in its events and
// placed again away from the GPU; with no task on it, the agent's remediation clears the fault,
// the probe passes, and the GPU takes work again.
TEST_F(GpuHealthTest, AResetClassXidCordonsTheGpuRequeuesTheGangAndTheGpuHeals) {
  for (const char* n : {"n1", "n2", "n3"}) StartAgent(n);
  const int64_t gang = Submit(
      {{"tasks", 2}, {"gpus", 4}, {"restartPolicy", "on-failure"}, {"command", kSlowTrainer}});
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Running"; }, 30)) << Job(gang).dump();
  const int64_t generation = Job(gang)["status"].value("generation", int64_t{0});
  const auto before = Placement(gang);
  ASSERT_EQ(before.size(), 2u);
  const std::string node = before[0].first;
  const std::string faulty = "GPU-sim-" + node + "-2";
  ASSERT_TRUE(before[0].second.count(faulty)) << "a gang's task holds its node's 4 GPUs";

  const auto injected = std::chrono::steady_clock::now();
  CliResult cli = Run("fault inject " + node + " --gpu 2 --xid 48");
  ASSERT_EQ(cli.code, 0) << cli.output;
  EXPECT_NE(cli.output.find("XID 48 (double-bit ECC error) injected into GPU 2 of node " + node +
                            "; its scope: gpu"),
            std::string::npos)
      << cli.output;
  ASSERT_TRUE(Eventually([&] { return Cordoned(node, 2); }, 10));
  const double to_cordon = Seconds(injected);
  EXPECT_EQ(GpuRecord(node, 2).value("xid", 0), 48);
  // Shown while it waits: its job's tasks still stop on it.
  const std::string listed = Run("get nodes").output;
  EXPECT_NE(listed.find("Ready,GPU 2 cordoned"), std::string::npos) << listed;
  ASSERT_TRUE(Eventually(
      [&] {
        return Job(gang)["status"].value("generation", int64_t{0}) > generation ||
               Phase(gang) == "Pending";
      },
      20));
  const double to_requeue = Seconds(injected);
  std::printf(
      "GPU health: XID 48 cordoned GPU 2 of %s %.2f s after injection; the 2x4 gang was "
      "requeued %.2f s after it\n",
      node.c_str(), to_cordon, to_requeue);
  EXPECT_LT(to_cordon, 5.0);
  EXPECT_LT(to_requeue, 10.0);
  EXPECT_TRUE(HasEvent(gang, "GpuFault", "XID 48 (double-bit ECC error)"));
  EXPECT_TRUE(HasEvent(gang, "Stopped", "back in the queue"));

  // Placed again whole, never on the GPU pending its reset.
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Running"; }, 30)) << Job(gang).dump();
  for (const auto& [n, uuids] : Placement(gang)) EXPECT_FALSE(uuids.count(faulty)) << n;

  // No task holds it: remediated (the simulated reset), probed and uncordoned on its own.
  ASSERT_TRUE(Eventually([&] { return !Cordoned(node, 2); }, 15));
  std::printf("GPU health: GPU 2 of %s remediated and uncordoned %.2f s after injection\n",
              node.c_str(), Seconds(injected));
  ASSERT_EQ(NodeEvents(node, "GpuUncordoned").size(), 1u);
  EXPECT_NE(NodeEvents(node, "GpuUncordoned")[0].find("health probe passed"), std::string::npos);
  // Healthy again, it takes work: a 4-GPU job fits only on that node now.
  const int64_t next = Submit({{"gpus", 4}, {"command", kTrainer}});
  ASSERT_TRUE(Eventually([&] { return Phase(next) == "Running"; }, 20)) << Job(next).dump();
  EXPECT_EQ(Placement(next)[0].first, node);
  EXPECT_TRUE(Placement(next)[0].second.count(faulty));
}

// A GPU that faults three times within 24 h stays cordoned without remediation and says so;
// work waits rather than use it, until an operator uncordons it.
TEST_F(GpuHealthTest, ARepeatingFaultKeepsTheGpuOutUntilAnOperatorUncordonsIt) {
  StartAgent("n1");
  for (int n = 1; n <= 3; ++n) {
    ASSERT_EQ(Run("fault inject n1 --gpu 1 --xid 48").code, 0);
    ASSERT_TRUE(Eventually(
        [&] {
          return GpuRecord("n1", 1).value("faults", Json::array()).size() == static_cast<size_t>(n);
        },
        10))
        << n;
    if (n < 3) {
      ASSERT_TRUE(Eventually([&] { return !Cordoned("n1", 1); }, 10)) << n;
    }
  }
  // Three heartbeats later it is still out, held.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_TRUE(Cordoned("n1", 1));
  EXPECT_TRUE(GpuRecord("n1", 1).value("held", false));
  ASSERT_EQ(NodeEvents("n1", "GpuHeld").size(), 1u);
  EXPECT_NE(NodeEvents("n1", "GpuHeld")[0].find("faulted 3 times in 24 h"), std::string::npos);
  EXPECT_EQ(NodeEvents("n1", "GpuUncordoned").size(), 2u) << "remediated twice, not a third time";
  EXPECT_NE(Run("get nodes").output.find("Ready,GPU 1 held"), std::string::npos)
      << Run("get nodes").output;
  EXPECT_NE(Run("describe node n1").output.find("held: true"), std::string::npos)
      << Run("describe node n1").output;
  // And it alerts (rule gpu-held), saying how to put it back; the operator's uncordon resolves it.
  auto held_alert = [&] {
    for (const Json& a :
         Http(*server_, "GET", "/api/v1/alerts", admin_).body.value("items", Json::array())) {
      if (a["labels"].value("alertname", "") == "MeridianGpuHeld" &&
          a["labels"].value("gpu", "") == "1" && a.value("state", "") == "firing") {
        return a;
      }
    }
    return Json();
  };
  ASSERT_TRUE(Eventually([&] { return !held_alert().is_null(); }, 10))
      << Http(*server_, "GET", "/api/v1/alerts", admin_).text;
  EXPECT_EQ(held_alert()["labels"].value("severity", ""), "critical");
  EXPECT_NE(
      held_alert()["annotations"].value("description", "").find("meridian uncordon n1 --gpu 1"),
      std::string::npos)
      << held_alert().dump();
  const int64_t job = Submit({{"gpus", 4}, {"command", kTrainer}});
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Phase(job), "Pending") << "three healthy GPUs do not fit 4";
  CliResult uncordon = Run("uncordon n1 --gpu 1");
  ASSERT_EQ(uncordon.code, 0) << uncordon.output;
  EXPECT_NE(uncordon.output.find("GPU 1 of node n1 uncordoned"), std::string::npos);
  EXPECT_TRUE(Eventually([&] { return Phase(job) == "Running"; }, 20)) << Job(job).dump();
  EXPECT_TRUE(Eventually([&] { return held_alert().is_null(); }, 10));
}

// The other classes: an application's XID (13) fails only the job on the GPU (restartPolicy
// never) and cordons nothing; an NVLink error (74) cordons the GPU's NVLink domain; a GPU fallen
// off the bus (79) drains the node. Bad requests get a clear error naming the field.
TEST_F(GpuHealthTest, ApplicationNvlinkAndOffTheBusXidsActOnTheirScope) {
  StartAgent("n1");
  const int64_t app = Submit({{"gpus", 1}, {"command", kTrainer}});
  const int64_t other = Submit({{"gpus", 1}, {"command", kTrainer}});
  ASSERT_TRUE(Eventually([&] { return Phase(app) == "Running" && Phase(other) == "Running"; }, 30));
  const int gpu = Job(app)["status"]["allocation"][0]["devices"][0].value("gpu", -1);
  HttpResult injected =
      Http(*server_, "POST", "/api/v1/nodes/n1/gpus/" + std::to_string(gpu) + "/faults", admin_,
           R"({"xid": 13})");
  ASSERT_EQ(injected.status, 202) << injected.text;
  EXPECT_EQ(injected.body.value("scope", ""), "job");
  ASSERT_TRUE(Eventually([&] { return Phase(app) == "Failed"; }, 20)) << Job(app).dump();
  EXPECT_EQ(Job(app)["status"].value("cause", ""), "gpu-fault");
  EXPECT_TRUE(HasEvent(app, "GpuFault", "XID 13 (graphics engine exception)"));
  EXPECT_EQ(Phase(other), "Running");
  EXPECT_EQ(Node("n1").value("gpuHealth", Json::array()), Json::array());

  const auto injected_74 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("fault inject n1 --gpu 0 --xid 74").code, 0);
  // Each GPU of the domain is cordoned in one write (the free ones are remediated and back in
  // service a heartbeat later, so the events tell it, not the state at one moment).
  auto domain_cordons = [&] {
    std::set<std::string> gpus;
    for (const std::string& m : NodeEvents("n1", "GpuCordoned")) {
      if (m.find("XID 74 (NVLink error)") != std::string::npos) gpus.insert(m.substr(0, 6));
    }
    return gpus.size();
  };
  ASSERT_TRUE(Eventually([&] { return domain_cordons() == 4; })) << domain_cordons();
  std::printf("GPU health: XID 74 cordoned the NVLink domain (4 GPUs) in %.2f s\n",
              Seconds(injected_74));
  EXPECT_LT(Seconds(injected_74), 5.0);
  EXPECT_TRUE(
      Eventually([&] { return Phase(other) == "Pending" || Phase(other) == "Failed"; }, 20));

  const auto injected_79 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("fault inject n1 --gpu 3 --xid 79").code, 0);
  ASSERT_TRUE(Eventually([&] { return Node("n1")["drain"].is_object(); }));
  std::printf("GPU health: XID 79 drained the node in %.2f s\n", Seconds(injected_79));
  EXPECT_LT(Seconds(injected_79), 5.0);
  EXPECT_EQ(Node("n1")["drain"].value("by", ""), "gpu-health");
  EXPECT_NE(Node("n1")["drain"].value("reason", "").find("XID 79 (GPU has fallen off the bus)"),
            std::string::npos);

  // Refusals, each naming what is wrong.
  const struct {
    std::string path, body;
    int status;
    std::string text;
  } bad[] = {
      {"/api/v1/nodes/n1/gpus/0/faults", R"({"xid": 0})", 400, "xid:"},
      {"/api/v1/nodes/n1/gpus/0/faults", R"({"xid": "79"})", 400, "xid:"},
      {"/api/v1/nodes/n1/gpus/0/faults", R"({})", 400, "xid: is required"},
      {"/api/v1/nodes/n1/gpus/0/faults", R"(not json)", 400, ""},
      {"/api/v1/nodes/n1/gpus/9/faults", R"({"xid": 79})", 400, "node n1 has no GPU 9"},
      {"/api/v1/nodes/nowhere/gpus/0/faults", R"({"xid": 79})", 404, "nowhere"},
  };
  for (const auto& c : bad) {
    HttpResult r = Http(*server_, "POST", c.path, admin_, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body << ": " << r.text;
    EXPECT_NE(r.text.find(c.text), std::string::npos) << r.text;
  }
  // A node whose GPUs are real (registered as an NVML agent registers) refuses injection.
  Json reg = {{"node", "real"},
              {"cluster", "onprem"},
              {"pool", "h100"},
              {"simulated", false},
              {"gpus", {{{"index", 0}, {"uuid", "GPU-real-0"}, {"model", "H100-80GB"}}}}};
  HttpResult registered =
      Http(*server_, "POST", "/api/v1/agents/register", agent_token_, reg.dump());
  ASSERT_EQ(registered.status, 200) << registered.text;
  HttpResult refused =
      Http(*server_, "POST", "/api/v1/nodes/real/gpus/0/faults", admin_, R"({"xid": 79})");
  EXPECT_EQ(refused.status, 409) << refused.text;
  EXPECT_NE(refused.text.find("faults are injected only into simulated GPUs"), std::string::npos);
  // Admins only.
  HttpResult agent =
      Http(*server_, "POST", "/api/v1/nodes/n1/gpus/0/faults", agent_token_, R"({"xid": 79})");
  EXPECT_EQ(agent.status, 403) << agent.text;
}

}  // namespace
}  // namespace meridian::testing
