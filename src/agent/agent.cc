#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "agent/gpu_devices.h"
#include "agent/simulated_gpus.h"
#include "agent/staging.h"
#include "agent/task_isolation.h"
#include "base/clock.h"
#include "base/command.h"
#include "base/files.h"
#include "base/log.h"
#include "base/strings.h"

namespace meridian::agent {

using base::Status;

namespace {

constexpr int64_t kUploadChunk = 256 * 1024;

Json ReadJson(const std::string& path) {
  Json j = Json::parse(base::ReadWholeFile(path), nullptr, false);
  return j.is_discarded() ? Json() : j;
}

// The agent's bookkeeping files in a task's folder: root's alone (an assignment holds its env).
void WriteFile(const std::string& path, const std::string& text) {
  (void)WritePrivateFile(path, text, 0600);
}

// What the shim wrote when the task ended; none while it runs (or when the file is unreadable).
std::optional<protocol::ShimExit> ReadExit(const std::string& dir) {
  const Json j = ReadJson(dir + "/exit.json");
  if (!j.is_object()) return std::nullopt;
  auto exit = protocol::DecodeShimExit(j);
  if (!exit.ok()) {
    protocol::ShimExit unknown;
    unknown.reason = exit.status().message();
    return unknown;
  }
  return *exit;
}

// Whether a diagnosis says more than the exit code that the report carries anyway.
bool Telling(const domain::Diagnosis& why) {
  return why.cause != domain::FailureCause::kNone && why.cause != domain::FailureCause::kExitCode;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

bool Alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// Whether a shim started by an earlier life of the agent still runs: its pid may have gone to
// another program since. (A child of this agent keeps its pid until reaped, and between fork
// and exec it does not look like a shim yet.)
bool ShimAlive(int pid) {
  return Alive(pid) &&
         base::ReadWholeFile("/proc/" + std::to_string(pid) + "/cmdline").find("meridian-shim") !=
             std::string::npos;
}

int SignalNumber(const std::string& name) {
  if (name == "SIGUSR1") return SIGUSR1;
  if (name == "SIGUSR2") return SIGUSR2;
  if (name == "SIGHUP") return SIGHUP;
  if (name == "SIGINT") return SIGINT;
  return 0;
}

std::string TaskDirName(int64_t job, int32_t task, int64_t generation) {
  return std::to_string(job) + "-" + std::to_string(task) + "-g" + std::to_string(generation);
}

}  // namespace

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

int64_t HostCpuMilli() { return static_cast<int64_t>(std::thread::hardware_concurrency()) * 1000; }

int64_t HostMemoryMib() {
  struct sysinfo info;
  if (sysinfo(&info) != 0) return 1024;
  return static_cast<int64_t>(info.totalram) * info.mem_unit >> 20;
}

Agent::Agent(AgentOptions options, std::unique_ptr<GpuDiscovery> gpus)
    : o_(std::move(options)),
      gpus_(std::move(gpus)),
      client_(o_.server),
      orders_(o_.node.empty() ? HostName() : o_.node) {
  if (o_.node.empty()) o_.node = HostName();
  if (o_.address.empty()) o_.address = HostName();
  if (o_.cpu_milli <= 0) o_.cpu_milli = HostCpuMilli();
  if (o_.memory_mib <= 0) o_.memory_mib = HostMemoryMib();
  if (o_.cgroups) cgroups_ = Cgroups::Detect();
  // Heartbeats, reports and uploads go over one connection that stays open.
  o_.server.keep_connection = true;
  client_ = cli::Client(o_.server);
}

Agent::~Agent() = default;

Status Agent::Register() {
  auto inventory = gpus_->Inventory();
  if (!inventory.ok()) return inventory.status();
  protocol::Registration reg;
  reg.node = o_.node;
  reg.cluster = o_.cluster;
  reg.pool = o_.pool;
  reg.rack = o_.rack;
  reg.address = o_.address;
  reg.labels = o_.labels;
  reg.cpu_milli = o_.cpu_milli;
  reg.memory_mib = o_.memory_mib;
  reg.simulated = gpus_->simulated();
  reg.agent_version = "0.5.0";
  gpu_models_.clear();
  for (const GpuInfo& g : *inventory) {
    gpu_models_.push_back(g.model);
    reg.gpus.push_back({g.index, g.uuid, g.model, g.memory_mib, g.nvlink_domain, g.mig_capable,
                        g.mig_enabled, true, ""});
  }
  Json body = protocol::ToJson(reg);
  const double sent = base::WallClockNow();
  auto r = client_.Call("POST", "/api/v1/agents/register", &body);
  if (!r.ok()) return r.status();
  if (r->status == 401 && credentialed_) {
    ForgetCredential("registration refused the node's credential: " + cli::ErrorMessage(*r));
    return Status(base::StatusCode::kPermissionDenied,
                  "registering again with the bootstrap token");
  }
  if (r->status != 200) {
    return Status(r->status == 401 || r->status == 403 ? base::StatusCode::kPermissionDenied
                                                       : base::StatusCode::kInvalidArgument,
                  "registration refused: " + cli::ErrorMessage(*r));
  }
  auto answer = protocol::DecodeRegistrationAnswer(r->body);
  if (!answer.ok()) return answer.status();
  TakeTerms(answer->terms);
  if (!answer->credential.empty()) UseCredential(answer->credential, true);
  // The server may answer a registration before it has read its policy: the figures in the lease
  // file (from the last heartbeat, which comes only after) stay until a heartbeat's answer.
  RenewLease(sent, LeaseValues::kKeep);
  registered_ = true;
  orders_.Use(client_.config());
  base::log::Info(base::log::Fields{{"node", o_.node}, {"cluster", o_.cluster}},
                  "node {} registered in cluster {} with {} GPU(s){}; heartbeat every {:.1f} s, "
                  "lease {:.1f} s, fence grace {:.1f} s, cgroups {}",
                  o_.node, o_.cluster, inventory->size(), gpus_->simulated() ? " (simulated)" : "",
                  interval_, lease_, fence_grace_, cgroups_.VersionName());
  return Status::Ok();
}

void Agent::UseCredential(const std::string& credential, bool keep) {
  if (keep) {
    const std::string path = o_.work_dir + "/credential";
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const std::string line = credential + "\n";
      const bool written =
          ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      ::close(fd);
      if (written) std::rename(tmp.c_str(), path.c_str());
    }
  }
  cli::ClientConfig c = o_.server;
  c.token = credential;
  client_ = cli::Client(c);
  credentialed_ = true;
  if (registered_) orders_.Use(c);
}

void Agent::ForgetCredential(const std::string& why) {
  base::log::Warn("{}; using the bootstrap token", why);
  std::error_code ec;
  std::filesystem::remove(o_.work_dir + "/credential", ec);
  client_ = cli::Client(o_.server);
  credentialed_ = false;
}

void Agent::TakeTerms(const protocol::AgentTerms& terms) {
  interval_ = terms.heartbeat_interval;
  lease_ = terms.lease;
  if (terms.fence_grace) fence_grace_ = *terms.fence_grace;
}

Status Agent::Beat() {
  Poll();
  beat_soon_ = false;
  orders_.TakeRung();  // a ring from now on brings another heartbeat
  protocol::Heartbeat beat{Telemetry(), Reports(), {}, {}, {}};
  auto states = States();
  beat.remediations = remediated_;
  Json body = protocol::ToJson(beat);
  const double sent = base::WallClockNow();
  // Over the node's channel when one is open (ADR 0047), else POSTed on the agent's connection;
  // either way the same answer.
  base::Result<cli::Response> r = base::Status(base::StatusCode::kUnavailable, "");
  if (auto over = orders_.Heartbeat(body.dump(), client_.config().read_timeout); over.ok()) {
    cli::Response answer;
    answer.status = over->status;
    if (!over->body.empty()) answer.body = Json::parse(over->body, nullptr, false);
    if (answer.body.is_discarded()) answer.body = nullptr;
    r = std::move(answer);
  } else {
    r = client_.Call("POST", "/api/v1/agents/" + o_.node + "/heartbeat", &body);
  }
  if (!r.ok()) return r.status();
  if (r->status == 404) {
    registered_ = false;  // the server forgot the node (a fresh data dir): register again
    return Status::NotFound(cli::ErrorMessage(*r));
  }
  if (r->status == 401 && credentialed_) {
    // Revoked, or a server that never issued it (a fresh data dir): start again as a new node.
    ForgetCredential("the server refused the node's credential: " + cli::ErrorMessage(*r));
    registered_ = false;
    return Status(base::StatusCode::kPermissionDenied, "registering again");
  }
  if (r->status != 200) return Status::Invalid("heartbeat refused: " + cli::ErrorMessage(*r));
  auto terms = protocol::DecodeTerms(r->body);
  if (!terms.ok()) return terms.status();
  TakeTerms(*terms);
  RenewLease(sent, LeaseValues::kWrite);
  remediated_.clear();  // the server has them
  reported_ = std::move(states);
  Reconcile(r->body);
  TakeHealthOrders(r->body);
  TakeSessions(r->body);
  UploadLogs();
  Cleanup();
  return Status::Ok();
}

Status Agent::Run(const std::atomic<bool>& stop) {
  std::error_code ec;
  std::filesystem::create_directories(o_.work_dir + "/tasks", ec);
  if (ec) return Status::Io("--work-dir " + o_.work_dir + ": " + ec.message());
  if (Status s = SetUpIsolation(); !s.ok()) return s;
  // Cgroups are named after the work directory too (its inode, which a restart keeps): two agents
  // of one machine with the same node name (tests, two dev estates) must not share a task's
  // cgroup, or one sets the other's limits.
  struct stat work {};
  if (stat(o_.work_dir.c_str(), &work) == 0) {
    char id[24];
    std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(work.st_ino));
    cgroup_prefix_ = o_.node + "." + id;
  } else {
    cgroup_prefix_ = o_.node;
  }
  if (Status s = Recover(); !s.ok()) return s;
  // A credential from an earlier life of the agent: the node is this one, registered before.
  const std::string kept = base::ReadWholeFile(o_.work_dir + "/credential");
  if (!kept.empty()) UseCredential(kept.substr(0, kept.find_last_not_of(" \n") + 1), false);
  double backoff = 0.5;
  // Sleeps until the next heartbeat is due, or sooner: the server rang (new orders), or a task
  // started, exited or backs off (looked at every 100 ms), which the server should hear of now.
  // After a failed call (`backing_off`), only the backoff's end.
  auto sleep = [&](double seconds, bool backing_off) {
    const double until = base::WallClockNow() + seconds;
    double polled = base::WallClockNow();
    while (!stop && (backing_off || (!beat_soon_ && !orders_.rung())) &&
           base::WallClockNow() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!backing_off && registered_ && base::WallClockNow() - polled >= 0.1) {
        polled = base::WallClockNow();
        Poll();
        if (States() != reported_) break;
      }
    }
  };
  while (!stop) {
    Status s = registered_ ? Beat() : Register();
    if (s.ok()) {
      if (!last_error_.empty()) base::log::Info("connected again");
      last_error_.clear();
      backoff = 0.5;
      sleep(registered_ ? interval_ : 0, false);
      continue;
    }
    Poll();  // tasks go on (until the lease runs out) while the server is away
    if (s.message() != last_error_) {
      base::log::Warn("{} (retrying with backoff)", s.message());
      last_error_ = s.message();
    }
    sleep(backoff, true);
    // Retries come often enough that the lease is renewed soon after the server is back: an
    // outage shorter than the lease (less a tenth of it, at most 5 s) stops no task.
    backoff = std::min(backoff * 2, std::max(interval_, std::min(5.0, lease_ / 10)));
  }
  // Shutting down: stop every task, wait for them, and tell the server.
  for (auto& [key, t] : tasks_) {
    if (t.state != "Exited") RequestStop(t, "the agent is shutting down");
  }
  const double deadline = base::WallClockNow() + 120;
  for (;;) {
    Poll();
    bool running = false;
    for (auto& [key, t] : tasks_) running |= t.state != "Exited";
    if (!running || base::WallClockNow() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (registered_) {
    Json body = protocol::ToJson(protocol::Heartbeat{Telemetry(), Reports(), {}, {}, {}});
    (void)client_.Call("POST", "/api/v1/agents/" + o_.node + "/heartbeat", &body);
    UploadLogs();
  }
  return Status::Ok();
}

Status Agent::Recover() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(o_.work_dir + "/tasks", ec)) {
    const std::string dir = entry.path().string();
    auto a = protocol::DecodeAssignment(ReadJson(dir + "/assignment.json"));
    if (!a.ok()) {
      base::log::Warn("{}: {} (left alone)", dir, a.status().message());
      continue;
    }
    Task t;
    t.job = a->job;
    t.index = a->task;
    t.generation = a->generation;
    t.dir = dir;
    t.assignment = std::move(a.value());
    t.restarts = std::atoi(base::ReadWholeFile(dir + "/restarts").c_str());
    t.shim_pid = std::atoi(base::ReadWholeFile(dir + "/shim.pid").c_str());
    // Its uid (an agent that cannot switch uids now has no use for it). The claim is kept since
    // the last life; it is made again after a reboot.
    if (const std::string uid = base::ReadWholeFile(dir + "/uid"); !uid.empty() && isolated_) {
      t.uid = static_cast<uint32_t>(std::strtoul(uid.c_str(), nullptr, 10));
      std::string error;
      (void)claims_.Claim(*t.uid, claim_owner_, t.job, &error);
    }
    t.adopted = true;
    if (auto exit = ReadExit(dir)) {
      t.state = "Exited";
      t.exit_code = exit->exit_code;
      t.message = exit->reason;
      const domain::Diagnosis why = Diagnose(t, *exit);
      t.cause = why.cause;
      if (Telling(why)) t.message = why.summary;
    } else if (ShimAlive(t.shim_pid)) {
      t.state = "Running";
    } else {
      t.state = "Exited";
      t.message = "its supervisor ended while the agent was away";
      t.cause = domain::FailureCause::kNotStarted;
    }
    base::log::Info("found task {} ({})", entry.path().filename().string(), t.state);
    tasks_[{t.job, t.index, t.generation}] = std::move(t);
  }
  return Status::Ok();
}

