#include "dev/dev_estate.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "cli/client.h"
#include "cloud/provisioner.h"
#include "slurm/local_cluster.h"

namespace meridian::dev {

using base::Status;
using cli::Json;

namespace {

// One simulated node: the CPU and memory it offers are those of a GPU server, not of this
// machine (the tasks' cgroup limits are real all the same).
struct AgentSpec {
  std::string node, cluster, pool, rack, gpus, cpu_milli, memory_mib;
};

Status Check(const base::Result<cli::Response>& r, const char* what) {
  if (!r.ok()) return r.status();
  if (r->status >= 300) {
    return Status::Internal(std::string(what) + ": " + cli::ErrorMessage(*r));
  }
  return Status::Ok();
}

// A child process of the estate (an agent, the Slurm connector), its output appended to `log`.
// The log is opened before fork(): the estate has threads, and its child may make only
// async-signal-safe calls until it execs.
pid_t Spawn(std::vector<std::string> args, const std::string& log) {
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (out >= 0) ::close(out);
  return pid;
}

pid_t StartAgent(const std::string& self, const std::string& url, const std::string& data_dir,
                 const AgentSpec& a, const std::vector<std::string>& extra) {
  // Beside the data dir, not in it: the data dir is 0700, and tasks run under uids of their own
  // (when the estate runs as root) must pass through to their folders.
  const std::string work = data_dir + "-agents/" + a.node;
  std::filesystem::create_directories(work);
  std::filesystem::create_directories(data_dir + "/agents");
  const std::string log = data_dir + "/agents/" + a.node + ".log";
  std::vector<std::string> args = {self,
                                   "--server",
                                   url,
                                   "agent",
                                   "--node",
                                   a.node,
                                   "--cluster",
                                   a.cluster,
                                   "--pool",
                                   a.pool,
                                   "--rack",
                                   a.rack,
                                   "--address",
                                   "127.0.0.1",
                                   "--work-dir",
                                   work,
                                   "--token-file",
                                   data_dir + "/agent.token",
                                   "--simulate-gpus",
                                   a.gpus,
                                   "--nvlink-domain-size",
                                   "8",
                                   "--cpu-milli",
                                   a.cpu_milli,
                                   "--memory-mib",
                                   a.memory_mib};
  args.insert(args.end(), extra.begin(), extra.end());
  return Spawn(std::move(args), log);
}

// The dev estate's Slurm cluster as a site would configure it for Meridian: a Cluster with
// `backend: slurm`, federated by a connector.
constexpr char kSlurmClusterDoc[] = R"(kind: Cluster
metadata: {name: hpc}
spec: {type: on-prem, region: eu-west, backend: slurm, prices: {H100-80GB: 1.5}}
)";

// Declares the running local Slurm cluster and returns its connector's command line.
base::Result<std::vector<std::string>> DeclareSlurm(const slurm::LocalCluster& cluster,
                                                    cli::Client& client, const std::string& self,
                                                    const std::string& slurm_dir) {
  Json apply = {{"files", Json::array({{{"name", "dev estate: the local Slurm cluster"},
                                        {"content", kSlurmClusterDoc}}})},
                {"message", "the dev estate's local Slurm cluster"}};
  if (Status s = Check(client.Call("POST", "/api/v1/config/apply", &apply), "the Slurm cluster");
      !s.ok()) {
    return s;
  }
  return std::vector<std::string>{self,
                                  "--server",
                                  client.config().server,
                                  "slurm-connector",
                                  "--cluster",
                                  "hpc",
                                  "--slurm-conf",
                                  cluster.conf(),
                                  "--partition",
                                  "gpu",
                                  "--node-prefix",
                                  "hpc-",
                                  "--work-dir",
                                  slurm_dir + "/connector"};
}

// The fake cloud's instances are daemons of their own (as a cloud's machines outlive the control
// plane): the dev estate deletes them when it stops.
void DeleteCloudInstances(const cloud::Provisioner& provisioner) {
  auto listed = provisioner.List("");
  if (!listed.ok()) {
    base::log::Warn("dev estate: the fake cloud's instances: {}", listed.status().message());
    return;
  }
  std::map<std::string, std::vector<std::string>> by_pool;
  for (const cloud::Instance& i : *listed) by_pool[i.pool].push_back(i.id);
  for (const auto& [pool, ids] : by_pool) {
    if (Status s = provisioner.Delete(pool, ids); !s.ok()) {
      base::log::Warn("dev estate: deleting pool {}'s instances: {}", pool, s.message());
    }
  }
}

}  // namespace

