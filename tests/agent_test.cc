// End-to-end tests of node agents: a real `meridian server` and real `meridian agent` processes
// on loopback, with simulated GPUs (a fake: nothing real can run here) and real task processes,
// cgroups and shims.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Whether a process runs (a zombie, which its shim has yet to reap, has ended).
bool Alive(int pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// A trace of "<generation> <time>" lines, written by every run of a task while it lives: each
// generation's first and last line.
std::map<int, std::pair<double, double>> Lifetimes(const std::string& text) {
  std::map<int, std::pair<double, double>> life;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    int gen = 0;
    double at = 0;
    if (std::sscanf(line.c_str(), "%d %lf", &gen, &at) != 2) continue;
    auto [it, fresh] = life.emplace(gen, std::make_pair(at, at));
    it->second.first = std::min(it->second.first, at);
    it->second.second = std::max(it->second.second, at);
  }
  return life;
}

// A task that ignores SIGTERM (and so do its children) and traces its life to `trace`; its pid
// goes to `pid_file` followed by its generation.
std::string StubbornTask(const std::string& trace, const std::string& pid_file) {
  return "trap '' TERM; echo $$ > " + pid_file + "$MERIDIAN_GENERATION; while true; do echo " +
         "\"$MERIDIAN_GENERATION $(date +%s.%N)\" >> " + trace + "; sleep 0.02; done";
}

// The Policy's spec is POLICY; by default heartbeats every 0.2 s and a node silent for 2 s is
// lost (its agent's lease is then 1.4 s and a lost lease's SIGKILL comes 0.2 s after).
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
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: PriorityClass
metadata: {name: low}
spec: {value: 0}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: Policy
metadata: {name: default}
spec: POLICY
)";

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("{heartbeatInterval: 0.2, nodeLostTimeout: 2}"); }

  // A fresh server (and data dir) whose Policy has `policy` as its spec.
  void RestartWithPolicy(const std::string& policy) {
    server_.reset();
    std::filesystem::remove_all(dir_.File("data"));
    StartServer(policy);
  }

  void StartServer(const std::string& policy) {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    std::string estate = kEstate;
    estate.replace(estate.find("POLICY"), 6, policy);
    CliResult r = Run("apply -f " + WriteFile("estate.yaml", estate));
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
  }

  // Starts an agent for node `name` with 4 simulated H100s and waits until it is registered.
  AgentProcess& StartAgent(const std::string& name, const std::string& address = "127.0.0.1") {
    auto& a = agents_[name];
    a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", name,
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-" + name), "--cpu-milli", "16000", "--memory-mib",
                                 "65536", "--address", address},
        dir_.File("agent-" + name + ".log"));
    a->Start(server_->url(), agent_token_);
    EXPECT_TRUE(Eventually([&] { return NodeState(name) == "Ready"; }))
        << ReadFile(dir_.File("agent-" + name + ".log"));
    return *a;
  }

  // Starts an agent for node real1 on the FAKE libnvidia-ml (tests/fake_nvml), with `env` for
  // the fake; the caller waits for what it needs of the registration.
  AgentProcess& StartNvmlAgent(std::vector<std::pair<std::string, std::string>> env = {}) {
    auto& a = agents_["real1"];
    a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", "real1",
                                 "--nvml-library", FAKE_NVML_LIBRARY, "--work-dir",
                                 dir_.File("agent-real1"), "--cpu-milli", "8000", "--memory-mib",
                                 "8192"},
        dir_.File("agent-real1.log"), std::move(env));
    a->Start(server_->url(), agent_token_);
    return *a;
  }

  std::string NodeState(const std::string& name) {
    HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    if (!nodes.body.is_object()) return "";
    for (const Json& n : nodes.body.value("items", Json::array())) {
      if (n.value("name", "") == name) return n.value("state", "");
    }
    return "";
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    return WriteTestFile(dir_.File(name), text);
  }
  // Where tasks write what the test reads while they run (each job runs under a uid of its own):
  // a folder anyone may write in, and in it a file that tasks of several jobs append to.
  std::string SharedPath(const std::string& name) {
    const std::string shared = dir_.File("shared");
    ::mkdir(shared.c_str(), 0777);
    EXPECT_EQ(::chmod(shared.c_str(), 0777), 0);
    return shared + "/" + name;
  }
  std::string SharedFile(const std::string& name) {
    const std::string path = SharedPath(name);
    std::ofstream{path, std::ios::app};
    EXPECT_EQ(::chmod(path.c_str(), 0666), 0);
    return path;
  }
  CliResult Run(const std::string& args) { return Cli(kBinary, args, server_->url(), admin_); }

  int64_t Submit(const Json& spec, const std::string& name = "job") {
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  std::vector<Json> Events(int64_t id) { return JobEvents(*server_, admin_, id); }
  // A value of the server's /metrics without labels; -1 when absent.
  double Metric(const std::string& name) {
    std::istringstream in(Http(*server_, "GET", "/metrics", admin_).text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    }
    return -1;
  }
  // Whether /metrics holds `series` (name and labels) with `value`, soon.
  bool MetricSoon(const std::string& series, const std::string& value) {
    return Eventually([&] {
      return Http(*server_, "GET", "/metrics", admin_).text.find(series + " " + value + "\n") !=
             std::string::npos;
    });
  }
  // The job's first event of `reason`, once there (events of a heartbeat land after it).
  std::optional<Json> EventSoon(int64_t id, const std::string& reason) {
    std::optional<Json> found;
    Eventually([&] {
      const std::vector<Json> events = Events(id);
      if (const Json* e = FindEvent(events, reason)) found = *e;
      return found.has_value();
    });
    return found;
  }
  const Json* FindEvent(const std::vector<Json>& events, const std::string& reason) {
    for (const Json& e : events) {
      if (e.value("reason", "") == reason) return &e;
    }
    return nullptr;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents_;
  std::string admin_;
  std::string agent_token_;
};

TEST_F(AgentTest, JobRunsAsARealProcessWithItsGpusAndItsOutputComesBackThroughLogs) {
  StartAgent("n1");
  // The task prints what it was given, and the memory limit of its own cgroup (v1 or v2).
  const std::string job = WriteFile("job.yaml", R"YAML(metadata: {name: hello, project: research}
spec:
  gpus: 2
  memoryMib: 256
  command:
    - sh
    - -c
    - |
      echo "devices=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES"
      echo "job=$MERIDIAN_JOB_ID task=$MERIDIAN_TASK_INDEX world=$MERIDIAN_WORLD_SIZE node=$MERIDIAN_NODE"
      g=$MERIDIAN_CGROUP
      echo "memory-limit=$(cat /sys/fs/cgroup/memory/$g/memory.limit_in_bytes /sys/fs/cgroup/$g/memory.max 2>/dev/null)"
      sleep 0.5
      echo bye
)YAML");
  CliResult submitted = Run("submit -f " + job);
  ASSERT_EQ(submitted.code, 0) << submitted.output;
  // `logs -f` follows the output until the job has ended.
  CliResult logs = Run("logs 1 -f");
  EXPECT_EQ(logs.code, 0) << logs.output;
  EXPECT_EQ(Phase(1), "Succeeded");
  EXPECT_NE(logs.output.find("devices=GPU-sim-n1-0,GPU-sim-n1-1 nvidia=GPU-sim-n1-0,GPU-sim-n1-1"),
            std::string::npos)
      << logs.output;
  EXPECT_NE(logs.output.find("job=1 task=0 world=1 node=n1"), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("memory-limit=268435456"), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("bye"), std::string::npos) << logs.output;
  const std::vector<Json> events = Events(1);
  for (const char* reason : {"Submitted", "Placed", "Started", "Succeeded"}) {
    EXPECT_TRUE(FindEvent(events, reason)) << reason;
  }
  // A task that fails fails its job, with its exit code; a command that does not exist too.
  const int64_t failing = Submit({{"command", {"sh", "-c", "echo oops; exit 3"}}});
  const int64_t missing = Submit({{"command", {"/no/such/program"}}});
  EXPECT_TRUE(Eventually([&] { return Phase(failing) == "Failed" && Phase(missing) == "Failed"; }));
  EXPECT_EQ(Job(failing)["status"]["reason"], "task 0 exited with code 3");
  EXPECT_EQ(Job(missing)["status"]["reason"],
            "task 0 exited with code 127 (its command was not found; check spec.command, or the "
            "image's PATH)");
  EXPECT_EQ(Job(missing)["status"]["cause"], "command-not-found");
  EXPECT_TRUE(Eventually([&] {
    return Run("logs " + std::to_string(missing)).output.find("cannot run /no/such/program") !=
           std::string::npos;
  }));
  // restartPolicy on-failure restarts in place, within maxRestarts.
  const int64_t flaky = Submit({{"command", {"sh", "-c", "echo try $MERIDIAN_RESTART; exit 1"}},
                                {"restartPolicy", "on-failure"},
                                {"maxRestarts", 2}});
  EXPECT_TRUE(Eventually([&] { return Phase(flaky) == "Failed"; }, 20));
  EXPECT_EQ(Job(flaky)["status"]["tasks"][0]["restarts"], 2);
  const std::string tries = Run("logs " + std::to_string(flaky)).output;
  for (const char* t : {"try 0", "try 1", "try 2"}) EXPECT_NE(tries.find(t), std::string::npos);
  EXPECT_TRUE(FindEvent(Events(flaky), "Restarted"));
  // A MIG job: the agent carries out the partition on the simulated GPU, the task sees the
  // instance, and the node's telemetry shows the layout while it runs.
  const int64_t mig =
      Submit({{"migProfile", "1g.10gb"},
              {"command", {"sh", "-c", "echo \"mig=$CUDA_VISIBLE_DEVICES\"; sleep 2"}}});
  std::string layout;
  EXPECT_TRUE(Eventually([&] {
    const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& g : nodes.body["items"][0]["gpus"]) {
      if (g.contains("migInstances")) layout = g["migInstances"].dump();
    }
    return !layout.empty();
  }));
  EXPECT_EQ(layout, "[\"1g.10gb@0\"]");
  EXPECT_TRUE(Eventually([&] { return Phase(mig) == "Succeeded"; }));
  EXPECT_TRUE(Eventually([&] {
    return Run("logs " + std::to_string(mig)).output.find("mig=MIG-GPU-sim-n1-") !=
           std::string::npos;
  }));
  // A run past its runtimeLimit is stopped (notice, SIGTERM, SIGKILL), and the job says why.
  const int64_t slow =
      Submit({{"runtimeLimit", 1}, {"gracePeriod", 1}, {"command", {"sleep", "30"}}});
  EXPECT_TRUE(Eventually([&] { return Phase(slow) == "Failed"; }, 10));
  EXPECT_EQ(Job(slow)["status"]["reason"], "task 0 exited with code 143 (runtime limit reached)");
  // Telemetry of simulated GPUs reaches the node list, and says they are simulated.
  CliResult nodes = Run("get nodes");
  EXPECT_NE(nodes.output.find("registered (simulated GPUs)"), std::string::npos) << nodes.output;
}