void Agent::Reconcile(const Json& answer) {
  std::set<Key> listed;
  for (protocol::DecodedAssignment& d : protocol::DecodeAssignments(answer)) {
    if (!d.assignment.ok()) {
      // Listed, so not stopped if it runs; if it does not, it is reported as never started.
      base::log::Warn("{}", d.assignment.status().message());
      if (!d.key) continue;
      listed.insert(*d.key);
      if (tasks_.count(*d.key)) continue;
      Task t;
      std::tie(t.job, t.index, t.generation) = *d.key;
      t.state = "Exited";
      t.message = "the agent cannot read its assignment: " + d.assignment.status().message();
      t.cause = domain::FailureCause::kNotStarted;
      tasks_[*d.key] = std::move(t);
      continue;
    }
    protocol::Assignment& a = *d.assignment;
    const Key key{a.job, a.task, a.generation};
    listed.insert(key);
    auto it = tasks_.find(key);
    if (a.stop) {
      if (it == tasks_.end()) {
        // Never started here: it counts as stopped at once.
        Task t;
        std::tie(t.job, t.index, t.generation) = key;
        t.assignment = std::move(a);
        t.state = "Exited";
        t.message = "stopped before it started";
        tasks_[key] = std::move(t);
      } else if (it->second.state != "Exited") {
        RequestStop(it->second, a.stop_reason.empty() ? "preempted" : a.stop_reason, a.stop_within);
      }
      continue;
    }
    if (it != tasks_.end()) continue;  // running, or ended and reported
    Task t;
    std::tie(t.job, t.index, t.generation) = key;
    t.assignment = std::move(a);
    t.dir = o_.work_dir + "/tasks/" + TaskDirName(t.job, t.index, t.generation);
    Task& placed = tasks_[key] = std::move(t);
    Start(placed);
  }
  for (auto& [key, t] : tasks_) {
    if (listed.count(key)) continue;
    if (t.state == "Exited" || t.state == "BackingOff") {
      if (t.state == "BackingOff") ReleaseDevices(t);  // kept for a restart that will not come
      t.state = "Exited";
      t.gone = true;  // the server has what it needs
    } else {
      RequestStop(t, "no longer assigned to this node");
    }
  }
}