Status RunDevEstate(DevOptions o) {
  if (o.fresh_data_dir) {
    char tmpl[] = "/tmp/meridian-dev-XXXXXX";
    if (!mkdtemp(tmpl)) return Status::Io("cannot create a data dir under /tmp");
    o.server.data_dir = tmpl;
  }
  // A dev estate is one person's machine: its Prometheus (or curl) reads /metrics as it is.
  o.server.open_metrics = true;
  const std::string self = "/proc/self/exe";  // the agents are this binary
  const std::string data_dir = o.server.data_dir;
  std::vector<pid_t> agents;  // and the Slurm connector
  bool stopping = false;      // on_stop has begun: start no more children
  std::mutex agents_mu;
  // The local Slurm cluster: on when asked for, or when it can run here (auto). Started here, on
  // the main thread, before the server: its daemons die with this process
  // (slurm::LocalCluster), and a stop never meets it half started. Its folder is new and
  // private (mkdtemp): root writes its configuration and munge key there.
  std::unique_ptr<slurm::LocalCluster> slurm_cluster;
  std::string slurm_dir, slurm_line;
  if (o.slurm == "on" || (o.slurm == "auto" && slurm::LocalCluster::Runnable())) {
    std::string tmpl = data_dir + "-slurm-XXXXXX";
    Status s = mkdtemp(tmpl.data())
                   ? Status::Ok()
                   : Status::Io("cannot create " + tmpl + ": " + std::strerror(errno));
    if (s.ok()) {
      slurm_dir = tmpl;
      slurm_cluster = std::make_unique<slurm::LocalCluster>(slurm_dir, o.slurm_nodes, 4);
      s = slurm_cluster->Start();
    }
    if (!s.ok()) {
      if (slurm_cluster) slurm_cluster->Stop();
      slurm_cluster.reset();
      if (o.slurm == "on") return Status::Internal("the local Slurm cluster: " + s.message());
      base::log::Warn("dev estate: no local Slurm cluster: {}", s.message());
      slurm_line = "  (no Slurm cluster: " + s.message() + ")\n";
    }
  }
  // The cloud cluster's elastic pool grows through `meridian dev-cloud`, a fake cloud whose
  // instances are local agents; what it holds at the stop is deleted then.
  std::string cloud_dir = data_dir + "-cloud-XXXXXX";  // new and private, as Slurm's
  if (!mkdtemp(cloud_dir.data())) {
    return Status::Io("cannot create " + cloud_dir + ": " + std::strerror(errno));
  }
  chmod(cloud_dir.c_str(), 0711);  // tasks under uids of their own pass through to theirs
  const std::vector<std::string> cloud = {self, "dev-cloud", "--state", cloud_dir};
  {
    std::vector<std::string> argv = cloud;
    for (const std::string& a : o.agent_args) argv.insert(argv.end(), {"--agent-arg", a});
    o.server.provisioners["dev-cloud"] = argv;
  }
  o.server.on_ready = [&](const std::string& url, const std::string& admin) {
    cli::Client client({url, admin, "", false});
    Json apply = {
        {"files", Json::array({{{"name", "examples/estate.yaml"}, {"content", ExampleEstate()}}})},
        {"message", "the dev estate's example configuration"}};
    Status s = Check(client.Call("POST", "/api/v1/config/apply", &apply), "applying the example");
    Json user = {{"spec",
                  {{"roles", Json::array({{{"role", "agent"}}})},
                   {"description", "the dev estate's node agents"}}}};
    if (s.ok()) s = Check(client.Call("PUT", "/api/v1/users/agents", &user), "agent user");
    std::string agent_token;
    if (s.ok()) {
      Json body = {{"user", "agents"}, {"description", "dev estate agents"}};
      auto t = client.Call("POST", "/api/v1/tokens", &body);
      s = Check(t, "agent token");
      if (s.ok()) agent_token = t->body.value("token", "");
    }
    if (s.ok()) {
      const std::string path = data_dir + "/agent.token";
      std::ofstream(path) << agent_token << "\n";
      chmod(path.c_str(), 0600);
    }
    if (!s.ok()) {
      base::log::Error("dev estate: {}", s.message());
      kill(getpid(), SIGTERM);
      return;
    }
    std::vector<AgentSpec> specs;
    for (int i = 0; i < o.onprem_nodes; ++i) {
      specs.push_back({"onprem-h100-" + std::to_string(i), "onprem", "h100",
                       "onprem-r" + std::to_string(i / 2), "8xH100-80GB", "128000", "1048576"});
    }
    for (int i = 0; i < o.cloud_nodes; ++i) {
      specs.push_back({"cloud-a100-" + std::to_string(i), "cloud", "a100", "cloud-r0",
                       "8xA100-80GB", "96000", "786432"});
    }
    {
      std::lock_guard<std::mutex> lock(agents_mu);
      for (const AgentSpec& a : specs) {
        if (!stopping) agents.push_back(StartAgent(self, url, data_dir, a, o.agent_args));
      }
    }
    bool slurm_up = slurm_cluster != nullptr;
    if (slurm_up) {
      auto connector = DeclareSlurm(*slurm_cluster, client, self, slurm_dir);
      if (!connector.ok()) {
        base::log::Error("dev estate: the local Slurm cluster: {}", connector.status().message());
        kill(getpid(), SIGTERM);
        return;
      }
      connector->insert(connector->end(), {"--token-file", data_dir + "/agent.token"});
      connector->insert(connector->end(), o.agent_args.begin(), o.agent_args.end());
      std::lock_guard<std::mutex> lock(agents_mu);
      if (!stopping) {
        agents.push_back(Spawn(std::move(*connector), data_dir + "/agents/slurm-connector.log"));
      }
    }
    const size_t slurm_nodes = slurm_up ? static_cast<size_t>(o.slurm_nodes) : 0;
    // Wait until every node has registered, so that the first job has somewhere to go.
    size_t ready = 0, slurm_ready = 0;
    for (int i = 0; i < 150 && (ready < specs.size() || slurm_ready < slurm_nodes); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto nodes = client.Call("GET", "/api/v1/nodes");
      if (!nodes.ok() || nodes->status != 200) continue;
      ready = slurm_ready = 0;
      for (const Json& n : nodes->body.value("items", Json::array())) {
        if (n.value("source", "") != "registered") continue;
        (n.value("cluster", "") == "hpc" ? slurm_ready : ready) += 1;
      }
    }
    if (slurm_up) {
      slurm_line = "  Slurm cluster hpc: " + std::to_string(slurm_ready) + " of " +
                   std::to_string(slurm_nodes) +
                   " nodes x 4 H100-80GB registered through meridian slurm-connector (a real "
                   "slurmctld and slurmd, fake GPU devices; SLURM_CONF=" +
                   slurm_cluster->conf() + ")\n";
    }
    std::printf(
        "\nMeridian dev estate: %zu of %zu agents registered (%d on-prem nodes x 8 H100-80GB, "
        "%d cloud nodes x 8 A100-80GB; simulated GPUs, real processes)\n"
        "  cloud pool h200: elastic, 0 to 4 nodes x 8 H200-141GB, added when work waits for them "
        "(meridian dev-cloud, a fake cloud: instances are local agents, state in %s)\n"
        "%s"
        "  dashboard     %s/  (sign in with the admin token)\n"
        "  API           %s/api/v1\n"
        "  admin token   %s\n"
        "  data dir      %s (agents' logs in agents/)\n"
        "  task folders  %s-agents\n\n"
        "Try:\n"
        "  export MERIDIAN_SERVER=%s MERIDIAN_TOKEN=%s\n"
        "  ./build/meridian submit -f examples/jobs/train-gang.yaml   # an 8-GPU gang on-prem\n"
        "  ./build/meridian get jobs && ./build/meridian logs 1 -f\n"
        "  ./build/meridian submit -f examples/jobs/cloud-burst.yaml  # H200 work: the cloud pool "
        "grows\n"
        "  ./build/meridian top\n"
        "%s\n"
        "Ctrl-C stops everything.\n",
        ready, specs.size(), o.onprem_nodes, o.cloud_nodes, cloud_dir.c_str(), slurm_line.c_str(),
        url.c_str(), url.c_str(), admin.c_str(), data_dir.c_str(), data_dir.c_str(), url.c_str(),
        admin.c_str(),
        slurm_up ? "  ./build/meridian submit -f examples/jobs/slurm-gang.yaml   # a 2-node gang "
                   "on Slurm; squeue shows it\n"
                 : "");
    std::fflush(stdout);
  };
  o.server.on_stop = [&] {
    std::lock_guard<std::mutex> lock(agents_mu);
    stopping = true;
    for (pid_t p : agents) kill(p, SIGTERM);
    // Agents stop their tasks (each within its grace period) before they exit.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    for (pid_t p : agents) {
      while (waitpid(p, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(p, SIGKILL);
          waitpid(p, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    DeleteCloudInstances(cloud::Provisioner(cloud, 30));
    // Slurm's jobs are cancelled while its daemons still run, then the daemons stop.
    if (slurm_cluster) slurm_cluster->Stop();
    base::log::Info("dev estate stopped (data in {})", data_dir);
  };
  Status s = server::RunServer(o.server);
  // A create that was on its way when the stop began has answered by now.
  DeleteCloudInstances(cloud::Provisioner(cloud, 30));
  return s;
}

}  // namespace meridian::dev