// A gang across two nodes: each task learns its rank, the world size and where task 0 is.
TEST_F(AgentTest, GangTasksLearnTheirRankTheWorldSizeAndTheMaster) {
  StartAgent("n1", "127.0.0.11");
  StartAgent("n2", "127.0.0.12");
  const int64_t id = Submit({{"tasks", 2},
                             {"gpus", 4},
                             {"command",
                              {"sh", "-c",
                               "echo rank=$MERIDIAN_TASK_INDEX world=$MERIDIAN_WORLD_SIZE "
                               "master=$MERIDIAN_MASTER_ADDR node=$MERIDIAN_NODE"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 15)) << Job(id).dump();
  const Json allocation = Job(id)["status"]["allocation"];
  const std::string first = allocation[0]["node"], second = allocation[1]["node"];
  EXPECT_NE(first, second);
  const std::string master = first == "n1" ? "127.0.0.11" : "127.0.0.12";
  for (int task = 0; task < 2; ++task) {
    const std::string want = "rank=" + std::to_string(task) + " world=2 master=" + master +
                             " node=" + (task == 0 ? first : second);
    EXPECT_TRUE(Eventually([&] {
      return Run("logs " + std::to_string(id) + " --task " + std::to_string(task))
                 .output.find(want) != std::string::npos;
    })) << want;
  }
}

// An array's elements run as real processes, each told its index and its array's id, at most
// %2 at once; a job after a failed one fails for it, one afternotok runs.
TEST_F(AgentTest, ArrayElementsKnowTheirIndexAndDependenciesFollowRealExits) {
  StartAgent("n1");
  const int64_t array = Submit(
      {{"gpus", 1},
       {"array", "0-4:2%2"},
       {"command", {"sh", "-c", "echo index=$MERIDIAN_ARRAY_INDEX array=$MERIDIAN_ARRAY_JOB_ID"}}});
  const int64_t failing = Submit({{"command", {"false"}}});
  const std::string f = std::to_string(failing);
  const int64_t after_ok = Submit({{"command", {"true"}}, {"dependencies", {"afterok:" + f}}});
  const int64_t after_not_ok =
      Submit({{"command", {"true"}}, {"dependencies", {"afternotok:" + f}}});
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t element = array + i;
    ASSERT_TRUE(Eventually([&] { return Phase(element) == "Succeeded"; }, 15))
        << Job(element).dump();
    const std::string want = "index=" + std::to_string(2 * i) + " array=" + std::to_string(array);
    EXPECT_TRUE(Eventually([&] {
      return Run("logs " + std::to_string(array) + "_" + std::to_string(2 * i)).output.find(want) !=
             std::string::npos;
    })) << want;
  }
  ASSERT_TRUE(Eventually([&] { return Phase(after_not_ok) == "Succeeded"; }, 15))
      << Job(after_not_ok).dump();
  const Json failed = Job(after_ok);
  EXPECT_EQ(failed["status"].value("phase", ""), "Failed") << failed.dump();
  EXPECT_NE(failed["status"].value("reason", "").find("afterok:" + f + " can never be satisfied"),
            std::string::npos)
      << failed.dump();
  EXPECT_NE(FindEvent(Events(after_ok), "DependencyNeverSatisfied"), nullptr);
}

TEST_F(AgentTest, KilledAgentsNodeIsLostAndItsJobRunsElsewhereButNeverTwiceAtOnce) {
  StartAgent("n1");
  StartAgent("n2");
  // Every run of the task writes "<generation> <time>" lines to a shared file while it lives,
  // and ignores SIGTERM: only the SIGKILL at lease + fenceGrace (1.4 + 0.2 s) ends it in time.
  const std::string trace = SharedFile("alive.log");
  const int64_t id = Submit({{"gpus", 4},
                             {"restartPolicy", "on-failure"},
                             {"gracePeriod", 0.4},
                             {"command", {"sh", "-c", StubbornTask(trace, SharedPath("pid-"))}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running"; }));
  const std::string first = Job(id)["status"]["allocation"][0]["node"];
  const std::string other = first == "n1" ? "n2" : "n1";
  const double rebuilds = Metric("meridian_scheduler_rebuilds_total");
  ASSERT_GT(rebuilds, 0);
  agents_[first]->Stop(SIGKILL);
  // Lost within the timeout (2 s), requeued, and running on the other node.
  EXPECT_TRUE(Eventually([&] { return NodeState(first) == "Lost"; }, 5));
  EXPECT_TRUE(Eventually(
      [&] {
        Json j = Job(id);
        return j["status"].value("phase", "") == "Running" &&
               j["status"]["allocation"][0].value("node", "") == other;
      },
      10));
  const std::vector<Json> events = Events(id);
  const Json* requeued = FindEvent(events, "Requeued");
  ASSERT_TRUE(requeued);
  EXPECT_EQ(requeued->value("message", ""), "requeued: node " + first + " lost");
  EXPECT_EQ(Job(id)["status"]["restarts"], 1);
  // The agent comes back: its node is schedulable again, and its stale task does not run.
  StartAgent(first);
  // Its loss, the requeue and its return were followed in place, not by rebuilding.
  EXPECT_EQ(Metric("meridian_scheduler_rebuilds_total"), rebuilds);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  Run("cancel " + std::to_string(id));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  // The runs' lifetimes never overlap: every line of generation 1 comes before the first of 2.
  std::map<int, std::pair<double, double>> life = Lifetimes(ReadFile(trace));
  ASSERT_EQ(life.size(), 2u) << ReadFile(trace);
  EXPECT_LT(life[1].second, life[2].first) << "generation 1 ran until " << life[1].second
                                           << ", generation 2 started at " << life[2].first;
  EXPECT_EQ(NodeState(first), "Ready");
}

// The guarantee of domain/agent_timing.h with real processes: an agent cut off from the server
// (SIGSTOP, as a partition would: its shims and tasks run on) has its task, which ignores SIGTERM
// and has a 30 s grace period, SIGKILLed before the server gives up on the node and runs the job
// elsewhere; the two runs never overlap.
TEST_F(AgentTest, PartitionedAgentsTaskThatIgnoresSigtermIsDeadBeforeItsJobRunsElsewhere) {
  // 1.5 + 1 + 2 × 0.2 = 2.9 s <= 3 s: the rule holds, with a fence grace that is not zero.
  RestartWithPolicy("{heartbeatInterval: 0.2, agentLease: 1.5, fenceGrace: 1, nodeLostTimeout: 3}");
  StartAgent("n1");
  StartAgent("n2");
  const std::string trace = SharedFile("alive.log");
  const int64_t id = Submit({{"gpus", 4},
                             {"restartPolicy", "on-failure"},
                             {"gracePeriod", 30},
                             {"command", {"sh", "-c", StubbornTask(trace, SharedPath("pid-"))}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running"; }));
  int pid = 0;
  ASSERT_TRUE(Eventually([&] {
    pid = std::atoi(ReadFile(SharedPath("pid-1")).c_str());
    return pid > 0 && Alive(pid);
  }));
  const std::string first = Job(id)["status"]["allocation"][0]["node"];
  const std::string other = first == "n1" ? "n2" : "n1";
  const double cut = WallNow();
  agents_[first]->Signal(SIGSTOP);
  double dead_at = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        if (Alive(pid)) return false;
        dead_at = WallNow();
        return true;
      },
      10));
  // Within the lost timeout of the last heartbeat, which came before the cut.
  EXPECT_LT(dead_at - cut, 3.0);
  // SIGTERM did nothing: SIGKILL ended it, fenceGrace (not its grace period) after the lease.
  const std::string exit_file =
      dir_.File("agent-" + first) + "/tasks/" + std::to_string(id) + "-0-g1/exit.json";
  Json exit;
  ASSERT_TRUE(Eventually([&] {
    exit = Json::parse(ReadFile(exit_file), nullptr, false);
    return exit.is_object();
  }));
  EXPECT_EQ(exit.value("signal", 0), SIGKILL) << exit.dump();
  EXPECT_EQ(exit.value("reason", ""), "the agent lost the server for longer than its lease");
  // The server gives up on the node only after that, and runs the job on the other node.
  ASSERT_TRUE(Eventually(
      [&] {
        Json j = Job(id);
        return j["status"].value("phase", "") == "Running" && j["status"]["generation"] == 2 &&
               j["status"]["allocation"][0].value("node", "") == other;
      },
      15))
      << Job(id).dump();
  const std::vector<Json> events = Events(id);
  const Json* requeued = FindEvent(events, "Requeued");
  ASSERT_TRUE(requeued);
  EXPECT_LT(dead_at, requeued->value("at", 0.0));
  ASSERT_TRUE(Eventually([&] { return Lifetimes(ReadFile(trace)).count(2) > 0; }));
  std::map<int, std::pair<double, double>> life = Lifetimes(ReadFile(trace));
  EXPECT_LT(life[1].second, requeued->value("at", 0.0));
  EXPECT_LT(life[1].second, life[2].first) << "generation 1 ran until " << life[1].second
                                           << ", generation 2 started at " << life[2].first;
  agents_[first]->Signal(SIGCONT);
}

// A server outage shorter than agentLease stops no task: the server stalled (SIGSTOP: it takes
// connections and answers nothing), then killed and started again on its data dir. The task's
// output grows throughout, and the job runs on in the same generation.
TEST_F(AgentTest, ServerOutageShorterThanTheLeaseStopsNoTask) {
  // A lease of 12 s: longer than a Debug+ASan server's stall and restart on a loaded machine.
  RestartWithPolicy("{heartbeatInterval: 0.2, agentLease: 12, fenceGrace: 1, nodeLostTimeout: 14}");
  StartAgent("n1");
  const std::string trace = SharedFile("alive.log");
  const int64_t id =
      Submit({{"gpus", 1}, {"command", {"sh", "-c", StubbornTask(trace, SharedPath("pid-"))}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running"; }));
  int pid = 0;
  ASSERT_TRUE(Eventually([&] {
    pid = std::atoi(ReadFile(SharedPath("pid-1")).c_str());
    return pid > 0 && Alive(pid);
  }));
  const double start = WallNow();
  server_->Signal(SIGSTOP);
  // The outage itself: a length of time, not a wait for something.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  server_->Signal(SIGCONT);
  server_->Stop(SIGKILL);
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  const double outage = WallNow() - start;
  ASSERT_LT(outage, 12.0) << "the outage must be shorter than agentLease for this test to hold";
  // Past the moment when the lease and its fence grace would have run out without renewals.
  ASSERT_TRUE(Eventually([&] { return WallNow() > start + 12 + 1 + 0.5; }, 20));
  EXPECT_TRUE(Alive(pid));
  const std::string task_dir = dir_.File("agent-n1") + "/tasks/" + std::to_string(id) + "-0-g1";
  EXPECT_EQ(ReadFile(task_dir + "/notice"), "");
  const size_t before = ReadFile(trace).size();
  EXPECT_TRUE(Eventually([&] { return ReadFile(trace).size() > before + 100; }));
  // No gap in the task's life across the outage.
  std::istringstream lines(ReadFile(trace));
  double previous = 0, longest_gap = 0;
  for (std::string line; std::getline(lines, line);) {
    int gen = 0;
    double at = 0;
    if (std::sscanf(line.c_str(), "%d %lf", &gen, &at) != 2) continue;
    EXPECT_EQ(gen, 1);
    if (previous > 0) longest_gap = std::max(longest_gap, at - previous);
    previous = at;
  }
  EXPECT_LT(longest_gap, 1.0);
  EXPECT_GT(previous, start + 13);
  const Json j = Job(id);
  EXPECT_EQ(j["status"].value("phase", ""), "Running") << j.dump();
  EXPECT_EQ(j["status"]["generation"], 1);
  EXPECT_FALSE(FindEvent(Events(id), "Requeued"));
  EXPECT_EQ(NodeState("n1"), "Ready");
}

TEST_F(AgentTest, PreemptedJobGetsItsNoticeStopsWithinItsGracePeriodAndRequeues) {
  StartAgent("n1");
  const int64_t low =
      Submit({{"gpus", 4},
              {"priorityClass", "low"},
              {"gracePeriod", 4},
              {"noticeSignal", "SIGUSR1"},
              {"command",
               {"sh", "-c",
                "trap 'echo \"notice: $(cat $MERIDIAN_NOTICE_FILE)\"' USR1; "
                "trap 'echo terminated; exit 143' TERM; echo \"run $MERIDIAN_GENERATION\"; "
                "while true; do sleep 0.05; done"}}},
             "low");
  ASSERT_TRUE(Eventually([&] { return Phase(low) == "Running"; }));
  // Its traps are set once it has said so: a notice before then would end the shell at once
  // (a shell slow to start under load, ASan and -j2, is not what this test is about).
  const std::string path =
      server_->data_dir() + "/logs/" + std::to_string(low) + "/task-0.gen-1.log";
  ASSERT_TRUE(Eventually([&] { return ReadFile(path).find("run 1") != std::string::npos; }))
      << Job(low).dump();
  const int64_t high = Submit(
      {{"gpus", 4}, {"priorityClass", "high"}, {"command", {"sh", "-c", "echo high; sleep 0.3"}}},
      "high");
  EXPECT_TRUE(Eventually([&] { return Phase(high) == "Succeeded"; }, 15));
  // The low job went back to the queue, and runs again once the high one has finished.
  EXPECT_TRUE(Eventually(
      [&] { return Phase(low) == "Running" && Job(low)["status"]["generation"] == 2; }, 10));
  const std::vector<Json> events = Events(low);
  const Json* preempted = FindEvent(events, "Preempted");
  const Json* stopped = FindEvent(events, "Stopped");
  ASSERT_TRUE(preempted && stopped);
  EXPECT_NE(preempted->value("message", "").find("preempted for job " + std::to_string(high)),
            std::string::npos);
  // Stopped within the grace period (4 s), plus a heartbeat or two to hear of it.
  EXPECT_LE(stopped->value("at", 0.0) - preempted->value("at", 0.0), 4.6);
  // The first run saw the notice (why, and by when), then SIGTERM half the grace period later.
  EXPECT_TRUE(Eventually([&] { return ReadFile(path).find("terminated") != std::string::npos; }));
  const std::string first_run = ReadFile(path);
  EXPECT_NE(first_run.find("notice: {\"deadline\""), std::string::npos) << first_run;
  EXPECT_NE(first_run.find("preempted for job"), std::string::npos) << first_run;
  EXPECT_NE(first_run.find("terminated"), std::string::npos) << first_run;
  EXPECT_LT(first_run.find("notice:"), first_run.find("terminated")) << first_run;
  // The outcomes, counted from these events.
  EXPECT_TRUE(MetricSoon(R"(meridian_jobs_preempted_total{project="research"})", "1"));
  EXPECT_TRUE(
      MetricSoon(R"(meridian_jobs_requeued_total{project="research",reason="preempted"})", "1"));
  EXPECT_TRUE(MetricSoon(R"(meridian_jobs_succeeded_total{project="research"})", "1"));
  EXPECT_TRUE(
      MetricSoon(R"(meridian_jobs_failed_total{project="research",cause="exit_code"})", "0"));
}

TEST_F(AgentTest, ServerKilledDuringSubmissionsLosesNoAcknowledgedJobAndRunsNoneTwice) {
  // A longer lost timeout (lease 5 s): the server's restart must not look like a lost node.
  RestartWithPolicy("{heartbeatInterval: 0.2, nodeLostTimeout: 6}");
  StartAgent("n1");
  const std::string runs = SharedFile("runs.log");
  constexpr int kJobs = 500, kClients = 8;
  std::atomic<int> next{0}, acked{0};
  std::mutex mu;
  std::set<int64_t> ids;
  std::atomic<bool> killed{false};
  auto client = [&] {
    for (int i = next++; i < kJobs; i = next++) {
      Json job = {
          {"metadata", {{"name", "j" + std::to_string(i)}, {"project", "research"}}},
          {"spec",
           {{"cpuMilli", 500}, {"command", {"sh", "-c", "echo $MERIDIAN_JOB_ID >> " + runs}}}}};
      // A submission the server did not acknowledge is sent again, with the same
      // Idempotency-Key: the job it may have made unacknowledged is answered (200), not made
      // twice.
      for (;;) {
        HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump(),
                            {{"Idempotency-Key", "submission-" + std::to_string(i)}});
        if (r.status == 201 || r.status == 200) {
          {
            std::lock_guard<std::mutex> lock(mu);
            ids.insert(r.body.value("id", int64_t{0}));
          }
          // Exactly one client kills it; `killed` says so only once it is dead, so that the
          // restart cannot race the kill (Stop would wait for the new process).
          if (++acked == 200) {
            server_->Stop(SIGKILL);
            killed = true;
          }
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) threads.emplace_back(client);
  ASSERT_TRUE(Eventually([&] { return killed.load(); }, 60));
  ASSERT_TRUE(server_->Start());
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(ids.size(), static_cast<size_t>(kJobs));
  // Every acknowledged job is there and ends, each run exactly once.
  EXPECT_TRUE(Eventually(
      [&] {
        HttpResult done = Http(*server_, "GET", "/api/v1/jobs?phase=Succeeded&limit=1000", admin_);
        return done.body.is_object() && done.body["items"].size() >= ids.size();
      },
      240))
      << ReadFile(dir_.File("agent-n1.log"));
  std::map<int64_t, int> count;
  std::istringstream lines(ReadFile(runs));
  for (std::string line; std::getline(lines, line);) count[std::stoll(line)] += 1;
  for (int64_t id : ids) EXPECT_EQ(count[id], 1) << "acknowledged job " << id;
  // Submissions in flight when the server died landed at most once: their retries, with the
  // same key, were answered with the job they had made.
  for (const auto& [id, n] : count) EXPECT_EQ(n, 1) << "job " << id;
  HttpResult all = Http(*server_, "GET", "/api/v1/jobs?limit=1000", admin_);
  EXPECT_EQ(all.body["items"].size(), static_cast<size_t>(kJobs)) << "a submission made twice";
  EXPECT_EQ(count.size(), static_cast<size_t>(kJobs));
}

// The agent's NVML path end to end, against a FAKE libnvidia-ml (tests/fake_nvml): what it
// reads reaches the node list, and the node does not claim to be simulated.
TEST_F(AgentTest, AgentOnNvmlRegistersTheGpusItReadsWithTheirTelemetry) {
  StartNvmlAgent();
  Json node;
  ASSERT_TRUE(Eventually([&] {
    const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& n : nodes.body["items"]) {
      if (n.value("name", "") == "real1" && n["gpus"].size() == 4 &&
          n["gpus"][2].contains("utilization")) {
        node = n;
        return true;
      }
    }
    return false;
  })) << ReadFile(dir_.File("agent-real1.log"));
  EXPECT_EQ(node["model"], "H100-80GB");
  EXPECT_EQ(node["simulated"], false);
  EXPECT_EQ(node["gpus"][0]["uuid"], "GPU-fake-0000-0000");
  EXPECT_DOUBLE_EQ(node["gpus"][2]["utilization"].get<double>(), 0.3);
  EXPECT_EQ(node["gpus"][1]["eccErrors"], 2);
  EXPECT_EQ(node["gpus"][1]["eccSingleBit"], 5);
  EXPECT_EQ(node["gpus"][0]["smClockMhz"], 1980);
  EXPECT_EQ(node["gpus"][1]["rowRemapPending"], true);
  EXPECT_FALSE(node["gpus"][0].contains("retiredPagesDoubleBit"));
  EXPECT_EQ(node["gpus"][2]["lastXid"], 79);
  // The same figures on /metrics, in base units, labelled as dcgm-exporter labels them; what
  // the fake H100s do not keep (retired pages) is not exported at all.
  const std::string metrics = Http(*server_, "GET", "/metrics", admin_).text;
  const std::string gpu1 =
      R"({gpu="1",UUID="GPU-fake-0000-0001",device="nvidia1",modelName="H100-80GB",)"
      R"(Hostname="real1",node="real1",cluster="onprem",job_id="",project=""})";
  for (const std::string& want : std::vector<std::string>{
           "meridian_gpu_ecc_single_bit_errors_total" + gpu1 + " 5",
           "meridian_gpu_ecc_double_bit_errors_total" + gpu1 + " 2",
           "meridian_gpu_sm_clock_hertz" + gpu1 + " 1970000000",
           "meridian_gpu_memory_total_bytes" + gpu1 + " 85520809984",
           "meridian_gpu_row_remap_pending" + gpu1 + " 1",
           "meridian_gpu_utilization_ratio" + gpu1 + " 0.2",
       }) {
    EXPECT_NE(metrics.find(want + "\n"), std::string::npos) << want;
  }
  EXPECT_NE(metrics.find("meridian_gpu_last_xid{gpu=\"2\""), std::string::npos);
  EXPECT_EQ(metrics.find("meridian_gpu_retired_pages{"), std::string::npos);
  const std::string table = Run("get nodes").output;
  const size_t row = table.find("real1");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find("registered"), std::string::npos) << line;
  EXPECT_EQ(line.find("simulated"), std::string::npos) << line;
}

// MIG through NVML end to end, against the FAKE libnvidia-ml with healthy GPUs: the agent makes
// the instances the scheduler grants and gives each task its MIG device's UUID.
TEST_F(AgentTest, MigThroughNvmlGivesEachTaskItsInstance) {
  StartNvmlAgent({{"FAKE_NVML_CALLS", dir_.File("nvml-calls")}, {"FAKE_NVML_HEALTHY", "1"}});
  ASSERT_TRUE(Eventually([&] {
    const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    return nodes.body["items"].size() == 1 && nodes.body["items"][0]["gpus"].size() == 4;
  })) << ReadFile(dir_.File("agent-real1.log"));
  // GPU 3, which the agent found in MIG mode, is where MIG work goes first (no mode change): a
  // 3g.40gb and a 1g.10gb share it, each task given its MIG device's UUID, and the layout the
  // agent reads back from NVML shows both (beside an instance made there by hand before).
  const std::string sleep_then_say = "echo \"mig=$CUDA_VISIBLE_DEVICES\"; sleep 3";
  const int64_t big =
      Submit({{"migProfile", "3g.40gb"}, {"command", {"sh", "-c", sleep_then_say}}});
  const int64_t small =
      Submit({{"migProfile", "1g.10gb"}, {"command", {"sh", "-c", sleep_then_say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(big) == "Running" && Phase(small) == "Running"; }));
  std::set<std::string> granted;
  for (int64_t id : {big, small}) {
    const Json d = Job(id)["status"]["allocation"][0]["devices"][0];
    EXPECT_EQ(d["gpu"], 3) << d.dump();
    granted.insert(d["mig"]["profile"].get<std::string>() + "@" +
                   std::to_string(d["mig"]["start"].get<int>()));
  }
  std::set<std::string> layout;
  EXPECT_TRUE(Eventually([&] {
    const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    layout.clear();
    for (const Json& m : nodes.body["items"][0]["gpus"][3].value("migInstances", Json::array())) {
      layout.insert(m.get<std::string>());
    }
    return std::includes(layout.begin(), layout.end(), granted.begin(), granted.end());
  })) << ReadFile(dir_.File("agent-real1.log"));
  EXPECT_TRUE(layout.count("1g.10gb@6"));
  ASSERT_TRUE(Eventually([&] { return Phase(big) == "Succeeded" && Phase(small) == "Succeeded"; }))
      << Job(big).dump() << Job(small).dump();
  for (int64_t id : {big, small}) {
    EXPECT_TRUE(Eventually([&] {
      return Run("logs " + std::to_string(id)).output.find("mig=MIG-fake-0003-") !=
             std::string::npos;
    })) << Run("logs " + std::to_string(id)).output;
  }
  const std::string calls = ReadFile(dir_.File("nvml-calls"));
  EXPECT_EQ(calls.find("nvmlDeviceSetMigMode"), std::string::npos) << calls;
  EXPECT_NE(calls.find("nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=9"),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=19"),
            std::string::npos)
      << calls;
  // Both ended: their instances are destroyed, compute instance first.
  EXPECT_TRUE(Eventually([&] {
    const std::string c = ReadFile(dir_.File("nvml-calls"));
    size_t destroyed = 0;
    for (size_t at = c.find("nvmlGpuInstanceDestroy gpu=3"); at != std::string::npos;
         at = c.find("nvmlGpuInstanceDestroy gpu=3", at + 1)) {
      ++destroyed;
    }
    return destroyed >= 2;
  })) << ReadFile(dir_.File("nvml-calls"));
  // A job that needs the whole node: GPU 3 leaves MIG mode first (the instance left there by
  // hand destroyed before), and the task sees four whole GPUs.
  std::remove(dir_.File("nvml-calls").c_str());
  const int64_t whole = Submit({{"gpus", 4}, {"command", {"sh", "-c", sleep_then_say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(whole) == "Succeeded"; }, 20)) << Job(whole).dump();
  EXPECT_TRUE(Eventually([&] {
    return Run("logs " + std::to_string(whole)).output.find("GPU-fake-0000-0003") !=
           std::string::npos;
  })) << Run("logs " + std::to_string(whole)).output;
  const std::string leaving = ReadFile(dir_.File("nvml-calls"));
  const size_t ci = leaving.find("nvmlComputeInstanceDestroy gpu=3");
  const size_t gi = leaving.find("nvmlGpuInstanceDestroy gpu=3");
  const size_t off = leaving.find("nvmlDeviceSetMigMode gpu=3 mode=0");
  EXPECT_TRUE(ci < gi && gi < off && off != std::string::npos) << leaving;
  const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
  EXPECT_EQ(nodes.body["items"][0]["gpus"][3]["mig"], false);
}

// A MIG mode change that NVML takes but puts in effect only after a GPU reset (an A100, or work
// on the GPU): GPU 3 of the fake is in MIG mode and leaving it waits for a reset. A job that needs
// all four GPUs whole does not start; the GPU is cordoned (not a fault) before the job goes back
// to the queue; the Policy's remediation resets it (here a command that stands for nvidia-smi
// --gpu-reset, telling the fake to put the pending mode in effect), the probe passes, the GPU is
// back in service whole, and the job runs there.
TEST_F(AgentTest, AMigModeChangeWaitingForAResetCordonsTheGpuUntilTheRemediationResetsIt) {
  const std::string resets = dir_.File("resets");
  ASSERT_TRUE(std::filesystem::create_directory(resets));
  RestartWithPolicy(
      "{heartbeatInterval: 0.2, nodeLostTimeout: 2, gpuHealth: {remediation: [touch, '" + resets +
      "/{gpu}']}}");
  StartNvmlAgent({{"FAKE_NVML_CALLS", dir_.File("nvml-calls")},
                  {"FAKE_NVML_HEALTHY", "1"},
                  {"FAKE_NVML_RESET_REQUIRED", "3"},
                  {"FAKE_NVML_RESETS", resets}});
  ASSERT_TRUE(Eventually([&] { return NodeState("real1") == "Ready"; }))
      << ReadFile(dir_.File("agent-real1.log"));
  auto node_events = [&](const std::string& reason) {
    std::vector<std::string> out;
    const HttpResult r =
        Http(*server_, "GET", "/api/v1/events?objectKind=Node&object=real1&limit=1000", admin_);
    for (const Json& e : r.body.value("items", Json::array())) {
      if (e.value("reason", "") == reason) out.push_back(e.value("message", ""));
    }
    return out;
  };
  const int64_t whole =
      Submit({{"gpus", 4}, {"command", {"sh", "-c", "echo \"gpus=$CUDA_VISIBLE_DEVICES\""}}});
  ASSERT_TRUE(Eventually([&] { return Phase(whole) == "Succeeded"; }, 30))
      << Job(whole).dump() << ReadFile(dir_.File("agent-real1.log"));
  // The first start failed for the pending mode and sent the job back; the second ran whole.
  const std::vector<Json> events = Events(whole);
  const Json* refused = nullptr;
  for (const Json& e : events) {
    if (!refused && e.value("message", "").find("GPU reset") != std::string::npos) refused = &e;
  }
  ASSERT_NE(refused, nullptr) << Json(events).dump();
  EXPECT_NE(refused->value("message", "").find("GPU 3"), std::string::npos) << refused->dump();
  const std::vector<std::string> cordoned = node_events("GpuCordoned");
  ASSERT_EQ(cordoned.size(), 1u) << Json(cordoned).dump();
  EXPECT_NE(cordoned[0].find("GPU 3 cordoned: its MIG mode change waits for a GPU reset"),
            std::string::npos)
      << cordoned[0];
  const std::vector<std::string> back = node_events("GpuUncordoned");
  ASSERT_EQ(back.size(), 1u) << Json(back).dump();
  EXPECT_NE(back[0].find("GPU 3 remediated and its health probe passed"), std::string::npos)
      << back[0];
  EXPECT_TRUE(node_events("GpuHeld").empty());
  EXPECT_TRUE(Eventually([&] {
    return Run("logs " + std::to_string(whole)).output.find("GPU-fake-0000-0003") !=
           std::string::npos;
  })) << Run("logs " + std::to_string(whole)).output;
  // NVML was asked once, the reset came after, and the mode then held: no second request.
  const std::string calls = ReadFile(dir_.File("nvml-calls"));
  const size_t asked = calls.find("nvmlDeviceSetMigMode gpu=3 mode=0");
  const size_t reset = calls.find("reset gpu=3");
  EXPECT_TRUE(asked < reset && reset != std::string::npos) << calls;
  EXPECT_EQ(calls.find("nvmlDeviceSetMigMode", asked + 1), std::string::npos) << calls;
  // Not a fault: the GPU keeps no fault history, and nothing of it is left cordoned.
  const Json node = Http(*server_, "GET", "/api/v1/nodes", admin_).body["items"][0];
  for (const Json& g : node.value("gpuHealth", Json::array())) {
    EXPECT_FALSE(g.value("cordoned", true)) << node.dump();
    EXPECT_TRUE(g.value("faults", Json::array()).empty()) << node.dump();
  }
}

// MIG shaped by demand on simulated GPUs: a 1g.10gb and a 3g.40gb share one GPU (MIG mode on for
// the first, an instance in free slices for the second, each job's Placed event saying so); once
// they end, a job that needs the whole node takes the GPU back whole, after the layout has kept
// for the Policy's migReconfigureInterval, and says why it waits until then.
TEST_F(AgentTest, MigLayoutFollowsDemandAndKeepsForItsInterval) {
  RestartWithPolicy("{heartbeatInterval: 0.2, nodeLostTimeout: 2, migReconfigureInterval: 8}");
  StartAgent("n1");
  const std::string say = "echo \"mig=$CUDA_VISIBLE_DEVICES\"; sleep 2";
  const int64_t small = Submit({{"migProfile", "1g.10gb"}, {"command", {"sh", "-c", say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(small) == "Running"; }));
  const int64_t big = Submit({{"migProfile", "3g.40gb"}, {"command", {"sh", "-c", say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(big) == "Running"; }));
  const Json s = Job(small)["status"]["allocation"][0]["devices"][0];
  const Json b = Job(big)["status"]["allocation"][0]["devices"][0];
  EXPECT_EQ(s["gpu"], b["gpu"]) << s.dump() << b.dump();
  EXPECT_EQ(s["mig"]["change"], "enable-mig") << s.dump();
  EXPECT_EQ(b["mig"]["change"], "create-instance") << b.dump();
  const std::string described = Run("describe job " + std::to_string(big)).output;
  EXPECT_NE(described.find(" [MIG 3g.40gb@" + std::to_string(b["mig"]["start"].get<int>()) + "]"),
            std::string::npos)
      << described;
  const int gpu = s["gpu"].get<int>();
  auto placed_message = [&](int64_t id) {
    for (const Json& e : Events(id)) {
      if (e.value("reason", "") == "Placed") return e.value("message", "");
    }
    return std::string();
  };
  EXPECT_NE(
      placed_message(small).find("GPU " + std::to_string(gpu) + " of n1 into MIG mode for 1g.10gb"),
      std::string::npos)
      << placed_message(small);
  EXPECT_NE(placed_message(big).find("3g.40gb at slice"), std::string::npos) << placed_message(big);
  const int64_t whole =
      Submit({{"gpus", 4}, {"command", {"sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(small) == "Succeeded" && Phase(big) == "Succeeded"; }));
  // Its layout was made less than 8 s ago: the whole-node job waits, saying why.
  EXPECT_TRUE(Eventually(
      [&] {
        return Job(whole)["status"].value("reason", "").find("migReconfigureInterval") !=
               std::string::npos;
      },
      5))
      << Job(whole).dump();
  ASSERT_TRUE(Eventually([&] { return Phase(whole) == "Succeeded"; }, 20)) << Job(whole).dump();
  EXPECT_NE(placed_message(whole).find("GPU " + std::to_string(gpu) + " of n1 out of MIG mode"),
            std::string::npos)
      << placed_message(whole);
  EXPECT_TRUE(Eventually([&] {
    return Run("logs " + std::to_string(whole)).output.find("GPU-sim-n1-" + std::to_string(gpu)) !=
           std::string::npos;
  }));
  const HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
  EXPECT_EQ(nodes.body["items"][0]["gpus"][gpu]["mig"], false);
}

// Shares of a GPU in an MPS pool run through NVIDIA's MPS control daemon (a fake control program
// here, which records how it is started and told to quit): one daemon per job and GPU, since a
// daemon serves one uid's processes at a time and each job runs under a uid of its own; each job's
// daemon folder is entered by that job's tasks only; each task gets its thread percentage and
// pinned memory limit; the daemons are told to quit when their jobs' shares end.
TEST_F(AgentTest, SharesOfAGpuRunThroughItsMpsDaemon) {
  const std::string log = SharedFile("mps.log");  // the daemons run as their jobs' uids
  const std::string control = WriteFile("nvidia-cuda-mps-control", R"SH(#!/bin/sh
if [ "$1" = "-d" ]; then
  echo "start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $(id -u)" >> )SH" +
                                                                       log +
                                                                       R"SH(
  sleep 1000 < /dev/null > /dev/null 2>&1 &
  echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
  exit 0
fi
read command
echo "$command $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY" >> )SH" +
                                                                       log + R"SH(
[ "$command" = quit ] && kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")"
exit 0
)SH");
  ASSERT_EQ(::chmod(control.c_str(), 0755), 0);
  AgentProcess agent(kBinary,
                     {"--cluster", "onprem", "--pool", "h100", "--node", "n1", "--simulate-gpus",
                      "4xH100-80GB", "--work-dir", dir_.File("agent-n1"), "--cpu-milli", "16000",
                      "--memory-mib", "65536", "--mps-control", control},
                     dir_.File("agent-n1.log"));
  agent.Start(server_->url(), agent_token_);
  ASSERT_TRUE(Eventually([&] { return NodeState("n1") == "Ready"; }));
  const std::string mps = dir_.File("agent-n1") + "/mps";
  const std::string say =
      "echo \"sharing=$MERIDIAN_GPU_SHARING threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
      "pinned=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT pipe=$CUDA_MPS_PIPE_DIRECTORY uid=$(id -u)\"; ";
  const int64_t a = Submit(
      {{"gpuMilli", 250}, {"gpuMemoryMib", 10240}, {"command", {"sh", "-c", say + "sleep 3"}}});
  // The second job looks for the first one's daemon folder on each GPU while both run.
  const std::string peek = "sleep 1; for g in 0 1 2 3; do ls " + mps + "/$g/" + std::to_string(a) +
                           "/0/pipe; done 2>&1 | grep -o 'Permission denied'";
  const int64_t b =
      Submit({{"gpuMilli", 500}, {"command", {"sh", "-c", say + peek + "; sleep 1"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Running" && Phase(b) == "Running"; }));
  const Json da = Job(a)["status"]["allocation"][0]["devices"][0];
  const Json db = Job(b)["status"]["allocation"][0]["devices"][0];
  EXPECT_EQ(da["sharing"], "mps") << da.dump();
  // Shares are packed: both on one GPU, a daemon for each job there.
  ASSERT_EQ(da["gpu"], db["gpu"]) << da.dump() << db.dump();
  const std::string gpu = std::to_string(da["gpu"].get<int>());
  const std::string pipe_a = mps + "/" + gpu + "/" + std::to_string(a) + "/0/pipe";
  const std::string pipe_b = mps + "/" + gpu + "/" + std::to_string(b) + "/0/pipe";
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Succeeded" && Phase(b) == "Succeeded"; }, 20));
  std::string out_a, out_b;
  EXPECT_TRUE(Eventually([&] {
    out_a = Run("logs " + std::to_string(a)).output;
    return out_a.find("sharing=mps threads=25 pinned=0=10240M pipe=" + pipe_a + " uid=") !=
           std::string::npos;
  })) << out_a;
  EXPECT_TRUE(Eventually([&] {
    out_b = Run("logs " + std::to_string(b)).output;
    return out_b.find("sharing=mps threads=50 pinned= pipe=" + pipe_b + " uid=") !=
           std::string::npos;
  })) << out_b;
  // The other job's daemon is out of reach: its folders are the first job's alone, and it runs
  // as the first job's uid.
  EXPECT_NE(out_b.find("Permission denied"), std::string::npos) << out_b;
  std::string uid_a = out_a.substr(out_a.find(" uid=") + 5);
  uid_a = uid_a.substr(0, uid_a.find('\n'));
  std::string uid_b = out_b.substr(out_b.find(" uid=") + 5);
  uid_b = uid_b.substr(0, uid_b.find('\n'));
  EXPECT_NE(uid_a, uid_b);
  struct stat folder {};
  ASSERT_EQ(::stat(pipe_a.c_str(), &folder), 0);
  EXPECT_EQ(folder.st_mode & 07777, 0700u);
  EXPECT_EQ(std::to_string(folder.st_uid), uid_a) << out_a;
  const std::string uuid = da["uuid"].get<std::string>();
  std::set<std::string> said;
  EXPECT_TRUE(Eventually([&] {
    said.clear();
    std::istringstream lines(ReadFile(log));
    for (std::string line; std::getline(lines, line);) said.insert(line);
    return said == std::set<std::string>{"start " + uuid + " " + pipe_a + " " + uid_a,
                                         "start " + uuid + " " + pipe_b + " " + uid_b,
                                         "quit " + uuid + " " + pipe_a,
                                         "quit " + uuid + " " + pipe_b};
  })) << ReadFile(log);
  const std::optional<Json> shared = EventSoon(a, "GpuShared");
  ASSERT_TRUE(shared);
  EXPECT_EQ((*shared)["message"],
            "GPU " + gpu +
                " of node n1 shared through MPS: held to 10240 MiB of its memory and to 25% of "
                "its compute within its job's turns (other jobs' shares of the GPU take turns "
                "with it) (task 0)");
  // A run restarted in place keeps its job's daemon: it was kept through the back-off.
  const int64_t c = Submit({{"gpuMilli", 250},
                            {"command",
                             {"sh", "-c",
                              "echo \"pipe=$CUDA_MPS_PIPE_DIRECTORY\"; "
                              "[ \"$MERIDIAN_RESTART\" = 1 ] || exit 3"}},
                            {"restartPolicy", "on-failure"},
                            {"maxRestarts", 1}});
  ASSERT_TRUE(Eventually([&] { return Phase(c) == "Succeeded"; }, 20)) << Job(c).dump();
  const std::string gc =
      std::to_string(Job(c)["status"]["allocation"][0]["devices"][0]["gpu"].get<int>());
  const std::string pipe_c = mps + "/" + gc + "/" + std::to_string(c) + "/0/pipe";
  EXPECT_TRUE(Eventually([&] {
    const std::string out = Run("logs " + std::to_string(c)).output;
    const size_t first = out.find("pipe=" + pipe_c + "\n");
    return first != std::string::npos &&
           out.find("pipe=" + pipe_c + "\n", first + 1) != std::string::npos;
  })) << Run("logs " + std::to_string(c)).output;
  EXPECT_TRUE(Eventually([&] {
    const std::string text = ReadFile(log);
    return text.find("quit " +
                     Job(c)["status"]["allocation"][0]["devices"][0]["uuid"].get<std::string>() +
                     " " + pipe_c) != std::string::npos;
  })) << ReadFile(log);
  const std::string calls = ReadFile(log);
  size_t starts = 0;
  for (size_t at = calls.find("start "); at != std::string::npos;
       at = calls.find("start ", at + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 3u) << calls;  // a, b, and c once
}

// Where MPS is not installed, a share is time-sliced and the job is told; a pool may choose
// time-slicing (development pools), or give GPUs only whole (exclusive), and shares then wait,
// saying why.
TEST_F(AgentTest, SharesFallBackToTimeSlicingAndPoolsChooseHowGpusAreShared) {
  StartAgent("n1");
  const std::string say =
      "echo \"sharing=$MERIDIAN_GPU_SHARING threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE\"";
  const int64_t a =
      Submit({{"gpuMilli", 250}, {"gpuMemoryMib", 10240}, {"command", {"sh", "-c", say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Succeeded"; }));
  EXPECT_EQ(Job(a)["status"]["allocation"][0]["devices"][0]["sharing"], "mps");
  EXPECT_TRUE(Eventually([&] {
    const std::string out = Run("logs " + std::to_string(a)).output;
    return out.find("sharing=time-slicing threads=\n") != std::string::npos &&
           out.find(
               "nvidia-cuda-mps-control is not installed on this node: the share (250 "
               "milli-GPU, 10240 MiB) is time-sliced and not enforced") != std::string::npos;
  })) << Run("logs " + std::to_string(a)).output;
  const std::optional<Json> fallback = EventSoon(a, "GpuShared");
  ASSERT_TRUE(fallback);
  EXPECT_EQ((*fallback)["type"], "Warning");
  EXPECT_NE((*fallback)["message"].get<std::string>().find(
                "time-sliced: nvidia-cuda-mps-control is not installed"),
            std::string::npos)
      << (*fallback)["message"];
  // A development pool shares by time-slicing: its jobs are placed saying so.
  auto pool = [&](const std::string& sharing) {
    CliResult r = Run("apply -f " + WriteFile("pool.yaml",
                                              "kind: NodePool\nmetadata: {name: h100}\n"
                                              "spec: {cluster: onprem, gpusPerNode: 4, "
                                              "gpuModel: H100-80GB, gpuSharing: " +
                                                  sharing + "}\n"));
    ASSERT_EQ(r.code, 0) << r.output;
  };
  pool("time-slicing");
  const int64_t dev = Submit({{"gpuMilli", 250}, {"command", {"sh", "-c", say}}});
  ASSERT_TRUE(Eventually([&] { return Phase(dev) == "Succeeded"; }));
  EXPECT_EQ(Job(dev)["status"]["allocation"][0]["devices"][0]["sharing"], "time-slicing");
  const std::string described = Run("describe job " + std::to_string(dev)).output;
  EXPECT_NE(described.find(" [0.25, time-slicing]"), std::string::npos) << described;
  const std::optional<Json> sliced = EventSoon(dev, "GpuShared");
  ASSERT_TRUE(sliced);
  EXPECT_EQ((*sliced)["type"], "Normal");
  EXPECT_NE((*sliced)["message"].get<std::string>().find("time-sliced as its pool shares GPUs"),
            std::string::npos);
  // An exclusive pool gives GPUs whole: a share waits and says why; a whole GPU runs.
  pool("exclusive");
  const int64_t share = Submit({{"gpuMilli", 250}, {"command", {"true"}}});
  const int64_t whole = Submit({{"gpus", 1}, {"command", {"true"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(whole) == "Succeeded"; }));
  EXPECT_TRUE(Eventually([&] {
    return Job(share)["status"].value("reason", "").find("gpuSharing: exclusive") !=
           std::string::npos;
  })) << Job(share).dump();
  EXPECT_EQ(Phase(share), "Pending");
}

// A job with an image runs in a container through podman (rootful, a local image imported
// from a busybox root file system; the host's settings from ../shared/components), with its
// limits and the task directory mounted; a cancelled one leaves no container behind. Where no
// runtime is installed, the job fails and says so.
TEST_F(AgentTest, JobWithAnImageRunsInAContainerOrSaysWhyNot) {
  const std::string p = dir_.File("podman");
  const std::string conf = p + "/containers.conf", storage = p + "/storage.conf";
  WriteFile("podman-setup.sh", "set -e\nP=" + p + R"SH(
mkdir -p $P/rootfs/bin $P/rootfs/proc $P/rootfs/sys $P/rootfs/dev $P/rootfs/tmp $P/rootfs/etc $P/tmp
cp /bin/busybox $P/rootfs/bin/
for a in sh echo cat sleep test id; do ln -sf busybox $P/rootfs/bin/$a; done
echo from-the-image > $P/rootfs/etc/meridian-image
cat > $P/containers.conf <<CONF
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
tmp_dir = "$P/tmp"
CONF
cat > $P/storage.conf <<CONF
[storage]
driver = "vfs"
graphroot = "$P/root"
runroot = "$P/runroot"
CONF
export CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf
tar -C $P/rootfs -c . | podman import - localhost/meridian-test > /dev/null
)SH");
  ASSERT_EQ(std::system(("bash " + dir_.File("podman-setup.sh") + " > " +
                         dir_.File("podman-setup.log") + " 2>&1")
                            .c_str()),
            0)
      << ReadFile(dir_.File("podman-setup.log"));
  const std::vector<std::pair<std::string, std::string>> podman_env = {
      {"CONTAINERS_CONF", conf}, {"CONTAINERS_STORAGE_CONF", storage}};
  agents_["c1"] = std::make_unique<AgentProcess>(
      kBinary,
      std::vector<std::string>{
          "--cluster", "onprem", "--pool", "h100", "--node", "c1", "--simulate-gpus", "4xH100-80GB",
          "--work-dir", dir_.File("agent-c1"), "--cpu-milli", "16000", "--memory-mib", "65536"},
      dir_.File("agent-c1.log"), podman_env);
  agents_["c1"]->Start(server_->url(), agent_token_);
  ASSERT_TRUE(Eventually([&] { return NodeState("c1") == "Ready"; }));
  const int64_t id = Submit(
      {{"image", "localhost/meridian-test"},
       {"memoryMib", 64},
       {"gpus", 1},
       {"command",
        {"sh", "-c",
         "echo \"in a container: job $MERIDIAN_JOB_ID on $CUDA_VISIBLE_DEVICES as uid $(id -u)\"; "
         "cat /etc/meridian-image; cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
         "/sys/fs/cgroup/memory.max 2>/dev/null; test -d $(dirname $MERIDIAN_NOTICE_FILE) && "
         "echo task-dir-mounted"}}});
  EXPECT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 30))
      << Job(id).dump() << ReadFile(dir_.File("agent-c1.log"));
  std::string out;
  EXPECT_TRUE(Eventually([&] {
    out = Run("logs " + std::to_string(id)).output;
    return out.find("task-dir-mounted") != std::string::npos;
  }));
  // As a uid of the task range (the agent is root here), not as root. Which one is not fixed:
  // a uid that owns a process on the machine (another test's task under ctest -j2) is skipped.
  const std::string said = "in a container: job " + std::to_string(id) + " on GPU-sim-c1-0 as uid ";
  const size_t at = out.find(said);
  ASSERT_NE(at, std::string::npos) << out;
  const long uid = std::strtol(out.c_str() + at + said.size(), nullptr, 10);
  EXPECT_GE(uid, 200000) << out;
  EXPECT_LE(uid, 265535) << out;
  EXPECT_NE(out.find("from-the-image"), std::string::npos) << out;
  EXPECT_NE(out.find("67108864"), std::string::npos) << out;
  // Its checkpoint folder is a volume the container's uid may write (ADR 0044).
  const Json cluster = {{"metadata", {{"name", "onprem"}}},
                        {"spec",
                         {{"type", "on-prem"},
                          {"region", "eu-west"},
                          {"storage", {{"checkpoints", dir_.File("checkpoints")}}}}}};
  ASSERT_EQ(Http(*server_, "PUT", "/api/v1/clusters/onprem", admin_, cluster.dump()).status, 200);
  const int64_t saver = Submit({{"image", "localhost/meridian-test"},
                                {"checkpoint", true},
                                {"command",
                                 {"sh", "-c",
                                  "echo 7 > $MERIDIAN_CHECKPOINT_DIR/step && echo checkpoint-"
                                  "written"}}});
  EXPECT_TRUE(Eventually([&] { return Phase(saver) == "Succeeded"; }, 30)) << Job(saver).dump();
  const std::string step = dir_.File("checkpoints/research/" + std::to_string(saver) + "/step");
  EXPECT_EQ(ReadFile(step), "7") << Run("logs " + std::to_string(saver)).output;
  // Cancelled while it sleeps: stopped, and its container removed.
  const int64_t sleeper = Submit(
      {{"image", "localhost/meridian-test"}, {"gracePeriod", 1}, {"command", {"sleep", "60"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(sleeper) == "Running"; }, 30));
  const std::string podman = "CONTAINERS_CONF=" + conf + " CONTAINERS_STORAGE_CONF=" + storage +
                             " podman ps -a --format '{{.Names}}' 2>&1";
  auto containers = [&] {
    std::string names;
    FILE* f = popen(podman.c_str(), "r");
    char buf[512];
    while (f && std::fgets(buf, sizeof buf, f)) names += buf;
    if (f) pclose(f);
    return names;
  };
  EXPECT_TRUE(Eventually([&] { return containers().find("meridian-c1.") != std::string::npos; }));
  EXPECT_EQ(Run("cancel " + std::to_string(sleeper)).code, 0);
  EXPECT_TRUE(
      Eventually([&] { return containers().find("meridian-c1.") == std::string::npos; }, 15))
      << containers();
  agents_["c1"]->Stop();
  (void)std::system(("CONTAINERS_CONF=" + conf + " CONTAINERS_STORAGE_CONF=" + storage +
                     " podman system reset -f > /dev/null 2>&1")
                        .c_str());

  // No runtime on this node's PATH: the job fails, and says why.
  agents_["bare"] = std::make_unique<AgentProcess>(
      kBinary,
      std::vector<std::string>{"--cluster", "onprem", "--pool", "h100", "--node", "bare",
                               "--simulate-gpus", "4xH100-80GB", "--work-dir",
                               dir_.File("agent-bare"), "--cpu-milli", "16000", "--memory-mib",
                               "65536"},
      dir_.File("agent-bare.log"),
      std::vector<std::pair<std::string, std::string>>{{"PATH", "/nonexistent"}});
  agents_["bare"]->Start(server_->url(), agent_token_);
  ASSERT_TRUE(Eventually([&] { return NodeState("bare") == "Ready"; }));
  // c1's agent is gone: once it is lost, bare is the only node the job can go to.
  ASSERT_TRUE(Eventually([&] { return NodeState("c1") == "Lost"; }));
  const int64_t none = Submit({{"image", "localhost/meridian-test"}, {"command", {"true"}}});
  EXPECT_TRUE(Eventually([&] { return Phase(none) == "Failed"; }, 15));
  EXPECT_EQ(Job(none)["status"]["reason"],
            "task 0: the job runs image localhost/meridian-test, but neither podman nor docker is "
            "installed on node bare")
      << Job(none).dump() << Http(*server_, "GET", "/api/v1/nodes", admin_).text;
}

TEST_F(AgentTest, RegistrationAndHeartbeatsRefuseWhatIsWrongAndWhoIsNotAnAgent) {
  auto reg = [&](const Json& body, const std::string& token) {
    return Http(*server_, "POST", "/api/v1/agents/register", token, body.dump());
  };
  Json good = {{"node", "x1"},
               {"cluster", "onprem"},
               {"pool", "h100"},
               {"gpus", Json::array({{{"uuid", "GPU-a"}, {"model", "H100-80GB"}}})}};
  Json unknown_cluster = good;
  unknown_cluster["cluster"] = "mars";
  HttpResult r = reg(unknown_cluster, agent_token_);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body["error"]["message"], "cluster: \"mars\" does not exist");
  Json mixed = good;
  mixed["gpus"].push_back({{"uuid", "GPU-b"}, {"model", "A100-80GB"}});
  r = reg(mixed, agent_token_);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.text.find("gpus[1].model: the GPUs of one node must be of one model"),
            std::string::npos)
      << r.text;
  Json bad_type = good;
  bad_type["cpuMilli"] = "many";
  r = reg(bad_type, agent_token_);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.text.find("cpuMilli: must be an integer"), std::string::npos) << r.text;
  // A member of a project is not an agent.
  Json member = {
      {"spec", {{"roles", Json::array({{{"role", "member"}, {"project", "research"}}})}}}};
  ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/ann", admin_, member.dump()).status, 201);
  HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", "ann"}}.dump());
  EXPECT_EQ(reg(good, t.body.value("token", "")).status, 403);
  // Heartbeats of a node never registered answer 404, so that its agent registers.
  r = Http(*server_, "POST", "/api/v1/agents/ghost/heartbeat", admin_, "{}");
  EXPECT_EQ(r.status, 404);
  HttpResult registered = reg(good, agent_token_);
  ASSERT_EQ(registered.status, 200);
  const std::string x1 = registered.body.value("credential", "");
  ASSERT_FALSE(x1.empty()) << registered.text;
  r = Http(*server_, "POST", "/api/v1/agents/x1/heartbeat", x1,
           R"({"tasks": [{"job": "one", "task": 0}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.text.find("tasks[0].job: must be an integer"), std::string::npos) << r.text;
  // Reports of a job the node does not run change nothing.
  const int64_t id = Submit({{"gpus", 1}, {"command", {"true"}}});
  r = Http(*server_, "POST", "/api/v1/agents/x1/heartbeat", x1,
           Json{{"tasks", Json::array({{{"job", id},
                                        {"task", 0},
                                        {"generation", 7},
                                        {"state", "Exited"},
                                        {"exitCode", 0}}})}}
               .dump());
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(Phase(id), "Succeeded");
  // A GPU sample out of range is dropped and counted; the heartbeat is taken.
  r = Http(*server_, "POST", "/api/v1/agents/x1/heartbeat", x1,
           R"({"telemetry": [{"index": 0, "utilization": 3}], "tasks": []})");
  EXPECT_EQ(r.status, 200) << r.text;
  EXPECT_TRUE(Eventually([&] {
    return Http(*server_, "GET", "/metrics", admin_)
               .text.find(
                   "meridian_node_telemetry_rejected_samples_total{node=\"x1\","
                   "cluster=\"onprem\"} 1\n") != std::string::npos;
  }));
}

// Each node speaks only for itself: the bootstrap token registers nodes and nothing more; a
// node's credential (returned by its registration) heartbeats, reports and uploads output only
// for its own node and its own tasks; a live node cannot be registered again under another
// identity; revoking a node's credential shuts it out and cordons the node.
TEST_F(AgentTest, AnAgentCredentialActsOnlyForItsOwnNode) {
  StartAgent("n1");
  const int64_t job = Submit(
      {{"gpus", 1}, {"env", {{"API_KEY", "tenant-a-secret"}}}, {"command", {"sleep", "60"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump();
  auto reg = [&](const std::string& name, const std::string& token) {
    Json body = {{"node", name},
                 {"cluster", "onprem"},
                 {"pool", "h100"},
                 {"gpus", Json::array({{{"uuid", "GPU-" + name}, {"model", "H100-80GB"}}})}};
    return Http(*server_, "POST", "/api/v1/agents/register", token, body.dump());
  };
  // An attacker with the bootstrap token: it cannot heartbeat as n1 (receiving its tasks and
  // their env), nor take n1 over by registering it again while it lives.
  HttpResult as_n1 = Http(*server_, "POST", "/api/v1/agents/n1/heartbeat", agent_token_, "{}");
  EXPECT_EQ(as_n1.status, 403);
  EXPECT_EQ(as_n1.text.find("tenant-a-secret"), std::string::npos);
  HttpResult takeover = reg("n1", agent_token_);
  EXPECT_EQ(takeover.status, 409) << takeover.text;
  // It registers a node of its own and gets that node's credential; with it, it still cannot
  // act as n1: heartbeat (and so report n1's job exited), register n1, or upload into n1's job.
  HttpResult fake = reg("evil", agent_token_);
  ASSERT_EQ(fake.status, 200) << fake.text;
  const std::string evil = fake.body.value("credential", "");
  ASSERT_FALSE(evil.empty());
  const Json exited = {{"tasks", Json::array({{{"job", job},
                                               {"task", 0},
                                               {"generation", 1},
                                               {"state", "Exited"},
                                               {"exitCode", 0}}})}};
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/agents/n1/heartbeat", evil, exited.dump()).status, 403);
  EXPECT_EQ(reg("n1", evil).status, 403);
  // Its own heartbeat reporting n1's task is ignored: the task is not evil's.
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/agents/evil/heartbeat", evil, exited.dump()).status,
            200);
  EXPECT_EQ(Phase(job), "Running");
  auto upload = [&](const std::string& node, const std::string& token, int64_t j, int64_t gen) {
    return Http(*server_, "POST",
                "/api/v1/agents/" + node + "/logs?job=" + std::to_string(j) +
                    "&task=0&generation=" + std::to_string(gen) + "&offset=0",
                token, "forged output\n")
        .status;
  };
  EXPECT_EQ(upload("n1", evil, job, 1), 403);
  EXPECT_EQ(upload("evil", evil, job, 1), 403) << "job " << job << " does not run on evil";
  EXPECT_EQ(upload("evil", evil, job, 999), 403) << "a forged generation";
  EXPECT_EQ(upload("evil", evil, 424242, 1), 404) << "a job that does not exist";
  // The real agent keeps its credential in its work directory, readable by it alone.
  struct stat st {};
  ASSERT_EQ(::stat((dir_.File("agent-n1") + "/credential").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Revoking evil's credential shuts it out and cordons the node.
  const Json tokens = Http(*server_, "GET", "/api/v1/tokens?user=node-evil", admin_).body;
  ASSERT_EQ(tokens.value("items", Json::array()).size(), 1u) << tokens.dump();
  const std::string id = tokens["items"][0].value("id", "");
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/tokens/" + id, admin_).status, 200);
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/agents/evil/heartbeat", evil, "{}").status, 401);
  const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body;
  bool cordoned = false;
  for (const Json& n : nodes.value("items", Json::array())) {
    if (n.value("name", "") == "evil") cordoned = n.value("cordoned", false);
  }
  EXPECT_TRUE(cordoned) << nodes.dump();
  // n1's own agent went on all along.
  EXPECT_EQ(Phase(job), "Running");
  EXPECT_EQ(Job(job)["status"]["generation"], 1);
  Run("cancel " + std::to_string(job));
}

// Lines "<name> <time>" that a task appends to `trace` while it lives, as a sh command.
std::string Heartbeats(const std::string& name, const std::string& trace) {
  return "while true; do echo \"" + name + " $(date +%s.%N)\" >> " + trace + "; sleep 0.02; done";
}

// The first and last time each name wrote to a trace. A line without its time is skipped: the
// notice signal goes to the task's process group, and a `date` it kills prints nothing.
std::map<std::string, std::pair<double, double>> Spans(const std::string& text) {
  std::map<std::string, std::pair<double, double>> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string name;
    double at = 0;
    if (!(in >> name >> at)) continue;
    auto [it, added] = out.emplace(name, std::pair(at, at));
    it->second.first = std::min(it->second.first, at);
    it->second.second = std::max(it->second.second, at);
  }
  return out;
}

// A cancelled job's GPUs go to the next job only once its task has stopped: the cancelled task
// ignores SIGTERM and dies by SIGKILL at the end of its grace period, and the job waiting for
// those GPUs never writes while it still does.
TEST_F(AgentTest, ACancelledJobsGpusAreGivenAwayOnlyOnceItsTaskHasStopped) {
  StartAgent("n1");
  const std::string trace = SharedFile("trace.log");
  const int64_t first =
      Submit({{"gpus", 4},
              {"gracePeriod", 4},
              {"command", {"sh", "-c", "trap '' TERM; " + Heartbeats("A", trace)}}});
  ASSERT_TRUE(Eventually([&] { return Phase(first) == "Running"; })) << Job(first).dump();
  // Its span is measured from its first line: a shell slow to start under load (ASan, -j2)
  // would otherwise seem to have run through less than its grace.
  ASSERT_TRUE(Eventually([&] { return Spans(ReadFile(trace)).count("A") > 0; }));
  CliResult c = Run("cancel " + std::to_string(first));
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(Phase(first), "Stopping") << "its task still runs";
  // Cancelling again while it stops changes nothing and is no error (once it has ended, it
  // would be a conflict: asked at once, as a slow machine may end the 4 s grace meanwhile).
  EXPECT_EQ(Run("cancel " + std::to_string(first)).code, 0);
  const int64_t next = Submit({{"gpus", 4}, {"command", {"sh", "-c", Heartbeats("B", trace)}}});
  ASSERT_TRUE(Eventually([&] { return Phase(first) == "Cancelled"; })) << Job(first).dump();
  ASSERT_TRUE(Eventually([&] { return Phase(next) == "Running"; })) << Job(next).dump();
  ASSERT_TRUE(Eventually([&] { return Spans(ReadFile(trace)).count("B") > 0; }));
  const auto spans = Spans(ReadFile(trace));
  ASSERT_TRUE(spans.count("A"));
  EXPECT_GT(spans.at("B").first, spans.at("A").second)
      << "job " << next << " started while job " << first << "'s task still ran";
  EXPECT_GE(spans.at("A").second - spans.at("A").first, 3.0) << "A ran through its grace";
  EXPECT_EQ(Job(first)["status"]["reason"], "cancelled by admin");
  EXPECT_NE(FindEvent(Events(first), "Stopped"), nullptr);
  Run("cancel " + std::to_string(next));
}

// With the default grace period (30 s), one high-priority job on a full estate stops exactly
// one low-priority job, however many cycles run while that job stops.
TEST_F(AgentTest, PreemptionWithTheDefaultGraceStopsOneJob) {
  StartAgent("n1");
  StartAgent("n2");
  const std::string trace = SharedFile("trace.log");
  std::vector<int64_t> low;
  for (const char* name : {"l1", "l2"}) {
    // The notice signal ends the task at once: the stop takes a moment, not the grace.
    low.push_back(
        Submit({{"gpus", 4},
                {"priorityClass", "low"},
                {"noticeSignal", "SIGUSR1"},
                {"restartPolicy", "on-failure"},
                {"command", {"sh", "-c", "trap 'exit 0' USR1; " + Heartbeats(name, trace)}}},
               name));
  }
  for (int64_t id : low) ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running"; }));
  // Both have set their trap once they have written: a notice before then would end a shell
  // slow to start under load before it wrote a line, leaving no span to compare.
  ASSERT_TRUE(Eventually([&] {
    const auto spans = Spans(ReadFile(trace));
    return spans.count("l1") > 0 && spans.count("l2") > 0;
  }));
  const int64_t high = Submit(
      {{"gpus", 4}, {"priorityClass", "high"}, {"command", {"sh", "-c", Heartbeats("H", trace)}}},
      "high");
  ASSERT_TRUE(Eventually([&] { return Phase(high) == "Running"; })) << Job(high).dump();
  int preempted = 0;
  int64_t victim = 0;
  for (int64_t id : low) {
    if (FindEvent(Events(id), "Preempted")) {
      ++preempted;
      victim = id;
    }
  }
  EXPECT_EQ(preempted, 1);
  ASSERT_TRUE(Eventually([&] { return Spans(ReadFile(trace)).count("H") > 0; }));
  const auto spans = Spans(ReadFile(trace));
  const std::string name = victim == low[0] ? "l1" : "l2";
  ASSERT_TRUE(spans.count(name));
  EXPECT_GT(spans.at("H").first, spans.at(name).second) << "the victim still ran";
  EXPECT_EQ(Phase(victim), "Pending");
}

// The node a job's first task runs on ("" when it has none).
std::string NodeOf(const Json& job) {
  const Json& a = job["status"]["allocation"];
  return a.is_array() && !a.empty() ? a[0].value("node", "") : "";
}

// Drain goes through the same Stopping path as preemption: the drained job's task stops (here
// by SIGKILL at the end of its grace, as it ignores SIGTERM), the job goes back to Pending and
// runs on the other node, and its two runs never overlap. The drained node takes no new job
// until it is uncordoned.
TEST_F(AgentTest, DrainingANodeRequeuesItsJobsThroughStoppingWithoutOverlap) {
  StartAgent("n1");
  StartAgent("n2");
  const std::string trace = SharedFile("trace.log");
  const int64_t job =
      Submit({{"gpus", 4},
              {"gracePeriod", 2},
              {"command", {"sh", "-c", "trap '' TERM; " + Heartbeats("$MERIDIAN_NODE", trace)}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump();
  const std::string first = NodeOf(Job(job));
  const std::string other = first == "n1" ? "n2" : "n1";
  ASSERT_TRUE(Eventually([&] { return Spans(ReadFile(trace)).count(first) > 0; }));
  CliResult drained = Run("drain " + first + " --reason 'disk swap' --no-wait");
  ASSERT_EQ(drained.code, 0) << drained.output;
  EXPECT_NE(drained.output.find("1 job asked to stop (" + std::to_string(job) + ")"),
            std::string::npos)
      << drained.output;
  EXPECT_EQ(Phase(job), "Stopping") << "its task still runs";
  EXPECT_EQ(Job(job)["status"]["reason"], "node " + first + " drained by admin (disk swap)");
  // Through Stopping and Pending, to the other node, as a new generation.
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running" && NodeOf(Job(job)) == other; }, 20))
      << Job(job).dump();
  EXPECT_EQ(Job(job)["status"]["generation"], 2);
  ASSERT_TRUE(Eventually([&] { return Spans(ReadFile(trace)).count(other) > 0; }));
  const auto spans = Spans(ReadFile(trace));
  EXPECT_GT(spans.at(other).first, spans.at(first).second)
      << "the job ran on " << other << " while its task on " << first << " still ran";
  const std::vector<Json> events = Events(job);
  for (const char* reason : {"Drained", "Stopped", "Placed"}) {
    EXPECT_NE(FindEvent(events, reason), nullptr) << reason;
  }
  auto row = [&](const std::string& name) {
    const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body;
    for (const Json& n : nodes.value("items", Json::array())) {
      if (n.value("name", "") == name) return n;
    }
    return Json::object();
  };
  EXPECT_TRUE(Eventually([&] { return row(first).value("scheduling", "") == "drained"; }))
      << row(first).dump();
  EXPECT_EQ(row(first)["state"], "Ready");
  EXPECT_EQ(row(first)["schedulable"], false);
  EXPECT_EQ(row(first)["drain"]["reason"], "disk swap");
  EXPECT_NE(Run("get nodes").output.find("Ready,Drained"), std::string::npos)
      << Run("get nodes").output;
  EXPECT_TRUE(MetricSoon(
      "meridian_node_state{node=\"" + first + "\",cluster=\"onprem\",state=\"drained\"}", "1"));
  EXPECT_TRUE(
      MetricSoon(R"(meridian_jobs_requeued_total{project="research",reason="drained"})", "1"));
  // Drained, it takes no new job: this one waits (the other node is full) until uncordon.
  const int64_t next = Submit({{"gpus", 4}, {"command", {"sleep", "30"}}}, "next");
  EXPECT_FALSE(Eventually([&] { return Phase(next) != "Pending"; }, 1.5)) << Job(next).dump();
  ASSERT_EQ(Run("uncordon " + first).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(next) == "Running"; })) << Job(next).dump();
  EXPECT_EQ(NodeOf(Job(next)), first);
  EXPECT_EQ(row(first).value("scheduling", "x"), "");
  Run("cancel " + std::to_string(job));
  Run("cancel " + std::to_string(next));
}

// A failed job says why in words a user acts on: killed for memory (from its cgroup's OOM
// counter, not only exit 137), a missing command, CUDA out of memory from the end of its output.
TEST_F(AgentTest, AFailedJobSaysWhyItFailed) {
  StartAgent("n1");
  const int64_t hog = Submit(
      {{"gpus", 1}, {"memoryMib", 64}, {"command", {"sh", "-c", "head -c 400m /dev/zero | tail"}}},
      "hog");
  const int64_t typo = Submit({{"gpus", 1}, {"command", {"pyhton3", "train.py"}}}, "typo");
  const int64_t cuda = Submit(
      {{"gpus", 1},
       {"command",
        {"sh", "-c",
         "echo 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB' >&2; "
         "exit 1"}}},
      "cuda");
  for (int64_t job : {hog, typo, cuda}) {
    ASSERT_TRUE(Eventually([&] { return Phase(job) == "Failed"; }, 30)) << Job(job).dump();
  }
  EXPECT_EQ(Job(hog)["status"]["cause"], "oom-killed") << Job(hog).dump();
  EXPECT_NE(Job(hog)["status"]["reason"].get<std::string>().find("killed for memory"),
            std::string::npos)
      << Job(hog).dump();
  EXPECT_EQ(Job(typo)["status"]["cause"], "command-not-found") << Job(typo).dump();
  EXPECT_EQ(Job(cuda)["status"]["cause"], "cuda-out-of-memory") << Job(cuda).dump();
  // And /metrics counts failures by those causes.
  for (const char* cause : {"oom_killed", "command_not_found", "cuda_out_of_memory"}) {
    const std::string series =
        std::string("meridian_jobs_failed_total{project=\"research\",cause=\"") + cause + "\"}";
    EXPECT_TRUE(MetricSoon(series, "1")) << series;
  }
  const std::vector<Json> events = Events(hog);
  const Json* failed = FindEvent(events, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_NE(failed->value("message", "").find("killed for memory"), std::string::npos)
      << failed->dump();
  CliResult described = Run("describe job " + std::to_string(hog));
  EXPECT_NE(described.output.find("Cause:        oom-killed"), std::string::npos)
      << described.output;
  EXPECT_NE(described.output.find("task 0: oom-killed: killed for memory"), std::string::npos)
      << described.output;
}

// What-if on real history: jobs that ran on a real agent are exported as a replay trace, which
// `sim replay` reads, and `plan --what-if` replays it under the live documents and under
// proposed ones (shortest first, and the pool declaring two more nodes) without applying them.
TEST_F(AgentTest, HistoryExportedFromALiveServerIsReplayedUnderProposedDocuments) {
  StartAgent("n1");
  const int64_t from = static_cast<int64_t>(WallNow()) - 1;
  std::vector<int64_t> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(
        Submit({{"gpus", 4}, {"command", {"sleep", "0.5"}}}, "wide" + std::to_string(i)));
  }
  jobs.push_back(Submit({{"gpus", 1}, {"command", {"sleep", "0.2"}}}, "narrow"));
  for (int64_t j : jobs) {
    ASSERT_TRUE(Eventually([&] { return Phase(j) == "Succeeded"; }, 30)) << Job(j).dump();
  }
  const std::string trace = dir_.File("trace");
  CliResult exported = Run("sim export --from " + std::to_string(from) + " --out " + trace);
  ASSERT_EQ(exported.code, 0) << exported.output;
  EXPECT_NE(exported.output.find("(4 jobs)"), std::string::npos) << exported.output;
  const std::string csv = ReadFile(trace + "/jobs.csv");
  // One row per job, each lasting what the server saw it run: from the agent's report of its
  // start to that of its end. Under load the start's report can come tenths of a second late, so
  // a run can read shorter than its sleep (seen: 0.11 s for 0.2 s, with four such tests at once).
  std::istringstream rows(csv);
  std::string row;
  std::getline(rows, row);  // the header
  int count = 0;
  while (std::getline(rows, row)) {
    ++count;
    const std::vector<std::string> cells = [&] {
      std::vector<std::string> v;
      std::stringstream in(row);
      for (std::string c; std::getline(in, c, ',');) v.push_back(c);
      return v;
    }();
    ASSERT_GE(cells.size(), 5u) << row;
    EXPECT_GT(std::stod(cells[2]), 0) << row;
    EXPECT_LT(std::stod(cells[2]), 30) << row;  // what the test waits for each job at most
  }
  EXPECT_EQ(count, 4) << csv;
  EXPECT_NE(ReadFile(trace + "/cluster.yaml").find("\"n1\""), std::string::npos);
  CliResult replayed = Run("sim replay --cluster " + trace + "/cluster.yaml --jobs " + trace +
                           "/jobs.csv --policy fifo");
  ASSERT_EQ(replayed.code, 0) << replayed.output;

  const std::string proposal = WriteFile("proposal.yaml", R"(kind: Policy
metadata: {name: default}
spec: {queueOrder: sjf, heartbeatInterval: 0.2, nodeLostTimeout: 2}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB, nodes: 2}
)");
  CliResult table = Run("plan -f " + proposal + " --what-if " + trace);
  ASSERT_EQ(table.code, 0) << table.output;
  std::cout << table.output;  // what a user reads, in the test's log
  EXPECT_NE(table.output.find("queueOrder"), std::string::npos) << table.output;  // the plan
  EXPECT_NE(table.output.find("What if (4 jobs"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("queue order meridian -> sjf"), std::string::npos) << table.output;
  CliResult structured = Run("-o json plan -f " + proposal + " --what-if " + trace);
  ASSERT_EQ(structured.code, 0) << structured.output;
  const size_t at = structured.output.find("{\n");  // after the progress lines on stderr
  ASSERT_NE(at, std::string::npos) << structured.output;
  const Json report = Json::parse(structured.output.substr(at));
  EXPECT_EQ(report["current"]["gpus"], 4) << report.dump();
  EXPECT_EQ(report["proposed"]["gpus"], 12) << report.dump();
  EXPECT_EQ(report["proposed"]["policy"], "sjf");
  EXPECT_FALSE(report["changes"].empty()) << report.dump();
  ASSERT_EQ(report["projects"].size(), 1u) << report.dump();
  const Json& research = report["projects"][0];
  EXPECT_EQ(research["project"], "research");
  EXPECT_EQ(research["current"]["jobs"], 4);
  // On 4 GPUs the wide jobs ran one after another; on 12 they would all start at once.
  EXPECT_GT(research["current"]["meanWaitSeconds"].get<double>(), 0.3) << report.dump();
  EXPECT_LT(research["proposed"]["meanWaitSeconds"].get<double>(),
            research["current"]["meanWaitSeconds"].get<double>())
      << report.dump();
  // Nothing was applied.
  HttpResult policy = Http(*server_, "GET", "/api/v1/policies/default", admin_);
  EXPECT_EQ(policy.body["spec"].value("queueOrder", ""), "meridian") << policy.text;
  HttpResult pool = Http(*server_, "GET", "/api/v1/nodepools/h100", admin_);
  EXPECT_EQ(pool.body["spec"].value("nodes", -1), 0) << pool.text;
}

// A drain's deadline bounds the grace of the jobs it stops: a task that ignores SIGTERM and has
// a minute of grace is killed by the drain's two seconds, and its job requeued then.
TEST_F(AgentTest, ADrainsDeadlineShortensTheGraceOfItsJobs) {
  StartAgent("n1");
  const int64_t job = Submit(
      {{"gpus", 2},
       {"gracePeriod", 60},
       {"command", {"sh", "-c", "trap '' TERM; touch " + SharedPath("ready") + "; sleep 300"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump();
  // Its trap is set: a SIGTERM before then would end it at once, under load.
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(SharedPath("ready")); }));
  const auto asked = std::chrono::steady_clock::now();
  CliResult drained = Run("drain n1 --timeout 2 --no-wait");
  ASSERT_EQ(drained.code, 0) << drained.output;
  EXPECT_EQ(Phase(job), "Stopping");
  // Killed by the deadline (plus a heartbeat or two to see it), not after its 60 s grace.
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Pending"; }, 20)) << Job(job).dump();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_LT(took, 15) << "the task was stopped by its grace, not by the drain's deadline";
  EXPECT_GE(took, 1.0) << "the task was killed before its deadline";
  const std::vector<Json> events = Events(job);
  EXPECT_NE(FindEvent(events, "Drained"), nullptr);
  EXPECT_NE(FindEvent(events, "Stopped"), nullptr);
  Run("cancel " + std::to_string(job));
}

// A cordoned node takes no new job, also after its agent registers again; what runs there
// goes on; uncordon makes it schedulable again.
TEST_F(AgentTest, ACordonedNodeTakesNoNewJobUntilUncordoned) {
  // The server restarts below: its agents' lease must outlast that outage (the fixture's 1.4 s
  // does not under ASan), or they stop their tasks as the lease says they must.
  RestartWithPolicy("{heartbeatInterval: 0.2, nodeLostTimeout: 10}");
  StartAgent("n1");
  const int64_t running = Submit({{"gpus", 2}, {"command", {"sleep", "30"}}}, "running");
  ASSERT_TRUE(Eventually([&] { return Phase(running) == "Running"; })) << Job(running).dump();
  CliResult c = Run("cordon n1");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(c.output, "node n1 cordoned\n");
  EXPECT_EQ(Run("cordon n1").code, 0) << "cordoning again changes nothing and is no error";
  // The agent comes back (its task's shim stays) and registers again, which rewrites the
  // node's spec: the cordon stays.
  agents_["n1"]->Stop(SIGKILL);
  StartAgent("n1");
  StartAgent("n2");
  // New jobs go to n2 only: the first fills it, the second waits though n1 has 2 GPUs free.
  const int64_t fill = Submit({{"gpus", 4}, {"command", {"sleep", "30"}}}, "fill");
  ASSERT_TRUE(Eventually([&] { return Phase(fill) == "Running"; })) << Job(fill).dump();
  EXPECT_EQ(NodeOf(Job(fill)), "n2");
  const int64_t waiting = Submit({{"gpus", 1}, {"command", {"sleep", "30"}}}, "waiting");
  EXPECT_FALSE(Eventually([&] { return Phase(waiting) != "Pending"; }, 1.5)) << Job(waiting).dump();
  EXPECT_NE(Run("get nodes").output.find("Ready,Cordoned"), std::string::npos)
      << Run("get nodes").output;
  int cordoned_events = 0;
  const Json node_events = Http(*server_, "GET", "/api/v1/events?limit=1000", admin_).body;
  for (const Json& e : node_events.value("items", Json::array())) {
    cordoned_events += e.value("reason", "") == "NodeCordoned";
  }
  EXPECT_EQ(cordoned_events, 1);
  // And across a restart of the server, which rebuilds the scheduler from the store.
  server_->Stop();
  ASSERT_TRUE(server_->Start());
  EXPECT_FALSE(Eventually([&] { return Phase(waiting) != "Pending"; }, 1.5)) << Job(waiting).dump();
  EXPECT_NE(Run("get nodes").output.find("Ready,Cordoned"), std::string::npos)
      << Run("get nodes").output;
  ASSERT_EQ(Run("uncordon n1").code, 0);
  EXPECT_TRUE(Eventually([&] { return Phase(waiting) == "Running"; })) << Job(waiting).dump();
  EXPECT_EQ(NodeOf(Job(waiting)), "n1");
  EXPECT_EQ(Phase(running), "Running") << "what ran on the cordoned node went on\n"
                                       << Job(running).dump();
  for (int64_t id : {running, fill, waiting}) Run("cancel " + std::to_string(id));
}

// Node operations are for admins and audited; delete is refused while jobs hold the node, and
// a deleted node's agent must register afresh.
TEST_F(AgentTest, NodeOperationsAreForAdminsAuditedAndDeleteWaitsForTheJobs) {
  StartAgent("n1");
  Json member = {
      {"spec", {{"roles", Json::array({{{"role", "member"}, {"project", "research"}}})}}}};
  ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/ann", admin_, member.dump()).status, 201);
  const std::string ann =
      Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"user", "ann"}}.dump())
          .body.value("token", "");
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"POST", "/api/v1/nodes/n1/cordon"},
                                                        {"POST", "/api/v1/nodes/n1/uncordon"},
                                                        {"POST", "/api/v1/nodes/n1/drain"},
                                                        {"DELETE", "/api/v1/nodes/n1"}}) {
    HttpResult r = Http(*server_, method, path, ann, "{}");
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.text;
  }
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/nodes/ghost/cordon", admin_).status, 404);
  HttpResult bad = Http(*server_, "POST", "/api/v1/nodes/n1/drain", admin_, R"({"deadline": -3})");
  EXPECT_EQ(bad.status, 400) << bad.text;
  const int64_t job = Submit({{"gpus", 1}, {"gracePeriod", 1}, {"command", {"sleep", "30"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump();
  HttpResult refused = Http(*server_, "DELETE", "/api/v1/nodes/n1", admin_);
  EXPECT_EQ(refused.status, 409) << refused.text;
  EXPECT_NE(refused.text.find("job " + std::to_string(job) + " still holds resources on it"),
            std::string::npos)
      << refused.text;
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/nodes/n1?force=true", admin_).status, 409)
      << "force is for a Lost node only";
  CliResult cli = Run("delete node n1");
  EXPECT_EQ(cli.code, 6) << cli.output;
  // The pool it belongs to cannot go before it does.
  cli = Run("delete nodepool h100");
  EXPECT_EQ(cli.code, 6) << cli.output;
  EXPECT_NE(cli.output.find("(n1); delete or drain it first"), std::string::npos) << cli.output;
  EXPECT_EQ(Run("delete widget w").code, 2);
  // Drained and its agent gone, it can be deleted; the agent's heartbeats then answer 404.
  ASSERT_EQ(Run("drain n1 --timeout 1").code, 0);
  EXPECT_EQ(Phase(job), "Pending");
  agents_["n1"]->Stop();
  cli = Run("delete node n1");
  ASSERT_EQ(cli.code, 0) << cli.output;
  EXPECT_EQ(NodeState("n1"), "");
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/agents/n1/heartbeat", admin_, "{}").status, 404);
  // Registered afresh, it is a new node: neither cordoned nor draining; the job runs there.
  StartAgent("n1");
  EXPECT_TRUE(Eventually([&] { return Phase(job) == "Running"; })) << Job(job).dump();
  Json audit = Http(*server_, "GET", "/api/v1/audit?limit=1000", admin_).body;
  std::map<std::string, std::set<std::string>> results;  // action -> results
  for (const Json& a : audit.value("items", Json::array())) {
    results[a.value("action", "")].insert(a.value("result", ""));
  }
  EXPECT_EQ(results["nodes.cordon"], (std::set<std::string>{"denied", "failed"}));
  EXPECT_EQ(results["nodes.drain"], (std::set<std::string>{"denied", "failed", "allowed"}));
  EXPECT_EQ(results["nodes.delete"], (std::set<std::string>{"denied", "failed", "allowed"}));
  Run("cancel " + std::to_string(job));
}

// Issue 19, item 2: `meridian exec` runs a command inside a running task, through the server and
// the task's agent, with the task's uid, environment, folder and cgroup; its output and exit code
// come back as the command gave them, separately on stdout and stderr.
TEST_F(AgentTest, ExecRunsInsideTheTaskAsItsUserAndExitsWithItsCode) {
  StartAgent("n1");
  const std::string pid_file = SharedPath("task.pid");
  const int64_t job =
      Submit({{"command", {"sh", "-c", "echo $$ > " + pid_file + "; exec sleep 600"}},
              {"env", {{"SECRET", "s3cret"}}},
              {"memoryMib", 256}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running" && !ReadFile(pid_file).empty(); }));
  const std::string task_pid = ReadFile(pid_file).substr(0, ReadFile(pid_file).find('\n'));
  const std::string status = ReadFile("/proc/" + task_pid + "/status");
  unsigned uid = 0;
  ASSERT_EQ(std::sscanf(status.c_str() + status.find("Uid:"), "Uid: %u", &uid), 1) << status;
  const std::string task_uid = std::to_string(uid);
  const std::string id = std::to_string(job);

  // What it sees is the task's: uid, environment, working folder, cgroup.
  CliResult seen =
      Run("exec " + id +
          " -- sh -c 'id -u; echo \"$SECRET $MERIDIAN_JOB_ID\"; pwd; cat /proc/self/cgroup; "
          "echo to-stderr >&2; exit 7'");
  EXPECT_EQ(seen.code, 7) << seen.output;
  EXPECT_NE(seen.output.find(task_uid + "\n"), std::string::npos) << seen.output << task_uid;
  EXPECT_NE(task_uid, "0");
  EXPECT_NE(seen.output.find("s3cret " + id), std::string::npos) << seen.output;
  EXPECT_NE(seen.output.find("/work\n"), std::string::npos) << seen.output;
  const std::string task_cgroup = ReadFile("/proc/" + task_pid + "/cgroup");
  EXPECT_NE(seen.output.find(task_cgroup), std::string::npos) << seen.output << "\ntask's cgroup:\n"
                                                              << task_cgroup;
  EXPECT_NE(seen.output.find("to-stderr"), std::string::npos) << seen.output;

  // Input goes to the command with -i (here a file), and its end is the command's end of input.
  const std::string input = WriteFile("input.txt", "first line\nsecond line\n");
  CliResult cat = Run("exec -i " + id + " -- sh -c 'wc -l; echo done' < " + input);
  EXPECT_EQ(cat.code, 0) << cat.output;
  EXPECT_NE(cat.output.find("2\ndone"), std::string::npos) << cat.output;
  // A file larger than one message may be (1 MiB) goes through whole, a chunk at a time.
  const std::string big = WriteFile("big.bin", std::string(3 << 20, 'x'));
  CliResult counted = Run("exec -i " + id + " -- wc -c < " + big);
  EXPECT_EQ(counted.code, 0) << counted.output;
  EXPECT_NE(counted.output.find(std::to_string(3 << 20)), std::string::npos) << counted.output;
  // Without -i the command reads an empty input at once rather than waiting.
  CliResult none = Run("exec " + id + " -- sh -c 'cat; echo read-nothing'");
  EXPECT_NE(none.output.find("read-nothing"), std::string::npos) << none.output;
  // A signal's end is 128 + its number, as a shell says it.
  EXPECT_EQ(Run("exec " + id + " -- sh -c 'kill -9 $$'").code, 137);
  // A command that does not exist: 127, with the reason on stderr.
  CliResult missing = Run("exec " + id + " -- /no/such/program");
  EXPECT_EQ(missing.code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run /no/such/program"), std::string::npos)
      << missing.output;

  // Audited, with the command.
  HttpResult audit = Http(*server_, "GET", "/api/v1/audit?limit=1000", admin_);
  bool audited = false;
  for (const Json& e : audit.body.value("items", Json::array())) {
    audited = audited || (e.value("action", "") == "jobs.exec" &&
                          e.value("message", "").find("wc -l") != std::string::npos);
  }
  EXPECT_TRUE(audited) << audit.text;
  // A job that does not run has nothing to exec into; one the caller cannot see does not exist.
  Submit({{"command", {"sleep", "600"}}, {"gpus", 4}});
  const int64_t waiting = Submit({{"command", {"sleep", "1"}}, {"gpus", 4}});
  ASSERT_TRUE(Eventually([&] { return Phase(waiting) == "Pending"; }));
  CliResult pending = Run("exec " + std::to_string(waiting) + " -- true");
  EXPECT_EQ(pending.code, 6) << pending.output;
  EXPECT_NE(pending.output.find("not Running"), std::string::npos) << pending.output;
  EXPECT_EQ(Run("exec 999 -- true").code, 5);
}

// Who may open a session: those who may cancel the job. A viewer may read its logs but not run
// code as it; a member of another project does not see it at all.
TEST_F(AgentTest, ExecIsForThoseWhoMayManageTheJob) {
  StartAgent("n1");
  const int64_t job = Submit({{"command", {"sleep", "600"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; }));
  auto token_of = [&](const std::string& name, const Json& roles) {
    EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/" + name, admin_,
                   Json{{"spec", {{"roles", roles}}}}.dump())
                  .status,
              201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_,
                        Json{{"user", name}, {"description", "test"}}.dump());
    return t.body.value("token", "");
  };
  const std::string viewer =
      token_of("vic", Json::array({{{"role", "viewer"}, {"project", "research"}}}));
  CliResult denied =
      Cli(kBinary, "exec " + std::to_string(job) + " -- true", server_->url(), viewer);
  EXPECT_EQ(denied.code, 4) << denied.output;
  EXPECT_NE(denied.output.find("may not exec into job"), std::string::npos) << denied.output;
  EXPECT_EQ(Cli(kBinary, "logs " + std::to_string(job), server_->url(), viewer).code, 0);
  // A token that registers nodes but speaks for none cannot take up a node's session (another
  // node's claim is refused by the relay: SessionRelay's unit tests).
  HttpResult stolen = Http(*server_, "GET", "/api/v1/agents/n1/sessions/0123", agent_token_);
  EXPECT_EQ(stolen.status, 403) << stolen.text;
}

// A terminal: the command gets one (a controlling tty of its own, with this terminal's size),
// and when the user goes away the command is ended.
TEST_F(AgentTest, ExecWithATerminalGetsItsSizeAndEndsWhenTheUserGoes) {
  StartAgent("n1");
  const int64_t job = Submit({{"command", {"sleep", "600"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; }));
  int master = -1, slave = -1;
  winsize size{33, 101, 0, 0};
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, &size), 0);
  const std::string exec_pid = SharedPath("exec.pid");
  // Made before fork(): the child of a threaded process only sets up its terminal and execs.
  const std::string script = "tty; stty size; echo $$ > " + exec_pid + "; exec sleep 300";
  std::vector<std::string> args = {kBinary, "exec", "-it", std::to_string(job),
                                   "--",    "sh",   "-c",  script};
  std::vector<std::string> env = EnvironmentWith({{"MERIDIAN_CONFIG", "/nonexistent/config.json"},
                                                  {"MERIDIAN_SERVER", server_->url()},
                                                  {"MERIDIAN_TOKEN", admin_}});
  const std::vector<char*> argv = CStrings(args);
  const std::vector<char*> envp = CStrings(env);
  const pid_t cli = fork();
  if (cli == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(slave);
  std::string seen;
  ASSERT_TRUE(Eventually(
      [&] {
        char buf[4096];
        pollfd p{master, POLLIN, 0};
        while (poll(&p, 1, 50) > 0) {
          const ssize_t n = read(master, buf, sizeof buf);
          if (n <= 0) break;
          seen.append(buf, static_cast<size_t>(n));
        }
        return seen.find("33 101") != std::string::npos && !ReadFile(exec_pid).empty();
      },
      20))
      << seen;
  EXPECT_NE(seen.find("/dev/pts/"), std::string::npos) << seen;
  const int remote = std::atoi(ReadFile(exec_pid).c_str());
  ASSERT_GT(remote, 0);
  EXPECT_TRUE(Alive(remote));
  // The user's side dies without a word: the command in the task ends within seconds.
  kill(cli, SIGKILL);
  waitpid(cli, nullptr, 0);
  EXPECT_TRUE(Eventually([&] { return !Alive(remote); }, 20)) << "the command outlived its session";
  close(master);
  EXPECT_EQ(Phase(job), "Running");  // the task itself runs on
}

// `meridian port-forward` reaches a server inside the task from a local port, one session per
// connection.
TEST_F(AgentTest, PortForwardReachesAServerInsideTheTask) {
  StartAgent("n1");
  const int remote = FreePort();
  const std::string port = std::to_string(remote);
  // An interactive job that serves a port: submit says how to reach it.
  CliResult submitted =
      Run("submit --project research --type interactive --env GREETING=hello --port " + port +
          " -- sh -c 'mkdir -p site && echo $GREETING-from-the-task > site/index.html && exec "
          "busybox httpd -f -p 127.0.0.1:" +
          port + " -h site'");
  ASSERT_EQ(submitted.code, 0) << submitted.output;
  const int64_t job = 1;
  EXPECT_NE(submitted.output.find("reach port " + port + " once it runs: meridian port-forward 1 " +
                                  port + ":" + port),
            std::string::npos)
      << submitted.output;
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Running"; }));
  EXPECT_NE(Run("describe job 1").output.find("Port:         " + port), std::string::npos);
  const int local = FreePort();
  ChildProcess forward({kBinary, "--server", server_->url(), "--token", admin_, "port-forward",
                        std::to_string(job), std::to_string(local) + ":" + std::to_string(remote)},
                       dir_.File("forward.log"));
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(dir_.File("forward.log")).find("Forwarding from") != std::string::npos;
  })) << ReadFile(dir_.File("forward.log"));
  for (int i = 0; i < 3; ++i) {
    httplib::Client c("127.0.0.1", local);
    c.set_read_timeout(20);
    std::string body;
    ASSERT_TRUE(Eventually(
        [&] {
          auto r = c.Get("/index.html");
          if (r && r->status == 200) body = r->body;
          return !body.empty();
        },
        20))
        << ReadFile(dir_.File("forward.log"));
    EXPECT_EQ(body, "hello-from-the-task\n");
  }
  // A port nothing listens on: the connection ends, and the forwarder says why.
  const int closed = FreePort();
  const int local2 = FreePort();
  ChildProcess nowhere({kBinary, "--server", server_->url(), "--token", admin_, "port-forward",
                        std::to_string(job), std::to_string(local2) + ":" + std::to_string(closed)},
                       dir_.File("nowhere.log"));
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(dir_.File("nowhere.log")).find("Forwarding from") != std::string::npos;
  })) << ReadFile(dir_.File("nowhere.log"));
  httplib::Client c("127.0.0.1", local2);
  c.set_read_timeout(20);
  EXPECT_FALSE(c.Get("/"));
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(dir_.File("nowhere.log"))
               .find("nothing listens on port " + std::to_string(closed)) != std::string::npos;
  })) << ReadFile(dir_.File("nowhere.log"));
}

// Orders are pushed (docs/adr/0030): with heartbeats 10 s apart, a job placed on a node starts,
// is seen running, and its exit is heard, each within about a second, not at the node's next
// heartbeat; a cancel reaches the task as soon. The figures are printed.
TEST_F(AgentTest, OrdersReachTheAgentAtOnceNotAtItsNextHeartbeat) {
  RestartWithPolicy("{heartbeatInterval: 10, nodeLostTimeout: 60}");
  StartAgent("n1");
  const std::string trace = SharedFile("trace.log");
  auto seconds_until = [&](const std::function<bool()>& ready) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(Eventually(ready, 15));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> to_running, to_done, to_stopped;
  for (int i = 0; i < 5; ++i) {
    // One that ends by itself: its exit is reported when it happens.
    const int64_t quick = Submit({{"gpus", 1}, {"command", {"sh", "-c", "sleep 0.5"}}}, "quick");
    to_done.push_back(seconds_until([&] { return Phase(quick) == "Succeeded"; }));
    // One that runs until it is cancelled: the cancel's notice (SIGUSR1, at once; SIGTERM would
    // come half the 30 s grace later) reaches its task at once, and it ends on it.
    const int64_t held =
        Submit({{"gpus", 1},
                {"noticeSignal", "SIGUSR1"},
                {"command", {"sh", "-c", "trap 'exit 0' USR1; while true; do sleep 0.05; done"}}},
               "held");
    to_running.push_back(seconds_until([&] { return Phase(held) == "Running"; }));
    ASSERT_EQ(Run("cancel " + std::to_string(held)).code, 0);
    to_stopped.push_back(seconds_until([&] { return Phase(held) == "Cancelled"; }));
    ASSERT_EQ(Phase(held), "Cancelled") << Job(held).dump() << "\n"
                                        << ReadFile(dir_.File("agent-n1.log"));
  }
  auto worst = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  std::printf(
      "submitted to Running: max %.2f s; to Succeeded (0.5 s task): max %.2f s; "
      "cancel to Cancelled (the task ends on its notice): max %.2f s (heartbeats every "
      "10 s)\n",
      worst(to_running), worst(to_done), worst(to_stopped));
  // A heartbeat's interval would be 10 s; these take one cycle and a round trip or two.
  EXPECT_LT(worst(to_running), 3.0);
  EXPECT_LT(worst(to_done), 3.5);
  EXPECT_LT(worst(to_stopped), 3.0);
}

}  // namespace
}  // namespace meridian::testing