void Agent::Start(Task& t) {
  std::string error;
  if (Status s = PrepareFolder(t); !s.ok()) error = s.message();
  Mounts mounts;
  if (Status s = error.empty() ? PrepareData(t, &mounts) : Status::Ok(); !s.ok()) {
    error = s.message();
  }
  if (Status s = error.empty() ? PrepareGpus(t) : Status::Ok(); !s.ok()) error = s.message();
  const std::map<std::string, std::string> task_env = TaskEnv(t);
  std::vector<std::string> cleanup;
  std::vector<std::string> argv =
      error.empty() ? TaskArgv(t, task_env, &error, &cleanup) : std::vector<std::string>{};
  const protocol::TaskRun& run = t.assignment.run;
  if (!error.empty()) {
    ReleaseDevices(t);
    t.state = "Exited";
    t.exit_code.reset();
    t.message = error;
    t.cause = domain::FailureCause::kNotStarted;
    std::ofstream(t.dir + "/output.log", std::ios::app) << "meridian: " << error << "\n";
    return;
  }
  protocol::ShimSpec spec;
  const std::string group = CgroupName(t);
  if (Limited(t)) {
    auto files = cgroups_.Create(group, run.cpu_milli, run.memory_mib);
    if (files.ok()) {
      spec.cgroup_procs = *files;
    } else {
      base::log::Warn("task {} runs without limits: {}", group, files.status().message());
    }
  }
  spec.env = task_env;
  if (!cleanup.empty()) {
    // The container runtime's own configuration comes from the agent's environment.
    for (const char* k :
         {"CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "DOCKER_HOST",
          "DOCKER_CONFIG", "XDG_RUNTIME_DIR"}) {
      if (const char* v = std::getenv(k)) spec.env[k] = v;
    }
  }
  spec.argv = std::move(argv);
  // A container's user is the runtime's to set (--user): the runtime itself needs root.
  if (t.uid && cleanup.empty()) {
    spec.uid = spec.gid = *t.uid;
    // Only its own GPUs: CUDA_VISIBLE_DEVICES is advice a task may ignore.
    std::set<std::string> granted;
    for (const protocol::DeviceGrant& d : t.assignment.devices) granted.insert(d.uuid);
    spec.hide_devices = DevicesToHide(GpuDeviceNodes(), granted);
    // And on a MIG machine, only its own instances' capabilities: a /dev/nvidia-caps of its own
    // (PrepareGpus found them).
    if (t.mig_caps) {
      spec.devices_dir = kNvidiaCaps;
      spec.devices = *t.mig_caps;
    }
    spec.read_only = std::move(mounts.read_only);
    spec.read_write = std::move(mounts.read_write);
  }
  // In a container too: the runtime runs its processes as the task's uid (--user).
  if (t.uid && !mounts.owned.empty()) {
    spec.owned = std::move(mounts.owned);
    spec.owner = *t.uid;
  }
  for (const protocol::DataMount& d : t.assignment.data) {
    if (d.stage_from.empty()) continue;
    protocol::ShimSpec::Stage st;
    st.dataset = d.name;
    st.argv = StagingArgv(d.staging_command, d.stage_from);
    st.source = d.stage_from;
    st.target = d.path;
    st.evict = d.evict;
    st.bytes = static_cast<int64_t>(d.size_gib * 1073741824.0);
    spec.stages.push_back(std::move(st));
  }
  spec.cwd = run.working_dir.empty() ? t.dir + "/work" : run.working_dir;
  spec.output = t.dir + "/output.log";
  spec.grace = run.grace_period;
  spec.notice_signal = SignalNumber(run.notice_signal);
  spec.notice_file = t.dir + "/notice";
  spec.lease_file = o_.work_dir + "/lease";
  spec.lease = lease_;
  spec.runtime_limit = run.runtime_limit;
  spec.cleanup = std::move(cleanup);
  if (fence_grace_ >= 0) spec.fence_grace = fence_grace_;
  WriteFile(t.dir + "/spec.json", protocol::ToJson(spec).dump());
  const std::string shim = o_.shim;
  const std::string dir = t.dir;
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();         // outlives the agent, and the agent's signals
    CloseFdsFrom(3);  // the agent's connections are not the shim's, nor its task's
    execl(shim.c_str(), shim.c_str(), dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid < 0) {
    t.state = "Exited";
    t.message = "cannot start the task's supervisor";
    ReleaseDevices(t);
    return;
  }
  t.shim_pid = pid;
  t.adopted = false;
  t.state = "Running";
  t.cause = domain::FailureCause::kNone;
  t.xids_at_start = XidCounts();
  t.exit_code.reset();
  WriteFile(t.dir + "/shim.pid", std::to_string(pid));
}

