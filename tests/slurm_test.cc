// End-to-end tests of the Slurm connector: a real Slurm 22.05 cluster (munged, slurmctld, and one
// slurmd per logical node, four nodes on this host, each with four fake GPU device files), a real
// `meridian server`, a real `meridian slurm-connector`, and real Slurm jobs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "slurm/local_cluster.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// Seconds since the epoch, as the trace writers below write them (date +%s.%N).
double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Of a trace's lines ("[PREFIX]SECONDS"), the latest time among those that start with `prefix`
// (every line with none); 0 when there is none.
double LastTime(const std::string& trace, const std::string& prefix = "") {
  double last = 0;
  std::istringstream lines(ReadFile(trace));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) last = std::max(last, std::stod(line.substr(prefix.size())));
  }
  return last;
}

// The real Slurm cluster under test, as the dev estate runs it (slurm::LocalCluster): four nodes
// of four fake H100s. Slurm's commands in this process find it through SLURM_CONF.
class SlurmCluster : public slurm::LocalCluster {
 public:
  explicit SlurmCluster(const std::string& dir) : LocalCluster(dir, 4, 4) {}
  std::string Up() {
    base::Status s = Start();
    if (s.ok()) setenv("SLURM_CONF", conf().c_str(), 1);
    return s.ok() ? "" : s.message();
  }
  std::string Restart() {
    base::Status s = RestartController();
    return s.ok() ? "" : s.message();
  }
  // Slurm's jobs named `name`, as squeue shows them.
  std::vector<Json> JobsNamed(const std::string& name) const {
    const Json q = Json::parse(Command({"squeue", "--json"}), nullptr, false);
    std::vector<Json> out;
    if (!q.is_object()) return out;
    for (const Json& j : q.value("jobs", Json::array())) {
      if (j.value("name", "") == name) out.push_back(j);
    }
    return out;
  }
};

// Two clusters under one quota: `hpc` is the Slurm cluster, `onprem` has Meridian's own agents.
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
metadata: {name: other}
spec: {team: lab}
---
kind: Project
metadata: {name: unmapped}
spec: {team: lab}
---
kind: Quota
metadata: {name: research}
spec: {project: research, limitGpus: 8}
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
metadata: {name: hpc}
spec: {type: on-prem, region: eu-west, backend: slurm}
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
spec: {heartbeatInterval: 0.5, nodeLostTimeout: 6}
)";

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);  // munged's socket is under it
    slurm_ = std::make_unique<SlurmCluster>(dir_.File("slurm"));
    const std::string error = slurm_->Up();
    ASSERT_EQ(error, "") << "a real Slurm cluster is needed (scripts/install-deps.sh installs "
                            "slurm-wlm and munge; the test runs as root)";
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate));
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
    StartConnector();
    for (int i = 1; i <= 4; ++i) {
      ASSERT_TRUE(Eventually([&] { return Node("slurm-n" + std::to_string(i)).is_object(); }))
          << ReadFile(dir_.File("connector.log"));
    }
  }

  void StartConnector(const std::string& interval = "0.5",
                      const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"--cluster",         "hpc",
                                     "--slurm-conf",      slurm_->conf(),
                                     "--partition",       "gpu",
                                     "--node-prefix",     "slurm-",
                                     "--work-dir",        dir_.File("connector"),
                                     "--interval",        interval,
                                     "--slurm-timeout",   "3",
                                     "--pending-timeout", "3"};
    args.insert(args.end(), more.begin(), more.end());
    connector_ = std::make_unique<AgentProcess>(kBinary, args, dir_.File("connector.log"));
    connector_->As("slurm-connector").Start(server_->url(), agent_token_);
  }

  Json Node(const std::string& name) {
    HttpResult nodes = Http(*server_, "GET", "/api/v1/nodes", admin_);
    for (const Json& n : nodes.body.value("items", Json::array())) {
      if (n.value("name", "") == name) return n;
    }
    return nullptr;
  }
  CliResult Run(const std::string& args) { return Cli(kBinary, args, server_->url(), admin_); }
  // Four jobs of four GPUs where work outside Meridian holds part of `node`: three run, none of
  // them on `node`, and the fourth waits in Meridian's queue, not in Slurm's. Returns the fourth
  // (0 when none waits).
  int64_t ThreeOfFourRunAwayFrom(const std::string& node) {
    std::vector<int64_t> jobs;
    for (int i = 0; i < 4; ++i) {
      jobs.push_back(Submit({{"command", {"sleep", "60"}}, {"gpus", 4}}, "four", "other"));
    }
    EXPECT_TRUE(Eventually([&] { return Count(jobs, "Running") == 3; }, 20)) << Says();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    int64_t waiting = 0;
    for (int64_t id : jobs) {
      const Json j = Job(id);
      if (Phase(id) == "Pending") waiting = id;
      for (const Json& a : j["status"].value("allocation", Json::array())) {
        EXPECT_NE(a.value("node", ""), node) << j.dump();
      }
    }
    if (waiting != 0) {
      EXPECT_TRUE(slurm_->JobsNamed(SlurmName(waiting)).empty()) << Says();
    }
    return waiting;
  }
  // The Slurm job `foreign` is cancelled: `waiting` runs on `node`, which it freed.
  void CancelAndSeeItRunThere(const std::string& foreign, int64_t waiting,
                              const std::string& node) {
    Shell("scancel " + foreign);
    ASSERT_TRUE(Eventually([&] { return Phase(waiting) == "Running"; }, 20)) << Says();
    EXPECT_EQ(Job(waiting)["status"]["allocation"][0].value("node", ""), node);
  }
  int64_t Submit(const Json& spec, const std::string& name = "job",
                 const std::string& project = "research") {
    Json job = {{"metadata", {{"name", name}, {"project", project}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  // A gang of `tasks` 2-GPU tasks, each of which says its index, node and GPUs and sleeps 2 s:
  // its allocation once it runs (or ran), empty if it did not start within 20 s.
  Json StartGangSayingItsGpus(int tasks, int64_t* id) {
    *id = Submit({{"command",
                   {"bash", "-c",
                    "echo \"task $MERIDIAN_TASK_INDEX on $MERIDIAN_NODE "
                    "gpus=$CUDA_VISIBLE_DEVICES\"; sleep 2"}},
                  {"gpus", 2},
                  {"tasks", tasks}});
    const bool started =
        Eventually([&] { return Phase(*id) == "Running" || Phase(*id) == "Succeeded"; }, 20);
    EXPECT_TRUE(started) << Job(*id).dump() << Says();
    return started ? Job(*id)["status"].value("allocation", Json::array()) : Json::array();
  }
  int Count(const std::vector<int64_t>& jobs, const std::string& phase) {
    int n = 0;
    for (int64_t id : jobs) n += Phase(id) == phase;
    return n;
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  std::string Logs(int64_t id, int task = 0) {
    return Run("logs " + std::to_string(id) + " --task " + std::to_string(task)).output;
  }
  // The connector's instance is its cluster's name, hpc.
  std::string SlurmName(int64_t id, int64_t generation = 1) {
    return "meridian-hpc-" + std::to_string(id) + "-" + std::to_string(generation);
  }
  std::string Says() {
    return "\nconnector:\n" + ReadFile(dir_.File("connector.log")) + "\nsqueue:\n" +
           Shell("squeue -t all");
  }

  base::testing::TempDir dir_;
  std::unique_ptr<SlurmCluster> slurm_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<AgentProcess> connector_;
  std::string admin_, agent_token_;
};

TEST_F(SlurmTest, InventoryMatchesSlurmAndADrainedNodeIsNotUsed) {
  for (int i = 1; i <= 4; ++i) {
    const Json n = Node("slurm-n" + std::to_string(i));
    EXPECT_EQ(n.value("cluster", ""), "hpc");
    EXPECT_EQ(n.value("model", ""), "H100-80GB");
    EXPECT_EQ(n.value("gpus", Json::array()).size(), 4u);
    EXPECT_EQ(n.value("cpuMilli", 0), 16000);
    EXPECT_EQ(n.value("memoryMib", 0), 64000);
    EXPECT_TRUE(n.value("schedulable", false));
  }
  Shell("scontrol update nodename=n4 state=drain reason=maintenance");
  ASSERT_TRUE(Eventually([&] { return !Node("slurm-n4").value("schedulable", true); }))
      << Node("slurm-n4").dump();
  // Four jobs of a whole node each; the quota (8 GPUs) would stop the third, so each asks for
  // a share of none: CPU-bound jobs of 16 CPUs, one per node.
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(Submit({{"command", {"sleep", "20"}}, {"cpuMilli", 16000}, {"memoryMib", 1000}},
                          "whole-" + std::to_string(i)));
  }
  ASSERT_TRUE(Eventually([&] { return Count(jobs, "Running") == 3; }, 20)) << Says();
  EXPECT_EQ(Count(jobs, "Pending"), 1);
  for (int64_t id : jobs) {
    const Json j = Job(id);
    for (const Json& a : j["status"].value("allocation", Json::array())) {
      EXPECT_NE(a.value("node", ""), "slurm-n4") << j.dump();
    }
  }
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(jobs[0])).size() +
                slurm_->JobsNamed(SlurmName(jobs[1])).size() +
                slurm_->JobsNamed(SlurmName(jobs[2])).size() +
                slurm_->JobsNamed(SlurmName(jobs[3])).size(),
            3u);
}

TEST_F(SlurmTest, AJobRunsWithItsGpusItsOutputAndExitCodeComeBackAndAGangIsOneSlurmJob) {
  const int64_t one = Submit({{"command",
                               {"bash", "-c",
                                "echo \"gpus=$CUDA_VISIBLE_DEVICES "
                                "node=$MERIDIAN_NODE\"; exit 3"}},
                              {"gpus", 2}});
  ASSERT_TRUE(Eventually([&] { return Phase(one) == "Failed"; }, 20)) << Says();
  const Json j = Job(one);
  EXPECT_NE(j["status"].value("reason", "").find("exited with code 3"), std::string::npos)
      << j.dump();
  ASSERT_TRUE(Eventually([&] {
    return Logs(one).find("gpus=0,1 node=slurm-n") != std::string::npos;
  })) << Logs(one);
  ASSERT_EQ(slurm_->JobsNamed(SlurmName(one)).size(), 1u);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(one))[0].value("job_state", ""), "FAILED");
  // A job with an image is not placed here, where it could only fail (no agent runs yet to take
  // it): it waits, saying why.
  const int64_t image = Submit({{"command", {"true"}}, {"image", "busybox"}});
  ASSERT_TRUE(Eventually([&] {
    return Job(image)["status"].value("reason", "").find("runs commands, not images") !=
           std::string::npos;
  })) << Job(image).dump();
  EXPECT_EQ(Phase(image), "Pending");
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(image)).empty());

  const int64_t gang = Submit({{"command",
                                {"bash", "-c",
                                 "echo \"task $MERIDIAN_TASK_INDEX of "
                                 "$MERIDIAN_WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES\"; "
                                 "sleep 3"}},
                               {"gpus", 4},
                               {"tasks", 2}});
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Running"; }, 20)) << Says();
  const std::vector<Json> slurm_jobs = slurm_->JobsNamed(SlurmName(gang));
  ASSERT_EQ(slurm_jobs.size(), 1u) << Says();
  EXPECT_EQ(slurm_jobs[0].value("node_count", 0), 2);
  // Its tasks sleep 3 s; Slurm's own launch of the two steps once took over 20 s while ctest ran
  // the costliest tests beside it (a clean-clone run of 458098c: squeue still said R at 0:20),
  // so the bound is Slurm's under load, not the job's length.
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Succeeded"; }, 60)) << Says();
  for (int task = 0; task < 2; ++task) {
    EXPECT_TRUE(Eventually([&] {
      return Logs(gang, task).find("task " + std::to_string(task) + " of 2 gpus=0,1,2,3") !=
             std::string::npos;
    })) << Logs(gang, task);
  }
}

