// End-to-end tests of the Slurm connector: a real Slurm 22.05 cluster (munged, slurmctld, and one
// slurmd per logical node, four nodes on this host, each with four fake GPU device files), a real
// `meridian server`, a real `meridian slurm-connector`, and real Slurm jobs.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

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

// A daemon started in the foreground, its output in `log`; stopped by its PID.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { Stop(SIGKILL); }
  void Start(std::vector<std::string> args, const std::string& log) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      std::freopen(log.c_str(), "a", stdout);
      std::freopen(log.c_str(), "a", stderr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
  }
  bool Running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  // SIGTERM, then SIGKILL after 10 s (a slurmd whose controller is gone may ignore SIGTERM).
  void Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    if (!Eventually([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 10)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// A real Slurm cluster on loopback, configured and started under `dir` as
// ../shared/components/ shows: fake GPUs as character devices 1:3 (what /dev/null is), one slurmd
// per logical node (`slurmd -N`), no accounting database. Slurm's commands in this process and
// its children find it through SLURM_CONF.
class SlurmCluster {
 public:
  SlurmCluster(std::string dir, int nodes, int gpus)
      : dir_(std::move(dir)), nodes_(nodes), gpus_(gpus), slurmd_(static_cast<size_t>(nodes)) {}
  ~SlurmCluster() {
    // Jobs first, while the daemons run: a slurmd stopped before its jobs leaves their
    // slurmstepd and tasks behind, running on through the rest of the suite.
    if (controller_.Running()) {
      Shell("scancel --user=root");
      Eventually([&] { return Shell("squeue -h").empty(); }, 15);
    }
    for (Daemon& d : slurmd_) d.Stop();
    controller_.Stop();
    munge_.Stop();
    KillLeftovers();
  }

  // Whatever still runs with this cluster's SLURM_CONF in its environment (slurmstepd and the
  // tasks under it inherit it): after a slurmctld killed and restarted from a state saved
  // before a job started, Slurm can show the job cancelled while its step runs on.
  void KillLeftovers() const {
    const std::string mine = "SLURM_CONF=" + conf();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string pid = entry.path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (std::stoi(pid) == getpid()) continue;
      std::ifstream in(entry.path() / "environ", std::ios::binary);
      std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (env.find(mine + '\0') != std::string::npos) kill(std::stoi(pid), SIGKILL);
    }
  }

  std::string conf() const { return dir_ + "/etc/slurm.conf"; }

  // Empty when the cluster is up with every node idle; otherwise what went wrong.
  std::string Start() {
    for (const char* d : {"etc", "state", "log", "run", "dev", "munge/key", "munge/run", "spool"}) {
      std::filesystem::create_directories(dir_ + "/" + d);
    }
    // munged wants its key's folder private and every folder above its socket searchable.
    ::chmod((dir_ + "/munge/key").c_str(), 0700);
    for (std::string d = dir_ + "/munge/run"; d.size() > 1; d = d.substr(0, d.rfind('/'))) {
      struct stat st {};
      if (::stat(d.c_str(), &st) == 0) ::chmod(d.c_str(), (st.st_mode & 07777) | 0111);
    }
    for (int i = 0; i < gpus_; ++i) {
      const std::string dev = dir_ + "/dev/nvidia" + std::to_string(i);
      if (mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) return "mknod " + dev;
    }
    const std::string key = dir_ + "/munge/key/munge.key";
    Shell("mungekey --create --keyfile=" + key);
    munge_socket_ = dir_ + "/munge/run/munge.socket";
    munge_.Start(
        {"munged", "-F", "--socket=" + munge_socket_, "--key-file=" + key,
         "--log-file=" + dir_ + "/munge/munged.log", "--pid-file=" + dir_ + "/munge/munged.pid",
         "--seed-file=" + dir_ + "/munge/munged.seed"},
        dir_ + "/log/munged.out");
    if (!Eventually([&] { return std::filesystem::exists(munge_socket_); }, 10)) {
      return "munged did not start: " + ReadFile(dir_ + "/log/munged.out");
    }
    WriteConf();
    setenv("SLURM_CONF", conf().c_str(), 1);
    if (std::string e = StartController(true); !e.empty()) return e;
    for (int i = 0; i < nodes_; ++i) {
      const std::string name = "n" + std::to_string(i + 1);
      std::filesystem::create_directories(dir_ + "/spool/" + name);
      slurmd_[static_cast<size_t>(i)].Start({"slurmd", "-D", "-N", name},
                                            dir_ + "/log/slurmd-" + name + ".out");
    }
    if (!Eventually([&] { return IdleNodes() >= nodes_; }, 30)) {
      return "nodes not idle: " + Shell("sinfo -N") + ReadFile(dir_ + "/log/slurmctld.log");
    }
    return "";
  }

  // Starts slurmctld and waits until it answers; `clear` starts from no saved state.
  std::string StartController(bool clear) {
    std::vector<std::string> args = {"slurmctld", "-D", "-i"};
    if (clear) args.push_back("-c");
    controller_.Start(args, dir_ + "/log/slurmctld.out");
    if (!Eventually([&] { return Shell("scontrol ping").find("UP") != std::string::npos; }, 20)) {
      return "slurmctld did not answer: " + ReadFile(dir_ + "/log/slurmctld.out");
    }
    return "";
  }
  void KillController() { controller_.Stop(SIGKILL); }

  int IdleNodes() {
    std::istringstream in(Shell("sinfo -h -N -t idle -o %N"));
    int n = 0;
    for (std::string line; std::getline(in, line);) n += !line.empty();
    return n;
  }

  // Slurm's jobs named `name`, as squeue shows them.
  std::vector<Json> JobsNamed(const std::string& name) {
    const Json q = Json::parse(Shell("squeue --json"), nullptr, false);
    std::vector<Json> out;
    if (!q.is_object()) return out;
    for (const Json& j : q.value("jobs", Json::array())) {
      if (j.value("name", "") == name) out.push_back(j);
    }
    return out;
  }

 private:
  void WriteConf() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string h = std::string(host).substr(0, std::string(host).find('.'));
    std::ostringstream c;
    c << "ClusterName=meridiantest\nSlurmctldHost=" << h << "(127.0.0.1)\n"
      << "SlurmctldPort=" << FreePort() << "\nSlurmUser=root\nSlurmdUser=root\n"
      << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << munge_socket_ << "\n"
      << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool/%n\n"
      << "SlurmctldPidFile=" << dir_ << "/run/slurmctld.pid\n"
      << "SlurmdPidFile=" << dir_ << "/run/slurmd-%n.pid\n"
      << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\n"
      << "SlurmdLogFile=" << dir_ << "/log/slurmd-%n.log\n"
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      << "JobCompType=jobcomp/none\nSchedulerType=sched/backfill\n"
      << "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000\n"
      << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
      << "SlurmdParameters=config_overrides\nGresTypes=gpu\nReturnToService=2\nMpiDefault=none\n"
      << "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny\nMinJobAge=300\n"
      << "SlurmdTimeout=60\nInactiveLimit=0\nKillWait=2\n";
    for (int i = 0; i < nodes_; ++i) {
      c << "NodeName=n" << i + 1 << " NodeHostname=" << h
        << " NodeAddr=127.0.0.1 Port=" << FreePort()
        << " CPUs=16 RealMemory=64000 Gres=gpu:h100:" << gpus_ << " State=UNKNOWN\n";
    }
    c << "PartitionName=gpu Nodes=n[1-" << nodes_
      << "] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n";
    std::ofstream(conf()) << c.str();
    std::ofstream(dir_ + "/etc/gres.conf")
        << "AutoDetect=off\nNodeName=n[1-" << nodes_ << "] Name=gpu Type=h100 File=" << dir_
        << "/dev/nvidia[0-" << gpus_ - 1 << "]\n";
  }

  std::string dir_;
  int nodes_, gpus_;
  std::string munge_socket_;
  Daemon munge_, controller_;
  std::vector<Daemon> slurmd_;
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
    slurm_ = std::make_unique<SlurmCluster>(dir_.File("slurm"), 4, 4);
    const std::string error = slurm_->Start();
    ASSERT_EQ(error, "") << "a real Slurm cluster is needed (scripts/install-deps.sh installs "
                            "slurm-wlm and munge; the test runs as root)";
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate));
    ASSERT_EQ(r.code, 0) << r.output;
    Json user = {{"spec", {{"roles", Json::array({{{"role", "agent"}}})}}}};
    ASSERT_EQ(Http(*server_, "PUT", "/api/v1/users/agents", admin_, user.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_,
                        Json{{"user", "agents"}, {"description", "test agents"}}.dump());
    ASSERT_EQ(t.status, 201) << t.text;
    agent_token_ = t.body.value("token", "");
    StartConnector();
    for (int i = 1; i <= 4; ++i) {
      ASSERT_TRUE(Eventually([&] { return Node("slurm-n" + std::to_string(i)).is_object(); }))
          << ReadFile(dir_.File("connector.log"));
    }
  }

  void StartConnector() {
    connector_ = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "hpc", "--slurm-conf", slurm_->conf(), "--partition",
                                 "gpu", "--node-prefix", "slurm-", "--work-dir",
                                 dir_.File("connector"), "--interval", "0.5", "--slurm-timeout",
                                 "3", "--pending-timeout", "3"},
        dir_.File("connector.log"));
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
  int64_t Submit(const Json& spec, const std::string& name = "job",
                 const std::string& project = "research") {
    Json job = {{"metadata", {{"name", name}, {"project", project}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  int Count(const std::vector<int64_t>& jobs, const std::string& phase) {
    int n = 0;
    for (int64_t id : jobs) n += Phase(id) == phase;
    return n;
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  std::string Logs(int64_t id, int task = 0) {
    return Run("logs " + std::to_string(id) + " --task " + std::to_string(task)).output;
  }
  std::string SlurmName(int64_t id, int64_t generation = 1) {
    return "meridian-" + std::to_string(id) + "-" + std::to_string(generation);
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
  ASSERT_TRUE(Eventually([&] { return Phase(gang) == "Succeeded"; }, 20)) << Says();
  for (int task = 0; task < 2; ++task) {
    EXPECT_TRUE(Eventually([&] {
      return Logs(gang, task).find("task " + std::to_string(task) + " of 2 gpus=0,1,2,3") !=
             std::string::npos;
    })) << Logs(gang, task);
  }
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

TEST_F(SlurmTest, SlurmctldKilledAndBackLosesNoJobAndRunsNoneTwice) {
  const int64_t id = Submit({{"command", {"bash", "-c", "echo started; sleep 8; echo done"}}});
  ASSERT_TRUE(Eventually([&] { return Logs(id).find("started") != std::string::npos; }, 20))
      << Says();
  slurm_->KillController();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // within --slurm-timeout (3 s)
  ASSERT_EQ(slurm_->StartController(false), "");
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Succeeded"; }, 40)) << Says();
  EXPECT_EQ(Job(id)["status"].value("generation", 0), 1);
  EXPECT_EQ(slurm_->JobsNamed(SlurmName(id)).size(), 1u) << Says();
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(id, 2)).empty()) << Says();
  const std::string logs = Logs(id);
  EXPECT_EQ(logs.find("started"), logs.rfind("started")) << logs;
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
  ASSERT_EQ(slurm_->StartController(false), "");
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
  const std::string fenced_id =
      std::to_string(slurm_->JobsNamed(SlurmName(id, 1))[0].value("job_id", int64_t{0}));
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

TEST_F(SlurmTest, AForeignSlurmJobsGpusAreNotDoubleBooked) {
  // Alice submits to Slurm directly: all four GPUs of n1.
  const std::string foreign =
      Shell("sbatch --parsable -J alice-training -w n1 --gres=gpu:4 --mem=1000 --wrap 'sleep 120'");
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
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(Submit({{"command", {"sleep", "60"}}, {"gpus", 4}}, "four", "other"));
  }
  ASSERT_TRUE(Eventually([&] { return Count(jobs, "Running") == 3; }, 20)) << Says();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  // Alert rules have been evaluated since (every 2 s): none took the held GPUs for broken ones.
  for (const Json& a : Http(*server_, "GET", "/api/v1/alerts", admin_).body["items"]) {
    EXPECT_NE(a["labels"].value("alertname", ""), "MeridianGpuUnhealthy") << a.dump();
  }
  int64_t waiting = 0;
  for (int64_t id : jobs) {
    const Json j = Job(id);
    if (Phase(id) == "Pending") waiting = id;
    for (const Json& a : j["status"].value("allocation", Json::array())) {
      EXPECT_NE(a.value("node", ""), "slurm-n1") << j.dump();
    }
  }
  ASSERT_NE(waiting, 0) << Says();
  EXPECT_TRUE(slurm_->JobsNamed(SlurmName(waiting)).empty()) << Says();
  // Alice's job ends: its GPUs are Meridian's to place again.
  Shell("scancel " + foreign);
  ASSERT_TRUE(Eventually([&] { return Phase(waiting) == "Running"; }, 20)) << Says();
  EXPECT_EQ(Job(waiting)["status"]["allocation"][0].value("node", ""), "slurm-n1");
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

}  // namespace
}  // namespace meridian::testing