void Agent::RequestStop(Task& t, const std::string& reason, std::optional<double> within) {
  if (t.stop_requested) return;
  t.stop_requested = true;
  if (t.state == "BackingOff" || t.state == "Starting") {
    if (t.state == "BackingOff") ReleaseDevices(t);
    t.state = "Exited";
    t.message = reason;
    return;
  }
  WriteFile(t.dir + "/stop", protocol::ToJson(protocol::ShimStop{reason, within}).dump());
}

std::map<Agent::Key, std::string> Agent::States() const {
  std::map<Key, std::string> states;
  for (const auto& [key, t] : tasks_) states.emplace(key, t.state);
  return states;
}

void Agent::Poll() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  const double now = base::WallClockNow();
  for (auto& [key, t] : tasks_) {
    if (t.state == "BackingOff" && now >= t.restart_at && !t.stop_requested) Start(t);
    if (t.state != "Running") continue;
    const std::optional<protocol::ShimExit> exit = ReadExit(t.dir);
    if (!exit) {
      if (!(t.adopted ? ShimAlive(t.shim_pid) : Alive(t.shim_pid))) {
        t.state = "Exited";
        t.message = "its supervisor ended without an exit status";
        t.cause = domain::FailureCause::kNotStarted;
        ReleaseDevices(t);
      }
      continue;
    }
    t.exit_code = exit->exit_code;
    t.message = exit->reason;
    const domain::Diagnosis why = Diagnose(t, *exit);
    cgroups_.Remove(CgroupName(t));
    const bool failed = !t.exit_code || *t.exit_code != 0;
    const domain::RestartPolicy& restart = t.assignment.run.restart;
    const bool may_restart = restart.on_failure && t.restarts < restart.max_restarts;
    // A dataset that could not be staged (three attempts) is the job's failure, not the task's.
    if (failed && may_restart && !t.stop_requested && t.message.empty() &&
        exit->staging_error.empty()) {
      ++t.restarts;
      const double backoff =
          std::min<double>(domain::kMaxRestartBackoffSeconds, std::pow(2.0, t.restarts - 1));
      t.state = "BackingOff";
      t.restart_at = now + backoff;
      t.message =
          (why.summary.empty()
               ? "exited with code " + (t.exit_code ? std::to_string(*t.exit_code) : "unknown")
               : why.summary) +
          "; restarting in " + std::to_string(static_cast<int>(backoff)) + " s";
      std::ofstream(t.dir + "/output.log", std::ios::app) << "meridian: " << t.message << "\n";
      continue;
    }
    t.state = "Exited";
    t.cause = why.cause;
    if (Telling(why)) t.message = why.summary;
    ReleaseDevices(t);
  }
}