// Two 2-GPU tasks of a gang fit one 4-GPU node, and Meridian packs them there: one Slurm job on
// one node, two tasks, each bound to GPUs of its own.
TEST_F(SlurmTest, TwoTasksOfAGangOnOneSlurmNodeRunThereEachWithItsOwnGpus) {
  int64_t gang = 0;
  const Json allocation = StartGangSayingItsGpus(2, &gang);
  ASSERT_EQ(allocation.size(), 2u) << allocation.dump();
  const std::string node = allocation[0].value("node", "");
  ASSERT_EQ(allocation[1].value("node", ""), node) << allocation.dump();
  const std::vector<Json> slurm_jobs = slurm_->JobsNamed(SlurmName(gang));
  ASSERT_EQ(slurm_jobs.size(), 1u) << Says();
  EXPECT_EQ(slurm_jobs[0].value("node_count", 0), 1);
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Succeeded"; }, 60))
      << Job(gang).dump() << Says();
  std::set<std::string> gpus;
  for (int task = 0; task < 2; ++task) {
    const std::string said = "task " + std::to_string(task) + " on " + node + " gpus=";
    ASSERT_TRUE(Eventually([&] { return Logs(gang, task).find(said) != std::string::npos; }))
        << Logs(gang, task);
    const std::string out = Logs(gang, task);
    std::istringstream list(out.substr(out.find(said) + said.size()));
    std::string line, gpu;
    std::getline(list, line);
    std::istringstream each(line);
    int n = 0;
    while (std::getline(each, gpu, ',')) n += gpus.insert(gpu).second;
    EXPECT_EQ(n, 2) << "task " << task << " saw GPUs " << line << ", another task's among them";
  }
  EXPECT_EQ(gpus, (std::set<std::string>{"0", "1", "2", "3"}));
}

// Three 2-GPU tasks on 4-GPU nodes: packed, two would go on one node and the third on another,
// which no Slurm job can be (Slurm asks the same number of tasks of each node of a job). The
// scheduler lays them out one to a node instead: one Slurm job of three nodes, one task on each,
// run at the first placement, never given back.
TEST_F(SlurmTest, AGangOfThreeTasksOnFourGpuSlurmNodesIsLaidOutOneToANodeAndRuns) {
  int64_t gang = 0;
  const Json allocation = StartGangSayingItsGpus(3, &gang);
  ASSERT_EQ(allocation.size(), 3u) << allocation.dump();
  std::map<int, std::string> node_of;  // task -> node
  std::set<std::string> nodes;
  for (const Json& a : allocation) {
    node_of[a.value("task", -1)] = a.value("node", "");
    nodes.insert(a.value("node", ""));
  }
  EXPECT_EQ(nodes.size(), 3u) << allocation.dump();
  const std::vector<Json> slurm_jobs = slurm_->JobsNamed(SlurmName(gang));
  ASSERT_EQ(slurm_jobs.size(), 1u) << Says();
  EXPECT_EQ(slurm_jobs[0].value("node_count", 0), 3);
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Succeeded"; }, 60))
      << Job(gang).dump() << Says();
  for (int task = 0; task < 3; ++task) {
    const std::string said = "task " + std::to_string(task) + " on " + node_of[task] + " gpus=0,1";
    EXPECT_TRUE(Eventually([&] { return Logs(gang, task).find(said) != std::string::npos; }))
        << Logs(gang, task);
  }
  for (const Json& e : JobEvents(*server_, admin_, gang)) {
    EXPECT_NE(e.value("reason", ""), "Requeued") << e.dump();
  }
  EXPECT_EQ(Job(gang)["status"].value("generation", 0), 1);
}

