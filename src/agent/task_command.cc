// What a task runs: its command line (directly, or through a container runtime for an image)
// and its environment. Part of Agent (agent.h); the agent's loop is in agent.cc.
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "agent/agent.h"
#include "base/command.h"
#include "base/strings.h"

namespace meridian::agent {

namespace {

bool OnPath(const std::string& program) { return !base::FindProgram(program).empty(); }

}  // namespace

std::vector<std::string> Agent::TaskArgv(const Task& t,
                                         const std::map<std::string, std::string>& env,
                                         std::string* error,
                                         std::vector<std::string>* cleanup) const {
  const protocol::TaskRun& run = t.assignment.run;
  const std::vector<std::string>& command = run.command;
  const std::string& image = run.image;
  if (image.empty()) {
    if (command.empty()) *error = "spec.command is empty: nothing to run";
    return command;
  }
  std::vector<std::string> argv = RuntimeWords();
  if (argv.empty()) {
    *error = "the job runs image " + image +
             ", but neither podman nor docker is installed on node " + o_.node;
    return {};
  }
  const std::string name = "meridian-" + CgroupName(t);
  // Once the run has ended, however it ended (a SIGKILL leaves the container behind).
  *cleanup = argv;
  cleanup->insert(cleanup->end(), {"rm", "-f", "-t", "0", name});
  // The task directory is mounted where it is, so that the notice file has the same path.
  argv.insert(argv.end(),
              {"run", "--rm", "--network=host", "--name", name, "-v", t.dir + ":" + t.dir});
  AddDataVolumes(t, &argv);
  if (t.mps) {
    // The GPU's MPS daemon, reached through its pipes and shared memory.
    argv.insert(argv.end(), {"--ipc=host", "-v", t.mps->pipe_dir + ":" + t.mps->pipe_dir});
  }
  if (run.cpu_milli > 0) argv.push_back("--cpus=" + std::to_string(run.cpu_milli / 1000.0));
  if (run.memory_mib > 0) argv.push_back("--memory=" + std::to_string(run.memory_mib) + "m");
  // The runtime runs as root; the container's processes run as the task's uid.
  if (t.uid) argv.push_back("--user=" + std::to_string(*t.uid) + ":" + std::to_string(*t.uid));
  // Names only: the runtime takes each value from its own environment (root's to read), where a
  // value on its command line would be in /proc/PID/cmdline for every process of the machine.
  for (const auto& [k, v] : env) {
    if (k.rfind("MERIDIAN_", 0) == 0 || k.rfind("CUDA_MPS_", 0) == 0 ||
        k.find("VISIBLE_DEVICES") != std::string::npos || run.env.count(k)) {
      argv.insert(argv.end(), {"-e", k});
    }
  }
  argv.push_back(image);
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> Agent::RuntimeWords() const {
  std::string runtime = o_.container_runtime;
  if (runtime.empty()) runtime = OnPath("podman") ? "podman" : OnPath("docker") ? "docker" : "";
  std::vector<std::string> words;
  std::istringstream in(runtime);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::map<std::string, std::string> Agent::TaskEnv(const Task& t) const {
  const protocol::Assignment& a = t.assignment;
  std::map<std::string, std::string> env;
  for (const char* k : {"PATH", "LANG", "TZ"}) {
    if (const char* v = std::getenv(k)) env[k] = v;
  }
  if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  // Its own home and temporary folder, which no other task can enter (the agent's are not the
  // task's to write, and a shared /tmp is where tasks would meet).
  env["HOME"] = t.dir + "/work";
  env["TMPDIR"] = t.dir + "/work";
  for (const auto& [k, v] : a.run.env) env[k] = v;
  std::string devices;
  int64_t milli = 0, gpu_memory = 0;
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const protocol::DeviceGrant& d = a.devices[i];
    devices +=
        (devices.empty() ? "" : ",") + (i < t.device_names.size() ? t.device_names[i] : d.uuid);
    milli += d.milli;
    gpu_memory += d.memory_mib;
  }
  env["CUDA_VISIBLE_DEVICES"] = devices;
  env["NVIDIA_VISIBLE_DEVICES"] = devices.empty() ? "void" : devices;
  if (milli > 0 && milli < 1000) env["MERIDIAN_GPU_MILLI"] = std::to_string(milli);
  if (gpu_memory > 0) env["MERIDIAN_GPU_MEMORY_MIB"] = std::to_string(gpu_memory);
  if (t.sharing) env["MERIDIAN_GPU_SHARING"] = t.sharing->mode;
  if (t.mps) {
    // The share, enforced by the GPU's MPS server: its part of the SMs, and the device memory
    // its allocations may pin (beyond it, they fail instead of starving the others). The device
    // is the task's first and only visible one.
    env["CUDA_MPS_PIPE_DIRECTORY"] = t.mps->pipe_dir;
    env["CUDA_MPS_LOG_DIRECTORY"] = t.mps->log_dir;
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(std::max<int64_t>(1, milli / 10));
    if (gpu_memory > 0) {
      env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + std::to_string(gpu_memory) + "M";
    }
  }
  env["MERIDIAN_JOB_ID"] = std::to_string(t.job);
  env["MERIDIAN_JOB_NAME"] = a.name;
  env["MERIDIAN_PROJECT"] = a.project;
  env["MERIDIAN_TASK_INDEX"] = std::to_string(t.index);
  env["MERIDIAN_WORLD_SIZE"] = std::to_string(a.world_size);
  env["MERIDIAN_MASTER_ADDR"] = a.master_addr;
  env["MERIDIAN_GENERATION"] = std::to_string(t.generation);
  if (a.array_id > 0) {
    env["MERIDIAN_ARRAY_JOB_ID"] = std::to_string(a.array_id);
    env["MERIDIAN_ARRAY_INDEX"] = std::to_string(a.array_index);
  }
  env["MERIDIAN_RESTART"] = std::to_string(t.restarts);
  env["MERIDIAN_NODE"] = o_.node;
  env["MERIDIAN_NOTICE_FILE"] = t.dir + "/notice";
  if (Limited(t)) env["MERIDIAN_CGROUP"] = "meridian/" + CgroupName(t);
  AddDataEnv(t, &env);
  return env;
}

}  // namespace meridian::agent