void Agent::TakeHealthOrders(const Json& answer) {
  auto orders = protocol::DecodeHealthOrders(answer);
  if (!orders.ok()) {
    base::log::Warn("{}", orders.status().message());
    return;
  }
  for (const protocol::InjectedFault& f : orders->faults) {
    const bool warning = !f.warning.empty();
    const Status s =
        warning ? gpus_->InjectWarning(f.gpu, f.warning) : gpus_->InjectXid(f.gpu, f.xid);
    const std::string what = warning ? "warning " + f.warning : "XID " + std::to_string(f.xid);
    base::log::Warn("fault injection: {} on GPU {}{}", what, f.gpu,
                    s.ok() ? "" : ": " + s.message());
    beat_soon_ = beat_soon_ || s.ok();
  }
  for (const protocol::Remediation& order : orders->remediations) {
    // A task of this node still on it (the server's account is a heartbeat behind): not yet; the
    // order comes again with the next answer.
    bool busy = false;
    for (const auto& [key, t] : tasks_) {
      if (t.state == "Exited") continue;
      for (const protocol::DeviceGrant& d : t.assignment.devices) busy = busy || d.gpu == order.gpu;
    }
    if (!busy) {
      remediated_.push_back(Remediate(order));
      beat_soon_ = true;
    }
  }
}