// The connector waits on its cluster's doorbell: with rounds 8 s apart, a job placed on Slurm
// reaches sbatch at once, and its cancel reaches Slurm at once, not at the next round. Four jobs,
// one after another: without the doorbell each would wait for a round, on average 4 s.
TEST_F(SlurmTest, OrdersReachSlurmAtOnceNotAtTheConnectorsNextRound) {
  ASSERT_EQ(Run("apply -f " + WriteTestFile(dir_.File("policy.yaml"),
                                            "kind: Policy\nmetadata: {name: default}\nspec: {}\n"))
                .code,
            0);
  connector_->Stop(SIGKILL);
  StartConnector("8");
  ASSERT_TRUE(Eventually(
      [&] { return ReadFile(dir_.File("connector.log")).find("doorbell") != std::string::npos; },
      20))
      << Says();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (int i = 0; i < 4; ++i) {
    const auto submitted = Clock::now();
    const int64_t id = Submit({{"command", {"sleep", "60"}}, {"gpus", 1}}, "bell");
    ASSERT_TRUE(Eventually([&] { return !slurm_->JobsNamed(SlurmName(id)).empty(); }, 20))
        << Says();
    const double reached = seconds_since(submitted);
    // Running in Slurm (Meridian hears of it only at the next round, 8 s on).
    ASSERT_TRUE(Eventually(
        [&] {
          const std::vector<Json> jobs = slurm_->JobsNamed(SlurmName(id));
          return !jobs.empty() && jobs[0].value("job_state", "") == "RUNNING";
        },
        20))
        << Says();
    const auto cancelled = Clock::now();
    ASSERT_EQ(Run("cancel " + std::to_string(id)).code, 0);
    std::string state;
    ASSERT_TRUE(Eventually(
        [&] {
          const std::vector<Json> jobs = slurm_->JobsNamed(SlurmName(id));
          state = jobs.empty() ? "" : jobs[0].value("job_state", "");
          return !state.empty() && state != "RUNNING" && state != "PENDING";
        },
        20))
        << Says();
    const double stopped = seconds_since(cancelled);
    std::cout << "job " << i << ": in Slurm " << reached << " s after submission; " << state
              << " there " << stopped << " s after its cancel (rounds 8 s apart)\n";
    EXPECT_LT(reached, 3) << Says();
    EXPECT_LT(stopped, 3) << Says();
  }
}

// restartPolicy on-failure restarts a failed task in place on Slurm as an agent does: in the same
// Slurm job, after 1, 2 ... s, within maxRestarts, each restart an event; past them the job fails
// with the task's exit code. Before, the first failure failed the run.
TEST_F(SlurmTest, AFailedTaskRestartsInPlaceByItsRestartPolicy) {
  const std::string tries = dir_.File("tries");
  const int64_t flaky =
      Submit({{"command",
               {"bash", "-c",
                "n=$(cat " + tries + " 2>/dev/null || echo 0); echo $((n + 1)) > " + tries +
                    "; echo \"try $n restart $MERIDIAN_RESTART\"; [ $n -ge 2 ] || exit 3"}},
              {"restartPolicy", "on-failure"},
              {"maxRestarts", 3}});
  ASSERT_TRUE(Eventually([&] { return Phase(flaky) == "Succeeded"; }, 40))
      << Job(flaky).dump() << Says();
  const Json done = Job(flaky);
  EXPECT_EQ(done["status"]["tasks"][0].value("restarts", -1), 2) << done.dump();
  EXPECT_EQ(done["status"].value("generation", 0), 1) << "restarted in place, not requeued";
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(flaky)).size(), 1u) << Says();
  int restarted = 0;
  for (const Json& e : JobEvents(*server_, admin_, flaky)) {
    restarted += e.value("reason", "") == "Restarted";
  }
  EXPECT_EQ(restarted, 2);
  ASSERT_TRUE(Eventually([&] { return Logs(flaky).find("try 2 restart 2") != std::string::npos; }))
      << Logs(flaky);
  const std::string logs = Logs(flaky);
  for (const char* said :
       {"try 0 restart 0", "try 1 restart 1", "meridian: exited with code 3; restarting in 1 s",
        "meridian: exited with code 3; restarting in 2 s"}) {
    EXPECT_NE(logs.find(said), std::string::npos) << said << " in\n" << logs;
  }

  // Past maxRestarts: failed with the task's code, restarted once.
  const int64_t failing = Submit({{"command", {"bash", "-c", "echo once; exit 4"}},
                                  {"restartPolicy", "on-failure"},
                                  {"maxRestarts", 1}});
  ASSERT_TRUE(Eventually([&] { return Phase(failing) == "Failed"; }, 40)) << Says();
  const Json failed = Job(failing);
  EXPECT_EQ(failed["status"]["tasks"][0].value("restarts", -1), 1) << failed.dump();
  EXPECT_EQ(failed["status"]["tasks"][0].value("exitCode", -1), 4) << failed.dump();

  // Cancelled while it waits to restart: it stops at once, not when its grace period (30 s) ends
  // and Slurm's job is killed, and is not restarted again.
  const int64_t cancelled = Submit({{"command", {"bash", "-c", "echo attempt; exit 5"}},
                                    {"restartPolicy", "on-failure"},
                                    {"maxRestarts", 10}});
  auto restarts = [&] {
    int n = 0;
    for (const Json& e : JobEvents(*server_, admin_, cancelled)) {
      n += e.value("reason", "") == "Restarted";
    }
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return restarts() >= 2; }, 30)) << Says();
  ASSERT_EQ(Run("cancel " + std::to_string(cancelled)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(cancelled) == "Cancelled"; }, 10)) << Says();
  ASSERT_TRUE(Eventually(
      [&] {
        const std::vector<Json> jobs = slurm_->JobsNamed(SlurmName(cancelled));
        return jobs.size() == 1 && jobs[0].value("job_state", "") != "RUNNING";
      },
      10))
      << Says();
  EXPECT_LE(Job(cancelled)["status"]["tasks"][0].value("restarts", 99), 3);
}

TEST_F(SlurmTest, ACancelledJobGetsItsNoticeAndStopsWithinItsGrace) {
  const int64_t id = Submit(
      {{"command",
        {"bash", "-c",
         "trap 'echo notice; sleep 1; exit 0' USR1; echo ready; while true; do sleep 0.2; done"}},
       {"gpus", 1},
       {"noticeSignal", "SIGUSR1"},
       {"gracePeriod", "20s"}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("ready") != std::string::npos; }, 20))
      << Says();
  const auto cancelled = std::chrono::steady_clock::now();
  ASSERT_EQ(Run("cancel " + std::to_string(id)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Cancelled"; }, 25)) << Says();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled).count();
  EXPECT_LT(took, 20) << "the grace period is 20 s";
  EXPECT_TRUE(Eventually([&] { return Logs(id).find("notice") != std::string::npos; })) << Logs(id);
}

// The notice before the runtime limit comes from Slurm (--signal, sent by its periodic check of
// limits: about 30 s here), to a task that is the job's one task and runs in its batch step: the
// batch shell hears it and passes it on to the task.
TEST_F(SlurmTest, ATaskHearsItsNoticeBeforeItsRuntimeLimit) {
  const int64_t id =
      Submit({{"command",
               {"bash", "-c",
                "trap 'echo notice; exit 0' USR1; echo ready; while true; do sleep 0.2; done"}},
              {"noticeSignal", "SIGUSR1"},
              {"runtimeLimit", "60s"},
              {"gracePeriod", "55s"}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("ready") != std::string::npos; }, 20))
      << Says();
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 50)) << Logs(id) << Says();
  // The exit code and the output's last lines come back separately: the job may have ended
  // before they are uploaded.
  EXPECT_TRUE(Eventually([&] { return Logs(id).find("notice") != std::string::npos; })) << Logs(id);
}

// A launcher that Slurm's SIGTERM ends first leaves its worker behind, in a session of its own
// and out of the task's process tree (passed to init), ignoring SIGTERM: it is found by its run
// all the same, when the task ends, and does not outlive the job.
TEST_F(SlurmTest, AWorkerWhoseLauncherEndedFirstDoesNotOutliveItsJob) {
  const std::string trace = dir_.File("trace");
  const int64_t id = Submit({{"command",
                              {"bash", "-c",
                               "setsid bash -c \"trap '' TERM; while true; do date +%s.%N >> " +
                                   trace + "; sleep 0.1; done\" & sleep 600"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running" && !ReadFile(trace).empty(); }, 30))
      << Says();
  const double cancelled = WallNow();
  ASSERT_EQ(Run("cancel " + std::to_string(id)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Cancelled"; }, 25)) << Says();
  std::this_thread::sleep_for(std::chrono::seconds(8));
  const double last = LastTime(trace);
  EXPECT_LT(last - cancelled, 6) << "the worker ran on after its job" << Says();
  Shell("pkill -KILL -f '" + trace + "'");  // should it have
}

TEST_F(SlurmTest, TheConnectorKilledWhileAJobRunsAdoptsItAndNothingRunsTwice) {
  const int64_t id = Submit({{"command", {"bash", "-c", "echo started; sleep 6; echo done"}}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("started") != std::string::npos; }, 20))
      << Says();
  connector_->Stop(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  StartConnector();
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 30)) << Says();
  EXPECT_EQ(Job(id)["status"].value("generation", 0), 1);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(id)).size(), 1u) << Says();
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("done") != std::string::npos; })) << Logs(id);
  const std::string logs = Logs(id);
  EXPECT_EQ(logs.find("started"), logs.rfind("started")) << logs;
}

