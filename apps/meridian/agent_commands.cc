// `meridian agent`: a node agent (its tasks run under meridian-shim, apps/meridian-shim).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "agent/agent.h"
#include "agent/nvml_gpus.h"
#include "agent/simulated_gpus.h"
#include "apps/meridian/commands.h"
#include "apps/meridian/config_file.h"
#include "base/strings.h"

namespace {

struct AgentFlags {
  meridian::agent::AgentOptions o;
  std::string token_file;
  std::string simulate_gpus;
  int nvlink_domain_size = 0;
  std::vector<std::string> labels;
  bool no_cgroups = false;
  std::string task_uids = meridian::agent::kDefaultTaskUids.ToString();
  std::string gpu_discovery = "auto";
  std::string nvml_library = "libnvidia-ml.so.1";
};

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "meridian";
}

}  // namespace

void StopOnSignals(std::atomic<bool>* stop) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::thread([signals, stop] {
    int sig = 0;
    sigwait(&signals, &sig);
    *stop = true;
  }).detach();
}

namespace {

int RunAgent(AgentFlags& f) {
  using meridian::base::Status;
  if (f.o.cluster.empty()) return Fail(Status::Invalid("--cluster is required"));
  auto config = RunnerClientConfig(f.token_file);
  if (!config.ok()) return Fail(config.status());
  f.o.server = *config;
  for (const std::string& l : f.labels) {
    const size_t eq = l.find('=');
    if (eq == std::string::npos)
      return Fail(Status::Invalid("--label " + l + ": expected KEY=VALUE"));
    f.o.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  if (f.o.node.empty()) f.o.node = meridian::agent::HostName();
  if (f.o.work_dir.empty()) f.o.work_dir = "/var/lib/meridian/agent/" + f.o.node;
  // Task runs are supervised by meridian-shim, installed beside this binary.
  const std::string self = SelfPath();
  f.o.shim = self.substr(0, self.rfind('/') + 1) + "meridian-shim";
  if (access(f.o.shim.c_str(), X_OK) != 0) {
    return Fail(
        Status::Invalid("cannot find " + f.o.shim + " (it is built and installed with meridian)"));
  }
  f.o.cgroups = !f.no_cgroups;
  if (f.task_uids == "off") {
    f.o.task_uids.reset();
  } else {
    auto range = meridian::agent::ParseUidRange(f.task_uids);
    if (!range.ok()) return Fail(range.status());
    f.o.task_uids = *range;
  }
  std::unique_ptr<meridian::agent::GpuDiscovery> gpus;
  std::string discovery = f.gpu_discovery;
  if (discovery == "auto") discovery = f.simulate_gpus.empty() ? "nvml" : "simulated";
  if (discovery == "simulated") {
    auto sim =
        meridian::agent::SimulatedGpus::FromSpec(f.simulate_gpus, f.o.node, f.nvlink_domain_size);
    if (!sim.ok()) return Fail(sim.status());
    gpus = std::move(sim.value());
  } else if (discovery == "nvml") {
    auto nvml = meridian::agent::NvmlGpus::Open(f.nvml_library);
    if (!nvml.ok()) {
      return Fail(Status::Invalid(nvml.status().message() +
                                  " (or --gpu-discovery none for a node without GPUs)"));
    }
    gpus = std::move(nvml.value());
  } else {
    gpus = std::make_unique<meridian::agent::NoGpus>();
  }
  // SIGINT/SIGTERM stop the loop; the agent then stops its tasks and reports them.
  std::atomic<bool> stop{false};
  StopOnSignals(&stop);
  meridian::agent::Agent agent(f.o, std::move(gpus));
  Status s = agent.Run(stop);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

void AddAgentCommands(CLI::App& app, int* rc) {
  static AgentFlags f;
  CLI::App* agent = app.add_subcommand("agent", "Run a node agent: register this node, run tasks");
  agent->add_option("--node", f.o.node, "node name (default: the host name)");
  // Required, but may come from --config: RunAgent checks it.
  agent->add_option("--cluster", f.o.cluster, "the cluster it belongs to (required)");
  agent->add_option("--pool", f.o.pool, "its node pool");
  agent->add_option("--rack", f.o.rack, "its rack (for topology-aware placement)");
  agent->add_option("--address", f.o.address,
                    "address other tasks of a gang use to reach it (default: the host name)");
  agent->add_option("--label", f.labels, "KEY=VALUE node label (repeatable)");
  agent->add_option("--cpu-milli", f.o.cpu_milli, "CPU to offer, in milli-CPUs (default: all)");
  agent->add_option("--memory-mib", f.o.memory_mib, "memory to offer (default: all)");
  agent->add_option("--work-dir", f.o.work_dir,
                    "task directories and output (default /var/lib/meridian/agent/NODE)");
  agent->add_option("--token-file", f.token_file, "read the agent's token from this file");
  agent->add_option("--simulate-gpus", f.simulate_gpus,
                    "simulated GPUs, e.g. 8xH100-80GB (for machines without NVIDIA GPUs)");
  agent
      ->add_option("--gpu-discovery", f.gpu_discovery,
                   "nvml (the NVIDIA driver), simulated, none, or auto: simulated with "
                   "--simulate-gpus, nvml otherwise")
      ->check(CLI::IsMember({"auto", "nvml", "simulated", "none"}));
  agent->add_option("--nvml-library", f.nvml_library, "the NVML library to load");
  agent->add_option("--nvlink-domain-size", f.nvlink_domain_size,
                    "simulated GPUs per NVLink domain (0: all of a group)");
  agent->add_option("--container-runtime", f.o.container_runtime,
                    "command that runs images, e.g. \"podman --runtime runc\" (default: podman or "
                    "docker, when installed)");
  agent
      ->add_option("--mps-control", f.o.mps_control,
                   "NVIDIA's MPS control program, for shares of GPUs in pools of gpuSharing mps "
                   "(without it, shares are time-sliced and jobs are told)")
      ->capture_default_str();
  agent->add_flag("--no-cgroups", f.no_cgroups, "do not limit tasks' CPU and memory");
  CLI::Option* task_uids = agent->add_option(
      "--task-uids", f.task_uids,
      "uids (FIRST-LAST) that tasks run under, one per job, each with the gid of the same number; "
      "off: tasks run as the agent's uid (the default range needs the agent to run as root)");
  task_uids->capture_default_str();
  static LogFlags log_flags;
  AddLogFlags(agent, &log_flags);
  static std::string config;
  AddConfigFlag(agent, &config);
  agent->callback([rc, agent, task_uids] {
    if (meridian::base::Status s = ApplyConfigFile(agent, config); !s.ok()) {
      *rc = Fail(s);
      return;
    }
    InitLog(log_flags, "meridian agent");
    f.o.task_uids_asked = task_uids->count() > 0;
    *rc = RunAgent(f);
  });
}