namespace {

// Runs `argv` to its end, for at most `timeout` seconds; ok when it exits 0. Spawned, not
// forked: the agent has threads, and a forked child may not allocate before it execs.
Status RunToEnd(const std::vector<std::string>& argv, double timeout) {
  if (argv.empty()) return Status::Invalid("the remediation command is empty");
  auto ran = base::RunCommand(argv, {}, "", timeout);
  if (!ran.ok()) return ran.status();
  if (ran->exit_code == 0) return Status::Ok();
  std::string said(base::Trim(ran->err.empty() ? ran->out : ran->err));
  if (said.size() > 200) said = said.substr(0, 200) + "...";
  return Status::Io(argv[0] +
                    (ran->exit_code > 0 ? " exited with code " + std::to_string(ran->exit_code)
                                        : std::string(" was killed by a signal")) +
                    (said.empty() ? "" : ": " + said));
}

}  // namespace

protocol::RemediationResult Agent::Remediate(const protocol::Remediation& order) {
  // A GPU reset takes seconds. The loop waits for it, so it must end well inside the lease, or
  // every task of the node would be stopped by its shim for a lease run out.
  const double timeout = std::max(1.0, lease_ / 2);
  protocol::RemediationResult out;
  out.gpu = order.gpu;
  Status s =
      gpus_->ResetsItself() ? gpus_->ClearFault(order.gpu) : RunToEnd(order.command, timeout);
  std::string done;
  if (s.ok()) {
    done = gpus_->ResetsItself() ? "simulated reset" : order.command.front();
    s = gpus_->Probe(order.gpu);
  }
  out.healthy = s.ok();
  out.message = s.ok() ? done : s.message();
  base::log::Info("GPU {} remediated: {}", order.gpu,
                  s.ok() ? "healthy after " + done : s.message());
  return out;
}