// Each project's Slurm jobs run as a Unix user of its own (--run-as), charged to its own account.
// The attacks of one tenant on another: reading the other's files, its script (its environment)
// or the list of runs; and a job that puts a link to /etc/shadow where its output was, for the
// connector, as root, to upload as its log. A project with no user is refused, not run as root.
TEST_F(SlurmTest, EachProjectRunsAsItsOwnUserAndReachesNoOneElsesFiles) {
  for (const std::string user : {"meridian-slurm-a", "meridian-slurm-b"}) {
    Shell("id -u " + user + " || useradd --system --no-create-home --shell /usr/sbin/nologin " +
          user);
    ASSERT_EQ(Shell("id -un " + user), user + "\n");
  }
  // What would let a user reach root's work is refused at start, saying what and where.
  const std::string open_dir = dir_.File("open-to-all");
  std::filesystem::create_directories(open_dir);
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  const std::string start = "MERIDIAN_TOKEN=x timeout 20 " + kBinary +
                            " --server http://127.0.0.1:1 slurm-connector --cluster hpc ";
  const std::string sticky =
      Shell(start + "--work-dir " + open_dir + " --run-as meridian-slurm-a 2>&1; echo rc=$?");
  EXPECT_NE(sticky.find("is not a folder of root's that no one else may write"), std::string::npos)
      << sticky;
  EXPECT_EQ(sticky.find("rc=0"), std::string::npos) << sticky;
  const std::string as_root =
      Shell(start + "--work-dir " + dir_.File("w2") + " --run-as research=root 2>&1; echo rc=$?");
  EXPECT_NE(as_root.find("--run-as research=root: a project's jobs never run as root"),
            std::string::npos)
      << as_root;
  // The users and accounts from a config file, as a site would keep them.
  const std::string config = WriteTestFile(dir_.File("connector.yaml"), R"(slurm-connector:
  run-as: [research=meridian-slurm-a, other=meridian-slurm-b]
  account: [research=lab-a]
)");
  connector_->Stop(SIGTERM);
  StartConnector("0.5", {"--config", config});
  const std::string runs = dir_.File("connector") + "/runs/";
  // research's job writes a file of its own, then (once told) puts a link to /etc/shadow where
  // its output was.
  const int64_t a = Submit({{"command",
                             {"bash", "-c",
                              "id -un; echo secret-of-a > mine; echo written; "
                              "while [ ! -e go ]; do sleep 0.2; done; "
                              "rm task-0.out; ln -s /etc/shadow task-0.out; sleep 3"}}});
  ASSERT_TRUE(Eventually([&] { return Logs(a).find("written") != std::string::npos; }, 20))
      << Says();
  // A connector restarted meanwhile finds the job again by the ID its folder recorded (it reads
  // other users' jobs without their names) and adopts it.
  connector_->Stop(SIGKILL);
  StartConnector("0.5", {"--config", config});
  const std::string a_run = runs + std::to_string(a) + "-1";
  // other's job, while research's runs: its file, its script (its environment), the list of
  // runs; and what the connector's environment (its token) or user (root) left it.
  const int64_t b =
      Submit({{"command",
               {"bash", "-c",
                "id -un; echo home=$HOME; echo tokens=$(env | grep -c TOKEN); cat " + a_run +
                    "/job/mine; grep -c . " + a_run + "/task.sh; ls " + runs + "; echo done"}}},
             "b", "other");
  const int64_t refused = Submit({{"command", {"true"}}}, "refused", "unmapped");
  ASSERT_TRUE(Eventually([&] { return Phase(b) == "Succeeded"; }, 30)) << Says();
  EXPECT_EQ(Phase(a), "Running");
  const std::string b_logs = Logs(b);
  EXPECT_NE(b_logs.find("meridian-slurm-b\n"), std::string::npos) << b_logs;
  EXPECT_NE(b_logs.find("tokens=0\n"), std::string::npos) << b_logs;
  EXPECT_EQ(b_logs.find("home=/root"), std::string::npos) << b_logs;
  EXPECT_NE(b_logs.find("done"), std::string::npos) << b_logs;
  EXPECT_EQ(b_logs.find("secret-of-a"), std::string::npos) << b_logs;
  int refusals = 0;
  for (size_t at = b_logs.find("Permission denied"); at != std::string::npos;
       at = b_logs.find("Permission denied", at + 1)) {
    ++refusals;
  }
  EXPECT_EQ(refusals, 3) << "the file, the script and the list: " << b_logs;
  // Slurm's own view: the job is the project's user's, on the project's account.
  const std::string account =
      Shell("squeue -h -t all -n " + SlurmName(a) + " -O UserName:30,Account:30");
  EXPECT_NE(account.find("meridian-slurm-a"), std::string::npos) << account;
  EXPECT_NE(account.find("lab-a"), std::string::npos) << account;
  std::ofstream(a_run + "/job/go").flush();
  ASSERT_TRUE(Eventually([&] { return Phase(a) == "Succeeded"; }, 30)) << Says();
  EXPECT_EQ(Job(a)["status"].value("generation", 0), 1);
  const std::string a_logs = Logs(a);
  EXPECT_NE(a_logs.find("meridian-slurm-a\nwritten"), std::string::npos) << a_logs;
  EXPECT_EQ(a_logs.find("root:"), std::string::npos) << a_logs;
  EXPECT_EQ(a_logs.find(":::"), std::string::npos) << a_logs;  // every line of /etc/shadow ends so
  ASSERT_TRUE(Eventually([&] { return Phase(refused) == "Failed"; }, 20)) << Says();
  EXPECT_NE(Job(refused).dump().find("no user to run as"), std::string::npos)
      << Job(refused).dump();
  // Once its output is with the server, the run's folder is removed, the job's in it too.
  EXPECT_TRUE(Eventually([&] { return !std::filesystem::exists(a_run); }, 20))
      << Shell("ls -laR " + a_run);
}

// A job run as another user whose sbatch never answered (here: Slurm took it, and sbatch said
// "Socket timed out"): the connector cannot know it from its name in the usual squeue, as it
// reads other users' jobs without names, so it looks it up by name among that user's jobs, and
// adopts it: it runs once, in its first generation, not again after being given back.
TEST_F(SlurmTest, AnotherUsersJobWhoseSbatchNeverAnsweredIsFoundAndRunsOnce) {
  Shell(
      "id -u meridian-slurm-a || useradd --system --no-create-home --shell /usr/sbin/nologin "
      "meridian-slurm-a");
  connector_->Stop(SIGKILL);
  const std::string bin = dir_.File("lost-bin");
  std::filesystem::create_directories(bin);
  WriteTestFile(bin + "/sbatch", "#!/bin/sh\n" + Shell("command -v sbatch | tr -d '\\n'") +
                                     " \"$@\" > /dev/null\n"
                                     "echo 'sbatch: error: Socket timed out on send/recv "
                                     "operation' >&2\nexit 1\n");
  ASSERT_EQ(::chmod((bin + "/sbatch").c_str(), 0755), 0);
  connector_ = std::make_unique<AgentProcess>(
      kBinary,
      // Slurm's configuration from SLURM_CONF, as at many sites, not --slurm-conf: sbatch runs
      // with little of the connector's environment, and that must be in it.
      std::vector<std::string>{"--cluster", "hpc", "--partition", "gpu", "--node-prefix", "slurm-",
                               "--work-dir", dir_.File("connector"), "--interval", "0.5",
                               "--slurm-timeout", "3", "--pending-timeout", "3", "--run-as",
                               "meridian-slurm-a"},
      dir_.File("connector.log"),
      std::vector<std::pair<std::string, std::string>>{
          {"PATH", bin + ":" + std::string(getenv("PATH"))}, {"SLURM_CONF", slurm_->conf()}});
  connector_->As("slurm-connector").Start(server_->url(), agent_token_);
  const int64_t id = Submit({{"command", {"bash", "-c", "id -un; sleep 4"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 40)) << Says();
  EXPECT_EQ(Job(id)["status"].value("generation", 0), 1) << Says();
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(id)).size(), 1u) << Says();
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(id, 2)).empty()) << Says();
  EXPECT_TRUE(Eventually([&] { return Logs(id).find("meridian-slurm-a") != std::string::npos; }))
      << Logs(id);
}