std::map<int32_t, int64_t> Agent::XidCounts() {
  std::map<int32_t, int64_t> out;
  auto telemetry = gpus_->Telemetry();
  if (!telemetry.ok()) return out;
  for (const GpuTelemetry& g : *telemetry) out[g.index] = g.xid_errors;
  return out;
}

domain::Diagnosis Agent::Diagnose(const Task& t, const protocol::ShimExit& exit) {
  domain::ExitFacts f;
  f.exit_code = exit.exit_code;
  f.signal = exit.signal;
  f.stop_reason = exit.reason;
  f.staging_error = exit.staging_error;
  f.stop_requested = t.stop_requested;
  f.image = !t.assignment.run.image.empty();
  if (Limited(t)) {
    f.oom_kills = cgroups_.OomKills(CgroupName(t));
    f.memory_limit_mib = t.assignment.run.memory_mib;
  }
  // A new XID on one of its GPUs during the run (an adopted run's start is unknown: none).
  if (!t.xids_at_start.empty()) {
    auto telemetry = gpus_->Telemetry();
    if (telemetry.ok()) {
      for (const GpuTelemetry& g : *telemetry) {
        const bool mine =
            std::any_of(t.assignment.devices.begin(), t.assignment.devices.end(),
                        [&](const protocol::DeviceGrant& d) { return d.gpu == g.index; });
        auto before = t.xids_at_start.find(g.index);
        if (mine && before != t.xids_at_start.end() && g.xid_errors > before->second) {
          f.xid = g.last_xid;
        }
      }
    }
  }
  // The end of its output, where frameworks say what went wrong.
  constexpr int64_t kTail = 8 * 1024;
  const std::string path = t.dir + "/output.log";
  const int64_t size = FileSize(path);
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::max<int64_t>(0, size - kTail));
  f.output_tail.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return domain::Diagnose(f);
}

std::vector<protocol::TaskReport> Agent::Reports() const {
  std::vector<protocol::TaskReport> out;
  for (const auto& [key, t] : tasks_) {
    if (t.gone) continue;
    protocol::TaskReport r;
    r.job = t.job;
    r.report.task = t.index;
    r.report.generation = t.generation;
    const bool exited = t.state == "Exited";
    r.report.state =
        exited ? domain::TaskStatus::State::kExited : domain::TaskStatus::State::kRunning;
    r.report.restarts = t.restarts;
    if (exited) {
      r.report.exit_code = t.exit_code;
      r.report.cause = t.cause;
    }
    r.report.message = t.message;
    r.staging = StagingOf(t);
    r.sharing = t.sharing;  // of the run, however short: said once, while it is still assigned
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<GpuTelemetry> Agent::Telemetry() {
  if (auto* sim = dynamic_cast<SimulatedGpus*>(gpus_.get())) {
    // Simulated GPUs are as busy as what runs on them says.
    auto inventory = sim->Inventory();
    std::map<int32_t, std::pair<double, int64_t>> load;
    for (const auto& [key, t] : tasks_) {
      if (t.state != "Running") continue;
      const double util = t.assignment.run.simulate_utilization;
      for (const protocol::DeviceGrant& d : t.assignment.devices) {
        const int32_t g = d.gpu;
        if (g < 0 || !inventory.ok() || g >= static_cast<int32_t>(inventory->size())) continue;
        const double share = d.milli / 1000.0;
        const int64_t mem = d.memory_mib > 0
                                ? d.memory_mib
                                : static_cast<int64_t>((*inventory)[g].memory_mib * share * util);
        load[g].first += util * share;
        load[g].second += mem;
      }
    }
    if (inventory.ok()) {
      for (const GpuInfo& g : *inventory) {
        auto it = load.find(g.index);
        (void)sim->SetLoad(g.index, it == load.end() ? 0 : std::min(1.0, it->second.first),
                           it == load.end() ? 0 : it->second.second);
      }
    }
  }
  auto telemetry = gpus_->Telemetry();
  return telemetry.ok() ? std::move(*telemetry) : std::vector<GpuTelemetry>{};
}

void Agent::UploadLogs() {
  for (auto& [key, t] : tasks_) {
    if (t.dir.empty()) continue;
    const std::string path = t.dir + "/output.log";
    for (int rounds = 0; rounds < 8; ++rounds) {
      const int64_t size = FileSize(path);
      if (size <= t.uploaded) break;
      std::ifstream in(path, std::ios::binary);
      in.seekg(t.uploaded);
      std::string chunk(static_cast<size_t>(std::min(kUploadChunk, size - t.uploaded)), '\0');
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      chunk.resize(static_cast<size_t>(in.gcount()));
      const std::string target =
          "/api/v1/agents/" + o_.node + "/logs?job=" + std::to_string(t.job) +
          "&task=" + std::to_string(t.index) + "&generation=" + std::to_string(t.generation) +
          "&offset=" + std::to_string(t.uploaded);
      auto r = client_.Raw("POST", target, chunk, "application/octet-stream");
      if (r.ok() && (r->status == 403 || r->status == 404)) {
        // The server will never take it (the job is gone, or the run is no longer known as this
        // node's, after a server restart): drop it, so that the task's folder can go.
        std::fprintf(
            stderr, "meridian agent: output of %s not kept by the server: %s\n",
            TaskDirName(t.job, t.index, t.generation).c_str(),
            cli::ErrorMessage(cli::Response{r->status, Json::parse(r->body, nullptr, false)})
                .c_str());
        t.uploaded = size;
        break;
      }
      if (!r.ok() || r->status != 200) break;
      const Json answer = Json::parse(r->body, nullptr, false);
      if (!answer.is_object() || !answer.contains("size")) break;
      const int64_t now_has = answer.at("size").get<int64_t>();
      if (answer.value("full", false)) {
        t.uploaded = size;  // the server keeps no more of it
        break;
      }
      if (now_has == t.uploaded) break;  // refused: try again next round
      t.uploaded = now_has;
    }
  }
}

void Agent::Cleanup() {
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Task& t = it->second;
    if (t.gone && (t.dir.empty() || FileSize(t.dir + "/output.log") <= t.uploaded)) {
      RemoveFolder(t);
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
}

// Named after the node too: several agents may share a machine (the dev estate, tests).
std::string Agent::CgroupName(const Task& t) const {
  return (cgroup_prefix_.empty() ? o_.node : cgroup_prefix_) + "." +
         TaskDirName(t.job, t.index, t.generation);
}

// Containers get their limits from their runtime.
bool Agent::Limited(const Task& t) const {
  return cgroups_.version() != Cgroups::Version::kNone && t.assignment.run.image.empty();
}

void Agent::RenewLease(double sent_at, LeaseValues values) {
  const std::string path = o_.work_dir + "/lease";
  lease_renewed_at_ = std::max(lease_renewed_at_, sent_at);
  struct timespec times[2];
  times[0].tv_sec = static_cast<time_t>(lease_renewed_at_);
  times[0].tv_nsec = static_cast<long>((lease_renewed_at_ - std::floor(lease_renewed_at_)) * 1e9);
  times[1] = times[0];
  struct stat st;
  const bool changed = lease_written_ != std::make_pair(lease_, fence_grace_);
  if ((values == LeaseValues::kWrite && changed) || ::stat(path.c_str(), &st) != 0) {
    // Written and dated before it replaces the old one: a shim never sees it undated.
    protocol::LeaseTerms lease{lease_, std::nullopt};
    if (fence_grace_ >= 0) lease.fence_grace = fence_grace_;
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << protocol::ToJson(lease).dump() << "\n";
    ::utimensat(AT_FDCWD, tmp.c_str(), times, 0);
    std::rename(tmp.c_str(), path.c_str());
    if (values == LeaseValues::kWrite) lease_written_ = {lease_, fence_grace_};
    return;
  }
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

}  // namespace meridian::agent