// slurmctld slow to take jobs: every sbatch the connector runs waits 6 s first. Of 24 jobs placed
// at once, the 16 submitters take 16 and the rest wait their turn; all 24 are cancelled
// meanwhile. Those still waiting never reach Slurm, and those that did are stopped there. Under
// the default Policy: its lease (minutes) outlasts the wait, so only taking the waiting orders
// back keeps them out of Slurm, not the lease's deadline.
TEST_F(SlurmTest, JobsCancelledWhileWaitingToBeSubmittedNeverReachSlurm) {
  ASSERT_EQ(Run("apply -f " + WriteTestFile(dir_.File("policy.yaml"),
                                            "kind: Policy\nmetadata: {name: default}\nspec: {}\n"))
                .code,
            0);
  connector_->Stop(SIGKILL);
  const std::string bin = dir_.File("slow-bin");
  std::filesystem::create_directories(bin);
  WriteTestFile(bin + "/sbatch", "#!/bin/sh\nsleep 6\nexec " +
                                     Shell("command -v sbatch | tr -d '\\n'") + " \"$@\"\n");
  ASSERT_EQ(::chmod((bin + "/sbatch").c_str(), 0755), 0);
  connector_ = std::make_unique<AgentProcess>(
      kBinary,
      std::vector<std::string>{"--cluster", "hpc", "--slurm-conf", slurm_->conf(), "--partition",
                               "gpu", "--node-prefix", "slurm-", "--work-dir",
                               dir_.File("connector"), "--interval", "0.5", "--slurm-timeout",
                               "30"},
      dir_.File("connector.log"),
      std::vector<std::pair<std::string, std::string>>{
          {"PATH", bin + ":" + std::string(getenv("PATH"))}});
  connector_->As("slurm-connector").Start(server_->url(), agent_token_);
  std::vector<int64_t> jobs;
  for (int i = 0; i < 24; ++i) {
    jobs.push_back(Submit({{"command", {"sleep", "60"}}, {"cpuMilli", 1000}}, "j", "other"));
  }
  ASSERT_TRUE(Eventually([&] { return Count(jobs, "Placed") == 24; }, 20)) << Says();
  // Handed to the submitters at the connector's next round (every 0.5 s); none back yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // All 24 within the submitters' first sbatch (6 s): through the API, as one CLI process each
  // took long enough under ASan for the submitters to take up jobs not yet cancelled.
  for (int64_t id : jobs) {
    HttpResult r =
        Http(*server_, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", admin_, "{}");
    ASSERT_EQ(r.status, 200) << r.text;
  }
  ASSERT_TRUE(Eventually([&] { return Count(jobs, "Cancelled") == 24; }, 60)) << Says();
  // Meridian cancels a job never started at once; the submitters' sbatch still run. Once the
  // first are in Slurm, longer than one more sbatch for any that a free submitter took up.
  auto reached = [&] {
    size_t n = 0;
    for (int64_t id : jobs) n += slurm_->JobsNamed(SlurmName(id)).size();
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return reached() >= 1; }, 30)) << Says();
  std::this_thread::sleep_for(std::chrono::seconds(8));
  size_t in_slurm = 0;
  for (int64_t id : jobs) {
    for (const Json& j : slurm_->JobsNamed(SlurmName(id))) {
      ++in_slurm;
      EXPECT_TRUE(Eventually([&] {
        for (const Json& now : slurm_->JobsNamed(SlurmName(id))) {
          if (now.value("job_id", 0) == j.value("job_id", 0)) {
            return now.value("job_state", "") == "CANCELLED";
          }
        }
        return false;
      })) << SlurmName(id)
          << Says();
    }
  }
  EXPECT_LE(in_slurm, 16u) << "jobs cancelled before a submitter took them reached Slurm" << Says();
  EXPECT_GE(in_slurm, 1u) << "the test means the submitters to be busy when the cancel comes";
}

// slurmctld killed right after a job started. Slurm saves its state a few seconds after a
// change: when the start was not saved yet, slurmctld comes back with the job pending, kills what
// its node still runs and starts the job again (its log: "Registered PENDING JobId=1
// StepId=1.batch"). That is Slurm's own recovery, within the same Slurm job and Meridian
// generation; what Meridian promises is that no job is lost and that no two copies ever run at
// once, which each copy's trace (its PID, every 0.1 s) shows.
TEST_F(SlurmTest, SlurmctldKilledAndBackLosesNoJobAndRunsNoneTwice) {
  const std::string trace = dir_.File("trace");
  const int64_t id =
      Submit({{"command",
               {"bash", "-c",
                "echo started; for i in $(seq 80); do echo \"$$ $(date +%s.%N)\" >> " + trace +
                    "; sleep 0.1; done; echo done"}}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("started") != std::string::npos; }, 20))
      << Says();
  slurm_->KillController();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // within --slurm-timeout (3 s)
  ASSERT_EQ(slurm_->Restart(), "");
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 40)) << Says();
  EXPECT_EQ(Job(id)["status"].value("generation", 0), 1);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(id)).size(), 1u) << Says();
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(id, 2)).empty()) << Says();
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("done") != std::string::npos; })) << Logs(id);
  // Each copy's first and last line: the copies' spans do not overlap.
  std::map<std::string, std::pair<double, double>> spans;
  std::istringstream lines(ReadFile(trace));
  for (std::string pid, at; lines >> pid >> at;) {
    spans.try_emplace(pid, std::stod(at), 0).first->second.second = std::stod(at);
  }
  ASSERT_FALSE(spans.empty());
  std::vector<std::pair<double, double>> ordered;
  for (const auto& [pid, span] : spans) ordered.push_back(span);
  std::sort(ordered.begin(), ordered.end());
  for (size_t i = 1; i < ordered.size(); ++i) {
    EXPECT_LT(ordered[i - 1].second, ordered[i].first) << "two copies ran at once" << Says();
  }
}

TEST_F(SlurmTest, SlurmGonePastItsTimeoutMakesItsNodesLostRequeuesOnceAndStaleRunsAreCancelled) {
  const int64_t id =
      Submit({{"command", {"bash", "-c", "echo \"run $MERIDIAN_GENERATION\"; sleep 300"}},
              {"restartPolicy", "on-failure"},
              {"maxRestarts", 3}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("run 1") != std::string::npos; }, 20))
      << Says();
  const std::string node = Job(id)["status"]["allocation"][0].value("node", "");
  slurm_->KillController();
  // Past --slurm-timeout (3 s) the connector stops heartbeating; past nodeLostTimeout (6 s) the
  // server declares the nodes lost and requeues the job.
  ASSERT_TRUE(Eventually(
      [&] {
        const Json n = Node(node);
        return n.is_object() && n.value("state", "") == "Lost";
      },
      30))
      << Node(node).dump() << Says();
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Pending"; }, 10)) << Job(id).dump();
  ASSERT_EQ(slurm_->Restart(), "");
  // Slurm's job of the first run ran on meanwhile (slurmd keeps it): it is cancelled on return,
  // and the job runs again as its second run, once.
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running"; }, 40)) << Says();
  const Json status = Job(id)["status"];
  std::string events;
  for (const Json& e : JobEvents(*server_, admin_, id)) events += e.value("message", "") + "\n";
  EXPECT_EQ(status.value("restarts", 0), 1) << "requeued once\n" << events;
  const int64_t again = status.value("generation", 0);
  ASSERT_TRUE(Eventually(
      [&] { return Logs(id).find("run " + std::to_string(again)) != std::string::npos; }, 20))
      << Says();
  ASSERT_TRUE(Eventually(
      [&] {
        const std::vector<Json> first = slurm_->JobsNamed(SlurmName(id, 1));
        return first.size() == 1 && first[0].value("job_state", "") == "CANCELLED";
      },
      20))
      << Says();
  // The cancel is an event of the node it ran on, naming the Slurm job and Meridian's run.
  const std::vector<Json> fenced = slurm_->JobsNamed(SlurmName(id, 1));
  ASSERT_EQ(fenced.size(), 1u) << Says();
  const std::string fenced_id = std::to_string(fenced[0].value("job_id", int64_t{0}));
  ASSERT_TRUE(Eventually(
      [&] {
        for (const Json& e : Http(*server_, "GET", "/api/v1/events?limit=1000", admin_)
                                 .body.value("items", Json::array())) {
          if (e.value("reason", "") == "BackendJobFenced" && e.value("objectKind", "") == "Node" &&
              e.value("object", "") == node &&
              e.value("message", "").find("Slurm job " + fenced_id + " (" + SlurmName(id, 1)) !=
                  std::string::npos) {
            return true;
          }
        }
        return false;
      },
      10))
      << Http(*server_, "GET", "/api/v1/events?limit=1000", admin_).text;
  // Slurm ran the job twice in all: the first run (cancelled on Slurm's return) and the second.
  int runs = 0;
  for (int64_t g = 1; g <= again + 1; ++g) runs += slurm_->JobsNamed(SlurmName(id, g)).size();
  EXPECT_EQ(runs, 2) << Says();
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(id, again)).size(), 1u) << Says();
}

// The server silent past the agents' lease (its process stopped: heartbeats get no answer): the
// connector kills its Slurm jobs at once, as an agent's shims kill their tasks, and does not wait
// for the heartbeats' answers nor for Slurm's KillWait (60 s here), after which a task that
// ignores SIGTERM would still run while the server has requeued its job elsewhere.
TEST_F(SlurmTest, TheServerSilentPastTheLeaseHasItsSlurmJobsKilledAtOnce) {
  std::string conf = ReadFile(slurm_->conf());
  ASSERT_NE(conf.find("KillWait=2"), std::string::npos);
  conf.replace(conf.find("KillWait=2"), 10, "KillWait=60");
  WriteTestFile(slurm_->conf(), conf);
  Shell("scontrol reconfigure");
  ASSERT_TRUE(Eventually([&] {
    return Shell("scontrol show config").find("KillWait                = 60 sec") !=
           std::string::npos;
  })) << Shell("scontrol show config | grep -i killwait");
  // Each line its run's generation and the time: a later run (the job requeued once the server
  // is back) writes there too. The writer is in a session of its own, as torchrun starts its
  // workers: the kill must reach every process of the task, not only its process group.
  const std::string trace = dir_.File("trace");
  const int64_t id = Submit({{"command",
                              {"bash", "-c",
                               "trap '' TERM; setsid bash -c \"trap '' TERM; while true; do echo "
                               "\\\"$MERIDIAN_GENERATION \\$(date +%s.%N)\\\" >> " +
                                   trace + "; sleep 0.1; done\" & wait"}}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running" && !ReadFile(trace).empty(); }, 30))
      << Says();
  const double silent = WallNow();
  server_->Signal(SIGSTOP);
  // The lease is 4.2 s (the Policy's nodeLostTimeout, 6 s, times 0.7).
  const bool ended = Eventually(
      [&] {
        const std::vector<Json> jobs = slurm_->JobsNamed(SlurmName(id));
        return jobs.size() == 1 && jobs[0].value("job_state", "") != "RUNNING";
      },
      30);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  server_->Signal(SIGCONT);
  ASSERT_TRUE(ended) << Says();
  // The first run's last line: written within the lease and a round of the server going silent,
  // not at Slurm's KillWait.
  const double last = LastTime(trace, "1 ");
  EXPECT_GT(last, silent);
  EXPECT_LT(last - silent, 10) << "the first run ran on after the lease" << Says();
  EXPECT_NE(ReadFile(dir_.File("connector.log")).find("lease ran out: killed Slurm job"),
            std::string::npos)
      << Says();
  // Slurm as the other tests have it: what is left is cancelled quickly at the end.
  WriteTestFile(slurm_->conf(),
                ReadFile(slurm_->conf()).replace(conf.find("KillWait=60"), 11, "KillWait=2"));
  Shell("scontrol reconfigure");
}

// A node taken out of the connector's partitions while a job runs there is heartbeated no more:
// the server gives it up after its lost timeout and runs the job elsewhere, so the connector
// kills the Slurm job there once that node's lease has run out, as the node's agent would, and
// the job runs once at a time (each node has a lease of its own, not one for the connector).
TEST_F(SlurmTest, ANodeLeavingThePartitionHasItsRunKilledWhenItsLeaseRunsOut) {
  const std::string trace = dir_.File("trace");
  const int64_t id =
      Submit({{"command",
               {"bash", "-c",
                "trap '' TERM; while true; do echo \"$MERIDIAN_GENERATION $(date +%s.%N)\" >> " +
                    trace + "; sleep 0.1; done"}},
              {"restartPolicy", "on-failure"}});
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Running" && !ReadFile(trace).empty(); }, 30))
      << Says();
  const std::string node = Job(id)["status"]["allocation"][0].value("node", "");
  ASSERT_EQ(node.rfind("slurm-n", 0), 0u) << node;
  const std::string slurm_node = node.substr(6);  // "n3"
  std::string others;
  for (int i = 1; i <= 4; ++i) {
    if ("n" + std::to_string(i) == slurm_node) continue;
    others += (others.empty() ? "n" : ",n") + std::to_string(i);
  }
  const double left = WallNow();
  Shell("scontrol update PartitionName=gpu Nodes=" + others);
  // The server requeues it (the node lost after 6 s) and it runs again elsewhere.
  ASSERT_TRUE(Eventually(
      [&] {
        const Json j = Job(id);
        return Phase(id) == "Running" && j["status"].value("generation", 0) == 2;
      },
      40))
      << Job(id).dump() << Says();
  EXPECT_NE(Job(id)["status"]["allocation"][0].value("node", ""), node);
  ASSERT_TRUE(Eventually(
      [&] {
        const std::vector<Json> first = slurm_->JobsNamed(SlurmName(id, 1));
        return first.size() == 1 && first[0].value("job_state", "") != "RUNNING";
      },
      20))
      << Says();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // The first run ended within its node's lease (4.2 s) and a round or two of the node leaving,
  // before the second began: never both at once.
  double last_first = 0, first_second = 1e18;
  std::istringstream lines(ReadFile(trace));
  for (std::string line; std::getline(lines, line);) {
    const double at = std::stod(line.substr(line.find(' ') + 1));
    if (line.rfind("1 ", 0) == 0) last_first = std::max(last_first, at);
    if (line.rfind("2 ", 0) == 0) first_second = std::min(first_second, at);
  }
  EXPECT_LT(last_first - left, 10) << "the first run ran on after its node's lease" << Says();
  EXPECT_LT(last_first, first_second) << "both runs at once " << std::fixed << last_first << " "
                                      << first_second << " left " << left << Says();
  Shell("scontrol update PartitionName=gpu Nodes=n[1-4]");
}

TEST_F(SlurmTest, AForeignSlurmJobsGpusAreNotDoubleBooked) {
  // Alice submits to Slurm directly: all four GPUs of n1.
  const std::string foreign = Shell(
      "sbatch --parsable -o /dev/null -J alice-training -w n1 --gres=gpu:4 --mem=1000 --wrap "
      "'sleep 120'");
  ASSERT_TRUE(Eventually(
      [&] {
        int unmanaged = 0;
        for (const Json& g : Node("slurm-n1").value("gpus", Json::array())) {
          unmanaged += g.contains("unmanaged");
        }
        return unmanaged == 4;
      },
      20))
      << foreign << Node("slurm-n1").dump() << Says();
  // Occupied, not broken: healthy in the API and in /metrics, no GPU-unhealthy alert, and said
  // in `get nodes` and `top`.
  for (const Json& g : Node("slurm-n1").value("gpus", Json::array())) {
    EXPECT_TRUE(g.value("healthy", false)) << g.dump();
    EXPECT_EQ(g.value("freeMilli", -1), 0) << g.dump();
  }
  const std::string metrics = Http(*server_, "GET", "/metrics", admin_).text;
  int unmanaged_series = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("meridian_gpu_unmanaged{", 0) == 0 && line.ends_with(" 1")) {
      EXPECT_NE(line.find("node=\"slurm-n1\""), std::string::npos) << line;
      ++unmanaged_series;
    }
  }
  EXPECT_EQ(unmanaged_series, 4) << metrics;
  const std::string nodes = Run("get nodes").output;
  EXPECT_NE(nodes.find("Ready,4 GPUs unmanaged"), std::string::npos) << nodes;
  const std::string top = Run("top").output;
  EXPECT_NE(top.find(" GPUs allocated, 4 held by work outside Meridian"), std::string::npos) << top;
  // Four jobs of four GPUs (a project without a quota): three nodes are left for them.
  const int64_t waiting = ThreeOfFourRunAwayFrom("slurm-n1");
  ASSERT_NE(waiting, 0) << Says();
  // Alert rules have been evaluated since (every 2 s): none took the held GPUs for broken ones.
  for (const Json& a : Http(*server_, "GET", "/api/v1/alerts", admin_).body["items"]) {
    EXPECT_NE(a["labels"].value("alertname", ""), "MeridianGpuUnhealthy") << a.dump();
  }
  // Alice's job ends: its GPUs are Meridian's to place again.
  CancelAndSeeItRunThere(foreign, waiting, "slurm-n1");
}

// Slurm jobs named as another Meridian's (another instance's, or one from before instances) are
// that installation's: counted as work outside this Meridian, never fenced by this connector. And
// a second connector on this one's work directory is refused at once.
TEST_F(SlurmTest, AnotherMeridiansSlurmJobsAreForeignAndNeverFenced) {
  // One of this Meridian's jobs runs on n4 (meridian-hpc-ID-1); another Meridian's, of an older
  // version, has the same job id and generation (meridian-ID-1) on n2; others are under instances
  // "lab" and "hpc-2" (which begins like this one's) on n1 and n3.
  for (const char* n : {"slurm-n1", "slurm-n2", "slurm-n3"}) {
    ASSERT_EQ(Run(std::string("cordon ") + n).code, 0);
  }
  const int64_t ours = Submit({{"command", {"sleep", "120"}}, {"gpus", 4}});
  ASSERT_TRUE(Eventually([&] { return Phase(ours) == "Running"; }, 30)) << Job(ours).dump();
  ASSERT_EQ(Job(ours)["status"]["allocation"][0].value("node", ""), "slurm-n4");
  for (const char* n : {"slurm-n1", "slurm-n2", "slurm-n3"}) {
    ASSERT_EQ(Run(std::string("uncordon ") + n).code, 0);
  }
  std::vector<std::string> theirs;
  for (const auto& [name, node] : std::vector<std::pair<std::string, std::string>>{
           {"meridian-lab-7-1", "n1"},
           {"meridian-" + std::to_string(ours) + "-1", "n2"},
           {"meridian-hpc-2-" + std::to_string(ours) + "-1", "n3"}}) {
    const std::string id = Shell("sbatch --parsable -o /dev/null -J " + name + " -w " + node +
                                 " --gres=gpu:4 --mem=1000 --wrap 'sleep 120'");
    theirs.push_back(id.substr(0, id.find('\n')));
  }
  auto unmanaged = [&](const std::string& node) {
    int n = 0;
    for (const Json& g : Node(node).value("gpus", Json::array())) n += g.contains("unmanaged");
    return n;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return unmanaged("slurm-n1") == 4 && unmanaged("slurm-n2") == 4 &&
               unmanaged("slurm-n3") == 4;
      },
      20))
      << Says();
  // Several rounds later (every 0.5 s), all still run, and ours is one job in Slurm.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const std::string squeue = Shell("squeue -h -o '%j %T'");
  for (const std::string& name :
       {std::string("meridian-lab-7-1"), "meridian-" + std::to_string(ours) + "-1",
        "meridian-hpc-2-" + std::to_string(ours) + "-1", SlurmName(ours)}) {
    EXPECT_NE(squeue.find(name + " RUNNING"), std::string::npos) << name << Says();
  }
  EXPECT_EQ(ReadFile(dir_.File("connector.log")).find("fenced"), std::string::npos) << Says();
  EXPECT_EQ(Phase(ours), "Running");
  // A second connector on the same work directory.
  const std::string second = Shell(
      "MERIDIAN_CONFIG=/nonexistent MERIDIAN_SERVER='" + server_->url() + "' MERIDIAN_TOKEN='" +
      agent_token_ + "' timeout 20 " + kBinary + " slurm-connector --cluster hpc --slurm-conf " +
      slurm_->conf() + " --work-dir " + dir_.File("connector") + " 2>&1; echo rc=$?");
  EXPECT_NE(second.find("--work-dir " + dir_.File("connector") +
                        " is in use by another Slurm connector (pid "),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("rc=1"), std::string::npos) << second;
  Shell("scancel " + theirs[0] + " " + theirs[1] + " " + theirs[2]);
}

TEST_F(SlurmTest, AForeignSlurmJobsCpusAreNotDoubleBooked) {
  // Bob submits to Slurm directly: all sixteen CPUs of n2, none of its GPUs.
  const std::string foreign = Shell(
      "sbatch --parsable -o /dev/null -J bob-preprocessing -w n2 --cpus-per-task=16 --mem=1000 "
      "--wrap 'sleep 120'");
  ASSERT_TRUE(Eventually(
      [&] { return Node("slurm-n2").value("unmanagedCpuMilli", int64_t{0}) == 16000; }, 20))
      << foreign << Node("slurm-n2").dump() << Says();
  // The node keeps its size; what Bob holds is not free, and its GPUs are not his.
  const Json n2 = Node("slurm-n2");
  EXPECT_EQ(n2.value("cpuMilli", int64_t{0}), 16000) << n2.dump();
  EXPECT_EQ(n2.value("cpuFreeMilli", int64_t{-1}), 0) << n2.dump();
  for (const Json& g : n2.value("gpus", Json::array())) {
    EXPECT_FALSE(g.contains("unmanaged")) << g.dump();
  }
  // Four jobs of four GPUs and one CPU each: n2's GPUs are free, but none of its CPUs.
  const int64_t waiting = ThreeOfFourRunAwayFrom("slurm-n2");
  ASSERT_NE(waiting, 0) << Says();
  // Bob's job ends: n2's CPUs are Meridian's to place again.
  CancelAndSeeItRunThere(foreign, waiting, "slurm-n2");
  EXPECT_FALSE(Node("slurm-n2").contains("unmanagedCpuMilli")) << Node("slurm-n2").dump();
}

TEST_F(SlurmTest, ARunSlurmKeepsWaitingIsGivenBackToMeridiansQueueWithSlurmsReason) {
  // The partition is down: Slurm takes the job and keeps it pending.
  Shell("scontrol update partitionname=gpu state=down");
  const int64_t id = Submit({{"command", {"bash", "-c", "echo \"run $MERIDIAN_GENERATION\""}}});
  ASSERT_TRUE(Eventually(
      [&] {
        for (const Json& e : JobEvents(*server_, admin_, id)) {
          if (e.value("reason", "") == "Requeued" &&
              e.value("message", "").find("PartitionDown") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      20))
      << Says();
  EXPECT_TRUE(Eventually([&] {
    const std::vector<Json> first = slurm_->JobsNamed(SlurmName(id, 1));
    return first.size() == 1 && first[0].value("job_state", "") == "CANCELLED";
  })) << Says();
  Shell("scontrol update partitionname=gpu state=up");
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 30)) << Says();
  const Json status = Job(id)["status"];
  EXPECT_EQ(status.value("restarts", 0), 0) << "a run that never started counts no restart";
  const int64_t last = status.value("generation", 0);
  EXPECT_GE(last, 2);
  EXPECT_TRUE(Eventually([&] {
    return Logs(id).find("run " + std::to_string(last)) != std::string::npos;
  })) << Logs(id);
  // Only the last run ran: every earlier one was cancelled in Slurm before it started.
  for (int64_t g = 1; g < last; ++g) {
    for (const Json& j : slurm_->JobsNamed(SlurmName(id, g))) {
      EXPECT_EQ(j.value("job_state", ""), "CANCELLED") << g << Says();
    }
  }
}

TEST_F(SlurmTest, AProjectsQuotaHoldsAcrossTheAgentsClusterAndTheSlurmCluster) {
  AgentProcess agent(kBinary,
                     {"--cluster", "onprem", "--pool", "h100", "--node", "a1", "--simulate-gpus",
                      "4xH100-80GB", "--work-dir", dir_.File("agent-a1"), "--cpu-milli", "16000",
                      "--memory-mib", "65536", "--address", "127.0.0.1", "--task-uids", "off"},
                     dir_.File("agent-a1.log"));
  agent.Start(server_->url(), agent_token_);
  ASSERT_TRUE(Eventually([&] {
    const Json n = Node("a1");
    return n.is_object() && n.value("state", "") == "Ready";
  })) << ReadFile(dir_.File("agent-a1.log"));
  // The limit is 8 GPUs: one job of 4 on each cluster runs, the third waits, wherever it goes.
  const int64_t on_agents =
      Submit({{"command", {"sleep", "30"}}, {"gpus", 4}, {"clusters", {"onprem"}}}, "agents");
  const int64_t on_slurm =
      Submit({{"command", {"sleep", "30"}}, {"gpus", 4}, {"clusters", {"hpc"}}}, "slurm");
  ASSERT_TRUE(
      Eventually([&] { return Phase(on_agents) == "Running" && Phase(on_slurm) == "Running"; }, 20))
      << Says();
  const int64_t third = Submit({{"command", {"sleep", "30"}}, {"gpus", 4}}, "third");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Phase(third), "Pending") << Job(third).dump();
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(third)).empty()) << Says();
  // Freed on Slurm, the quota lets the third run.
  ASSERT_EQ(Run("cancel " + std::to_string(on_slurm)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(third) == "Running"; }, 30)) << Says();
}

TEST_F(SlurmTest, APreemptedSlurmJobGetsItsNoticeStopsWithinItsGraceAndRunsAgainLater) {
  // Two Slurm nodes are left: the low job, a gang of two, holds every GPU of both.
  Shell("scontrol update nodename=n3,n4 state=drain reason=test");
  ASSERT_TRUE(Eventually([&] { return !Node("slurm-n4").value("schedulable", true); })) << Says();
  const int64_t low = Submit({{"command",
                               {"bash", "-c",
                                "trap 'echo notice; exit 0' USR1; echo \"run "
                                "$MERIDIAN_GENERATION\"; while true; do sleep 0.2; "
                                "done"}},
                              {"gpus", 4},
                              {"tasks", 2},
                              {"clusters", {"hpc"}},
                              {"priorityClass", "low"},
                              {"noticeSignal", "SIGUSR1"},
                              {"gracePeriod", "20s"}},
                             "low");
  ASSERT_TRUE(Eventually([&] { return Logs(low).find("run 1") != std::string::npos; }, 20))
      << Says();
  const auto asked = std::chrono::steady_clock::now();
  const int64_t high = Submit({{"command", {"bash", "-c", "echo high; sleep 2"}},
                               {"gpus", 4},
                               {"clusters", {"hpc"}},
                               {"priorityClass", "high"}},
                              "high", "other");
  ASSERT_TRUE(
      Eventually([&] { return Phase(high) == "Running" || Phase(high) == "Succeeded"; }, 30))
      << Says();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count(), 20);
  EXPECT_TRUE(Eventually([&] { return Logs(low).find("notice") != std::string::npos; }))
      << Logs(low);
  ASSERT_TRUE(Eventually([&] { return Phase(high) == "Succeeded"; }, 30)) << Says();
  // Requeued to Meridian's queue, not Slurm's: a second run, a second Slurm job.
  ASSERT_TRUE(Eventually([&] { return Logs(low).find("run 2") != std::string::npos; }, 30))
      << Says();
  EXPECT_EQ(Job(low)["status"].value("generation", 0), 2);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(low, 1)).size(), 1u);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(low, 2)).size(), 1u);
}

// `meridian server --dev` with its local Slurm cluster: a newcomer's estate has the agents'
// clusters and a real Slurm cluster side by side under one quota, `get nodes` and `top` show
// them, the example Slurm gang runs there as one Slurm job of two nodes, and SIGTERM stops it
// all, Slurm's jobs and daemons included, in seconds.
TEST(DevEstateWithSlurm, RunsASlurmClusterBesideTheAgentsAndStopsItAll) {
  base::testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // the agents' tasks run under uids of their own
  ServerProcess server(kBinary, dir.File("dev"), {"--dev", "--dev-slurm", "on"});
  std::unique_ptr<slurm::LocalCluster> slurm;  // the estate's, to look at (not started here)
  struct StopGently {  // the estate's agents and Slurm stop on SIGTERM, not on a SIGKILL
    ServerProcess& s;
    const std::unique_ptr<slurm::LocalCluster>& c;
    ~StopGently() {
      s.Stop(SIGTERM);
      if (c) c->KillLeftovers();  // should the test have failed before the estate stopped
    }
  } stop{server, slurm};
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("dev.log"));
  // The estate's Slurm cluster is in a new private folder beside its data dir.
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind("dev-slurm-", 0) == 0) {
      slurm = std::make_unique<slurm::LocalCluster>(e.path().string(), 2, 4);
    }
  }
  ASSERT_TRUE(slurm) << ReadFile(dir.File("dev.log"));
  const std::string admin = server.admin_token();
  std::map<std::string, int> registered;  // nodes by cluster ("hpc": of 4 H100-80GB)
  ASSERT_TRUE(Eventually(
      [&] {
        registered.clear();
        for (const Json& n :
             Http(server, "GET", "/api/v1/nodes", admin).body.value("items", Json::array())) {
          if (n.value("source", "") != "registered") continue;
          const std::string cluster = n.value("cluster", "");
          const bool h100s = n.value("model", "") == "H100-80GB" && n["gpus"].size() == 4u;
          registered[cluster + (cluster != "hpc" || h100s ? "" : " (not 4 H100-80GB)")] += 1;
        }
        return registered["hpc"] == 2 && registered["onprem"] == 4 && registered["cloud"] == 2;
      },
      90))
      << ReadFile(dir.File("dev.log")) << ReadFile(dir.File("dev/agents/slurm-connector.log"));
  const std::string nodes = Cli(kBinary, "get nodes", server.url(), admin).output;
  EXPECT_NE(nodes.find("hpc-n2"), std::string::npos) << nodes;
  EXPECT_NE(nodes.find("onprem-h100-3"), std::string::npos) << nodes;
  const std::string top = Cli(kBinary, "top", server.url(), admin).output;
  EXPECT_NE(top.find("hpc"), std::string::npos) << top;
  EXPECT_NE(top.find(" of 56 GPUs allocated"), std::string::npos) << top;  // 32 + 16 + 8

  // The example gang, as the dev estate's banner offers it.
  CliResult submitted = Cli(
      kBinary, "submit -f " + std::string(MERIDIAN_SOURCE_DIR) + "/examples/jobs/slurm-gang.yaml",
      server.url(), admin);
  ASSERT_EQ(submitted.code, 0) << submitted.output;
  const size_t digits = submitted.output.find_first_of("0123456789");
  ASSERT_NE(digits, std::string::npos) << submitted.output;
  const int64_t id = std::stoll(submitted.output.substr(digits));
  // Each task's output comes back on its own (the connector reads each task's file): the
  // second may come a read after the first.
  for (int task : {0, 1}) {
    const std::string logs = "logs " + std::to_string(id) + " --task " + std::to_string(task);
    const std::string line = "rank " + std::to_string(task) + " of 2 on hpc-n";
    ASSERT_TRUE(Eventually(
        [&] {
          return Cli(kBinary, logs, server.url(), admin).output.find(line) != std::string::npos;
        },
        60))
        << "task " << task << ": " << GetJob(server, admin, id).dump()
        << ReadFile(dir.File("dev/agents/slurm-connector.log"));
  }
  const std::string squeue = slurm->Command({"squeue", "-h", "-o", "%j %D %T"});
  EXPECT_NE(squeue.find("meridian-hpc-" + std::to_string(id) + "-1 2 RUNNING"), std::string::npos)
      << squeue;

  // SIGTERM while the gang runs on Slurm: everything stops, Slurm's side too.
  const auto t0 = std::chrono::steady_clock::now();
  server.Stop(SIGTERM);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[figure] dev estate with 6 agents and 2 Slurm nodes stopped %.2f s after SIGTERM\n",
              seconds);
  EXPECT_LT(seconds, 40) << ReadFile(dir.File("dev.log"));
  const std::string mine = "SLURM_CONF=" + slurm->conf() + std::string(1, '\0');
  std::vector<std::string> running;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ifstream in_cmdline(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in_cmdline)),
                        std::istreambuf_iterator<char>());
    // Slurm's daemons and jobs carry its SLURM_CONF; the agents and the connector, the test's
    // folder in their arguments.
    if (env.find(mine) == std::string::npos && cmdline.find(dir.path()) == std::string::npos) {
      continue;
    }
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    running.push_back(entry.path().filename().string() + ": " + cmdline);
  }
  EXPECT_TRUE(running.empty()) << "still running after the estate stopped: "
                               << ::testing::PrintToString(running);
}

}  // namespace
}  // namespace meridian::testing
