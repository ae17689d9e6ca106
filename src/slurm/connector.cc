#include "slurm/connector.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "base/dir_lock.h"
#include "base/files.h"
#include "base/log.h"
#include "base/version.h"
#include "slurm/job_files.h"

namespace meridian::slurm {

using base::Status;
namespace fs = std::filesystem;

namespace {

// Slurm's units for a task's shape: whole CPUs, as --cpus-per-task asks, and MiB, as --mem.
int64_t SlurmCpus(int64_t cpu_milli) { return std::max<int64_t>(1, (cpu_milli + 999) / 1000); }
int64_t SlurmMemoryMib(int64_t memory_mib) { return std::max<int64_t>(1, memory_mib); }

// Writes whole or not at all, as the connector's own file (WriteFileAs), with `mode`.
bool WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  return WriteFileAs(path, content, ::geteuid(), ::getegid(), mode).ok();
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// "SIGUSR1" -> "USR1", as scancel and sbatch want it; "" for none.
std::string SignalName(const std::string& notice) {
  if (notice.empty() || notice == "none") return "";
  return notice.rfind("SIG", 0) == 0 ? notice.substr(3) : notice;
}

// A wait status as the exit code a task's runner reports: the code, or 128 + the signal.
int64_t ExitCodeOf(int64_t wait_status) {
  const int64_t signal = wait_status & 0x7f;
  return signal != 0 ? 128 + signal : (wait_status >> 8) & 0xff;
}

// A run of one task runs it in the job's batch step, without srun: Slurm launches one step per
// job rather than two, which is what limits how fast a busy cluster starts jobs (on this
// machine, 25 jobs/s through srun against 35-80 without; docs/benchmarks.md). The batch step
// has the job's GPUs (CUDA_VISIBLE_DEVICES), CPUs and memory on its node, which are the task's.
// Its notice then goes to the batch shell alone (--signal=B:, scancel --batch), which passes it
// on to every process of its task (Slurm signals either the batch shell alone or every process
// of the step, where a step's tasks are signalled each). The run's folder records it
// (kBatchStepFile), so that a run is signalled as it was started, across restarts and upgrades.
bool InBatchStep(size_t tasks) { return tasks == 1; }
constexpr char kBatchStepFile[] = "batch-step";

// The folder of a run's folder that its job writes in (its tasks' output, exit codes and
// restarts, Slurm's own output; its working directory unless it names one). The connector makes
// it and gives it to the job's user (--run-as); the rest of the run's folder stays the
// connector's (its script, its Slurm job ID), which the job may read and not change.
constexpr char kJobFolder[] = "job";
// In a run's folder: its job writes in kJobFolder (a run of an older connector, without it,
// wrote in the run's folder itself).
constexpr char kJobFolderFile[] = "job-folder";
// Entries a round's clean-up removes at most (RemoveTree): a job that leaves millions of files
// does not hold the heartbeats.
constexpr int64_t kCleanupBudget = 50000;
constexpr int kMaxRemovalRounds = 100;
// How long after a run ended its output is still uploaded before its folder goes regardless
// (the server keeps 64 MiB of a run, a MiB a round: about a minute).
constexpr double kUploadAfterEnd = 300;

// What the batch shell of a task run there (InBatchStep) takes as an order to SIGKILL every
// process of its task and itself. Slurm has no immediate SIGKILL for a batch step's children: a
// SIGKILL to the job, to the batch shell or to the whole step becomes its stop (SIGTERM, then
// SIGKILL after KillWait, 30 s by default). Neither Slurm nor a job sends it to the batch shell;
// a wrapper that has not set its trap yet is ended by it all the same (its default action),
// before its task starts.
constexpr char kKillOrder[] = "XCPU";

// Shell functions of the wrapper of a task run in the batch step: its task's processes (the
// task and all that descend from it, whatever their process group or session: torchrun starts
// its workers in sessions of their own), found from their parents as Slurm's proctrack/linuxproc
// finds a step's, and by the mark every process of the task inherits in its environment
// (__meridian_run: this job and wrapper), which finds those that left the tree too (a worker
// whose launcher ended first passes to init), and which a reused PID does not carry; with this
// job's SLURM_JOB_ID beside it, as a Slurm job that the task submits inherits the mark but not
// the job ID (tools such as submitit do, and its processes on this node are not the task's); from
// one look at the process table (a task that keeps starting children would never let a walk that
// looks again end); and a SIGKILL of them all that first stops them until a walk from every process
// seen so far finds none new, so that none forks away, and none is lost when its parent dies and it
// passes to init. The walks ignore SIGTERM (ps inherits that): a SIGTERM from Slurm would otherwise
// end one half-way.
constexpr char kTaskTreeFunctions[] =
    "__meridian_tree() {\n"
    "  local all=\" \" more=1 i j\n"
    "  for i in \"$@\"; do case \"$all\" in *\" $i \"*) ;; *) all=\"$all$i \" ;; esac; done\n"
    "  local -a pids ppids\n"
    "  while read -r i j; do pids+=(\"$i\") ppids+=(\"$j\"); done < <(export -n __meridian_run;"
    " ps -e -o pid=,ppid= 2>/dev/null)\n"
    "  while [ -n \"$more\" ]; do\n"
    "    more=\n"
    "    for i in \"${!pids[@]}\"; do\n"
    "      case \"$all\" in *\" ${pids[i]} \"*) continue ;; esac\n"
    "      case \"$all\" in *\" ${ppids[i]} \"*) all=\"$all${pids[i]} \" more=1 ;; esac\n"
    "    done\n"
    "  done\n"
    "  echo $all\n"
    "}\n"
    "__meridian_marked() {\n"
    "  local m=\"__meridian_run=$__meridian_run\" j=\"SLURM_JOB_ID=${SLURM_JOB_ID:-0}\"\n"
    "  (export -n __meridian_run; printf '%s\\0' /proc/[0-9]*/environ |"
    " xargs -0 grep -lsxzF -e \"$m\" | xargs -r grep -lsxzF -e \"$j\" | cut -d/ -f3)\n"
    "}\n"
    "__meridian_killtree() {\n"
    "  local seen=\"$*\" now n=0\n"
    "  while [ \"$n\" -lt 20 ]; do\n"
    "    n=$((n + 1))\n"
    "    now=$(trap '' TERM; __meridian_tree $seen $(__meridian_marked))\n"
    "    [ -n \"$now\" ] || break\n"
    "    kill -STOP $now 2>/dev/null\n"
    "    [ \"$now\" = \"$seen\" ] && break\n"
    "    seen=$now\n"
    "  done\n"
    "  kill -KILL $seen 2>/dev/null\n"
    "}\n";

bool Runs(const std::string& state) {
  return state == "RUNNING" || state == "COMPLETING" || state == "SUSPENDED";
}

}  // namespace

const std::map<std::string, std::string>& DefaultGpuModels() {
  static const std::map<std::string, std::string> kModels = {{"a100", "A100-80GB"},
                                                             {"a100_80gb", "A100-80GB"},
                                                             {"a100-80gb", "A100-80GB"},
                                                             {"a100_40gb", "A100-40GB"},
                                                             {"a100-40gb", "A100-40GB"},
                                                             {"h100", "H100-80GB"},
                                                             {"h200", "H200-141GB"},
                                                             {"t4", "T4"},
                                                             {"v100", "V100"},
                                                             {"p100", "P100"},
                                                             {"a10", "A10"},
                                                             {"l4", "L4"},
                                                             {"l40s", "L40S"}};
  return kModels;
}

SlurmConnector::SlurmConnector(ConnectorOptions options)
    : o_(std::move(options)),
      // A command that hangs (slurmctld gone: Slurm's clients retry for MessageTimeout) must not
      // hold the heartbeats past the time Slurm may be silent.
      slurm_(o_.slurm_conf, std::clamp(o_.slurm_timeout / 2, 1.0, 20.0)) {
  for (const auto& [type, model] : DefaultGpuModels()) o_.gpu_models.emplace(type, model);
  o_.server.keep_connection = true;
  if (o_.instance.empty()) o_.instance = o_.cluster;
  // The connector's own user, once: its name and home as the host knows them, the group it runs
  // as (whatever its passwd entry says).
  const uint32_t uid = ::geteuid();
  own_ = UserByUid(uid).value_or(JobUser{std::to_string(uid), uid, 0, "/"});
  own_.gid = ::getegid();
  sbatch_env_ = SbatchEnv();
}

std::string SlurmConnector::RunDir(const RunTag& tag) const {
  return o_.work_dir + "/runs/" + std::to_string(tag.job) + "-" + std::to_string(tag.generation);
}

std::string SlurmConnector::TaskFile(const RunState& run, int32_t task, const char* ext) const {
  return (run.files.empty() ? RunDir(run.tag) : run.files) + "/task-" + std::to_string(task) + ext;
}

Status SlurmConnector::LoadRuns() {
  std::error_code ec;
  fs::create_directories(o_.work_dir + "/runs", ec);
  if (ec) return Status::Io("--work-dir " + o_.work_dir + ": " + ec.message());
  // The jobs' users pass through to their folders; they may not list the runs.
  chmod((o_.work_dir + "/runs").c_str(), 0711);
  fs::create_directories(o_.work_dir + "/credentials", ec);
  chmod((o_.work_dir + "/credentials").c_str(), 0700);
  for (const auto& entry : fs::directory_iterator(o_.work_dir + "/runs", ec)) {
    const std::string name = entry.path().filename();
    auto parsed = ParseTagName("meridian-" + name);
    std::error_code missing;
    if (!parsed || !parsed->instance.empty() || !fs::exists(entry.path() / "slurm-job", missing)) {
      continue;
    }
    RunState& run = runs_[parsed->tag];
    run.tag = parsed->tag;
    run.submitted = true;
    const std::string id = base::ReadWholeFile(entry.path() / "slurm-job");
    run.slurm_id = id.empty() ? 0 : std::atoll(id.c_str());
    // Until squeue says otherwise: gone (it ended long ago), never submitted again. With no ID,
    // sbatch never answered the life before: taken or not, it is looked for by name in squeue
    // and given back if it never shows (GiveBackStuck), not reported as ended.
    run.slurm_state = run.slurm_id > 0 ? "GONE" : "SUBMITTING";
    run.launch =
        fs::exists(entry.path() / kBatchStepFile, missing) ? Launch::kBatchStep : Launch::kSrun;
    // The job's folder is the connector's entry in a folder of its own: its owner is the job's
    // user, whatever the job did inside it.
    const std::string files = (entry.path() / kJobFolder).string();
    struct stat st {};
    if (fs::exists(entry.path() / kJobFolderFile, missing) && ::lstat(files.c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode)) {
      run.files = files;
      if (st.st_uid != own_.uid) {
        // Its name as squeue shows it; a user this host no longer knows keeps its uid, and
        // OtherUsers leaves it out of what is asked (its run left as it was).
        run.user = UserByUid(st.st_uid).value_or(
            JobUser{std::to_string(st.st_uid), st.st_uid, st.st_gid, "/"});
      }
    } else {
      // An older connector's: closed to the users its jobs may run as now.
      chmod(entry.path().c_str(), 0700);
    }
    if (run.slurm_id <= 0) run.pending_since = base::WallClockNow();
  }
  return Status::Ok();
}

std::map<std::string, SlurmConnector::NodeUse> SlurmConnector::MeridianUse() const {
  std::map<std::string, NodeUse> out;
  for (const auto& [tag, run] : runs_) {
    const bool holds = !run.submitted || IsActiveState(run.slurm_state);
    for (const auto& [index, task] : run.tasks) {
      NodeUse& use = out[task.node];
      if (holds) {
        for (const protocol::DeviceGrant& d : task.assignment.devices) use.devices.insert(d.gpu);
      }
      if (Runs(run.slurm_state)) {
        const protocol::TaskRun& shape = task.assignment.run;
        use.running.gpus += static_cast<int32_t>(task.assignment.devices.size());
        use.running.cpus += static_cast<int32_t>(SlurmCpus(shape.cpu_milli));
        use.running.memory_mib += SlurmMemoryMib(shape.memory_mib);
      }
    }
  }
  return out;
}

bool SlurmConnector::HeardFromAll(const RunState& run) const {
  auto heard = [&](const std::string& node) {
    auto link = links_.find(node);
    return link != links_.end() && link->second.heard;
  };
  if (run.tasks.empty()) {
    return !links_.empty() &&
           std::all_of(links_.begin(), links_.end(), [](const auto& l) { return l.second.heard; });
  }
  return std::all_of(run.tasks.begin(), run.tasks.end(),
                     [&](const auto& t) { return heard(t.second.node); });
}

protocol::Registration SlurmConnector::RegistrationOf(const SlurmNode& n, const Held& foreign,
                                                      const std::set<int32_t>& ours) const {
  protocol::Registration r;
  r.node = o_.node_prefix + n.name;
  r.cluster = o_.cluster;
  r.address = n.address.empty() ? n.name : n.address;
  r.cpu_milli = std::max<int64_t>(1, n.cpus) * 1000;
  r.memory_mib = std::max<int64_t>(1, n.memory_mib);
  r.unmanaged_cpu_milli = std::min<int64_t>(r.cpu_milli, int64_t{foreign.cpus} * 1000);
  r.unmanaged_memory_mib = std::min<int64_t>(r.memory_mib, foreign.memory_mib);
  r.agent_version = std::string("slurm-connector ") + base::Version();
  r.unavailable = n.Unavailable();
  auto model = o_.gpu_models.find(n.gpu_type);
  for (int32_t i = 0; i < n.gpus && model != o_.gpu_models.end(); ++i) {
    protocol::GpuInventory g;
    g.index = i;
    g.uuid = "slurm-" + o_.cluster + "-" + n.name + "-gpu" + std::to_string(i);
    g.model = model->second;
    r.gpus.push_back(g);
  }
  // Slurm chooses the devices of its jobs itself: what Meridian counts as taken is a number of
  // GPUs, the highest indices that Meridian's own runs do not hold.
  int32_t held = foreign.gpus;
  for (auto g = r.gpus.rbegin(); g != r.gpus.rend() && held > 0; ++g) {
    if (ours.count(g->index)) continue;
    g->unmanaged = "held by a Slurm job submitted outside Meridian";
    --held;
  }
  return r;
}

void SlurmConnector::Sync(const std::vector<SlurmNode>& nodes) {
  std::set<std::string> present;
  const std::map<std::string, NodeUse> ours = MeridianUse();
  // Not while a run found again after a restart has no tasks known yet: its GPUs would count as
  // foreign, and the re-registration would stop it.
  const bool all_known = std::none_of(runs_.begin(), runs_.end(), [](const auto& r) {
    return r.second.tasks.empty() && IsActiveState(r.second.slurm_state);
  });
  for (const SlurmNode& n : nodes) {
    if (!o_.partitions.empty() &&
        std::none_of(n.partitions.begin(), n.partitions.end(), [&](const std::string& p) {
          return std::find(o_.partitions.begin(), o_.partitions.end(), p) != o_.partitions.end();
        })) {
      continue;
    }
    if (n.gpus > 0 && !o_.gpu_models.count(n.gpu_type)) {
      base::log::Warn(
          "Slurm node {}: GRES gpu type \"{}\" has no GPU model (--gpu-model {}=MODEL);"
          " not offered to Meridian",
          n.name, n.gpu_type, n.gpu_type.empty() ? "TYPE" : n.gpu_type);
      continue;
    }
    const std::string name = o_.node_prefix + n.name;
    Link& link = links_[name];
    auto use = ours.find(name);
    const NodeUse none;
    const NodeUse& mine = use == ours.end() ? none : use->second;
    Held foreign;
    foreign.gpus = std::max(0, n.gpus_used - mine.running.gpus);
    foreign.cpus = std::max(0, n.cpus_used - mine.running.cpus);
    foreign.memory_mib = std::max<int64_t>(0, n.memory_used_mib - mine.running.memory_mib);
    if (all_known && foreign == link.foreign_seen) link.foreign = foreign;
    link.foreign_seen = foreign;
    const protocol::Registration reg = RegistrationOf(n, link.foreign, mine.devices);
    present.insert(reg.node);
    link.slurm_name = n.name;
    if (!link.client) {
      cli::ClientConfig c = o_.server;
      const std::string kept = base::ReadWholeFile(o_.work_dir + "/credentials/" + reg.node);
      if (!kept.empty()) c.token = kept.substr(0, kept.find_last_not_of(" \n") + 1);
      link.client = std::make_unique<cli::Client>(c);
    }
    if (!link.registered || protocol::ToJson(reg) != protocol::ToJson(link.registration)) {
      link.registration = reg;
      link.registered = false;
      if (Status s = Register(link); !s.ok()) {
        base::log::Warn("registering Slurm node {}: {}", n.name, s.message());
      }
    }
  }
  // A node that left Slurm (or its partitions) is no longer heartbeated: the server declares
  // it lost in time, as it would an agent's.
  for (auto it = links_.begin(); it != links_.end();) {
    it = present.count(it->first) ? std::next(it) : links_.erase(it);
  }
}

Status SlurmConnector::Register(Link& link) {
  Json body = protocol::ToJson(link.registration);
  auto r = link.client->Call("POST", "/api/v1/agents/register", &body);
  if (!r.ok()) return r.status();
  if (r->status == 401 && link.client->config().token != o_.server.token) {
    // The node's credential was revoked (or this is a new server): start again as a new node.
    std::error_code ec;
    fs::remove(o_.work_dir + "/credentials/" + link.registration.node, ec);
    link.client = std::make_unique<cli::Client>(o_.server);
    return Status(base::StatusCode::kPermissionDenied, "credential refused; registering again");
  }
  if (r->status != 200) return Status::Invalid("registration refused: " + cli::ErrorMessage(*r));
  auto answer = protocol::DecodeRegistrationAnswer(r->body);
  if (!answer.ok()) return answer.status();
  lease_ = answer->terms.lease;
  if (!answer->credential.empty()) {
    WriteFile(o_.work_dir + "/credentials/" + link.registration.node, answer->credential + "\n",
              0600);
    cli::ClientConfig c = o_.server;
    c.token = answer->credential;
    link.client = std::make_unique<cli::Client>(c);
  }
  link.registered = true;
  base::log::Info(base::log::Fields{{"node", link.registration.node}},
                  "Slurm node {} registered as {} in cluster {} with {} GPU(s){}", link.slurm_name,
                  link.registration.node, o_.cluster, link.registration.gpus.size(),
                  link.registration.unavailable.empty()
                      ? ""
                      : " (unavailable: " + link.registration.unavailable + ")");
  return Status::Ok();
}

void SlurmConnector::Observe(const std::vector<SlurmJob>& jobs, const std::set<uint32_t>& others) {
  std::map<RunTag, const SlurmJob*> seen;
  std::map<int64_t, RunTag> recorded_ids;  // of runs of other users, found by ID alone
  for (const auto& [tag, run] : runs_) {
    if (run.slurm_id > 0 && run.user) recorded_ids[run.slurm_id] = tag;
  }
  for (const SlurmJob& j : jobs) {
    if (j.name.empty()) {
      // A job of another user (SlurmCli::JobsOf): the run's only by the ID recorded for it, and
      // of the run's user (an ID Slurm gave again, after its state was lost, is someone else's).
      auto it = recorded_ids.find(j.id);
      if (it != recorded_ids.end() && runs_.at(it->second).user->name == j.user) {
        seen[it->second] = &j;
      }
      continue;
    }
    auto parsed = ParseTagName(j.name);
    if (!parsed) continue;  // foreign: Slurm's own users' work
    // Another installation's, or another connector's: foreign too. Under another name (one from
    // before instances, or under an instance since changed) a job is this connector's only when
    // it is the very Slurm job its work directory recorded for that run.
    auto known = runs_.find(parsed->tag);
    const bool recorded =
        known != runs_.end() && known->second.slurm_id > 0 && j.id == known->second.slurm_id;
    if (parsed->instance != o_.instance && !recorded) continue;
    const int64_t want = known == runs_.end() ? 0 : known->second.slurm_id;
    auto& slot = seen[parsed->tag];
    // The one this connector submitted; else (adopted) the newest of that name.
    if (!slot || j.id == want || (slot->id != want && j.id > slot->id)) slot = &j;
  }
  for (auto& [tag, run] : runs_) {
    auto it = seen.find(tag);
    if (it == seen.end()) {
      if (run.user && !others.count(run.user->uid)) continue;  // its user's jobs were not read
      if (run.submitted && run.slurm_id > 0 && IsActiveState(run.slurm_state)) {
        run.slurm_state = "GONE";  // it ended and aged out of squeue between two looks
      }
      continue;
    }
    run.slurm_id = it->second->id;
    run.slurm_nodes = it->second->nodes;
    run.slurm_state = it->second->state;
    run.slurm_reason = it->second->reason;
    run.wait_status = it->second->exit_code;
    run.ran = run.ran || Runs(run.slurm_state) ||
              (!IsActiveState(run.slurm_state) && run.give_back_why.empty());
    if (!run.give_back_why.empty() && run.slurm_state == "CANCELLED" && !run.ran) {
      run.given_back = run.give_back_why;  // cancelled while still pending: nothing of it ran
    }
    if (run.slurm_state != "PENDING") {
      run.pending_since = 0;
    } else if (run.pending_since == 0) {
      run.pending_since = base::WallClockNow();
    }
  }
  for (const auto& [tag, job] : seen) {
    if (runs_.count(tag)) continue;
    // A run of Meridian's that this connector does not know: an earlier life's, whose folder is
    // gone, or another connector's. Kept if an answer lists it, fenced otherwise.
    RunState& run = runs_[tag];
    run.tag = tag;
    run.submitted = true;
    run.slurm_id = job->id;
    run.slurm_nodes = job->nodes;
    run.slurm_state = job->state;
    run.slurm_reason = job->reason;
    run.wait_status = job->exit_code;
  }
}

std::vector<protocol::TaskReport> SlurmConnector::ReportsFor(const std::string& node) const {
  std::vector<protocol::TaskReport> out;
  for (const auto& [tag, run] : runs_) {
    for (const auto& [index, task] : run.tasks) {
      if (task.node != node) continue;
      protocol::TaskReport t;
      t.job = tag.job;
      domain::TaskReport& r = t.report;
      r.task = index;
      r.generation = tag.generation;
      r.state = domain::TaskStatus::State::kExited;
      if (!run.refused.empty()) {
        r.cause = domain::FailureCause::kNotStarted;
        r.message = run.refused;
        out.push_back(t);
        continue;
      }
      if (!run.given_back.empty()) {
        r.refused = true;
        r.message = run.given_back;
        out.push_back(t);
        continue;
      }
      if (run.in_flight) continue;  // being submitted: still Placed
      if (!run.submitted) {
        if (!run.stop) continue;  // not submitted yet
        r.message = "stopped before it was submitted to Slurm";
        out.push_back(t);
        continue;
      }
      const std::string code =
          ReadJobFile(TaskFile(run, index, ".exit"), OwnerOf(run), 0, 64).value_or("");
      if (run.slurm_state == "SUBMITTING") continue;  // not known to Slurm yet: still Placed
      const bool ended = !IsActiveState(run.slurm_state);
      // Restarts in place so far, and why the last one came ("N why", from the wrapper).
      // The task may write there too (its folder is its user's): its first line only, at most
      // 200 bytes.
      std::string restarted =
          ReadJobFile(TaskFile(run, index, ".restarts"), OwnerOf(run), 0, 200).value_or("");
      if (!restarted.empty()) {
        restarted = restarted.substr(0, restarted.find('\n'));
        const size_t space = restarted.find(' ');
        r.restarts = std::max<int64_t>(0, std::atoll(restarted.c_str()));
        restarted = space == std::string::npos ? "" : restarted.substr(space + 1);
      }
      if (code.empty() && !ended) {
        if (!Runs(run.slurm_state)) continue;  // pending in Slurm: still Placed
        r.state = domain::TaskStatus::State::kRunning;
        r.message = restarted.empty()
                        ? "Slurm job " + std::to_string(run.slurm_id) + " on " + run.slurm_state
                        : restarted;
        out.push_back(t);
        continue;
      }
      if (!code.empty()) {
        r.exit_code = std::atoll(code.c_str());
      } else if (run.slurm_state != "GONE") {
        r.exit_code = ExitCodeOf(run.wait_status);
      }
      const std::string& s = run.slurm_state;
      r.message =
          "Slurm job " + std::to_string(run.slurm_id) + " " +
          (s == "GONE" ? std::string("ended (no longer in squeue)") : s) +
          (run.slurm_reason.empty() || run.slurm_reason == "None" ? ""
                                                                  : " (" + run.slurm_reason + ")");
      const int64_t c = r.exit_code.value_or(-1);
      if (s == "TIMEOUT" || s == "DEADLINE") {
        r.cause = domain::FailureCause::kRuntimeLimit;
      } else if (s == "OUT_OF_MEMORY") {
        r.cause = domain::FailureCause::kOomKilled;
      } else if (s == "NODE_FAIL" || s == "BOOT_FAIL") {
        r.cause = domain::FailureCause::kNodeLost;
      } else if (run.stop) {
        r.cause = domain::FailureCause::kNone;
      } else if (s == "CANCELLED") {
        r.cause = domain::FailureCause::kSignal;
        r.message += ": cancelled in Slurm, not by Meridian";
      } else if (c == 0) {
        r.cause = domain::FailureCause::kNone;
      } else if (c == 127) {
        r.cause = domain::FailureCause::kCommandNotFound;
      } else if (c == 126) {
        r.cause = domain::FailureCause::kPermissionDenied;
      } else if (c > 128 || c < 0) {
        r.cause = domain::FailureCause::kSignal;
      } else {
        r.cause = domain::FailureCause::kExitCode;
      }
      out.push_back(t);
    }
  }
  return out;
}

void SlurmConnector::Beat(Link& link) {
  link.heard = false;
  if (!link.registered) return;
  protocol::Heartbeat beat;
  beat.tasks = ReportsFor(link.registration.node);
  beat.notices = link.notices;
  Json body = protocol::ToJson(beat);
  // A server that does not answer must not hold the round past the lease: the call waits no
  // longer than the lease has left (the lease is enforced between the nodes' heartbeats), and at
  // most 10 s; at least half a second, to be answered at all.
  const double left =
      server_seen_at_ > 0 ? server_seen_at_ + lease_ - base::WallClockNow() : lease_;
  link.client->SetReadTimeout(std::clamp(left, 0.5, 10.0));
  auto r =
      link.client->Call("POST", "/api/v1/agents/" + link.registration.node + "/heartbeat", &body);
  link.client->SetReadTimeout(o_.server.read_timeout);  // registrations, log uploads
  if (!r.ok()) return;
  if (r->status == 404 || r->status == 401) {
    link.registered = false;  // forgotten or revoked: register again next round
    if (r->status == 401) {
      std::error_code ec;
      fs::remove(o_.work_dir + "/credentials/" + link.registration.node, ec);
      link.client = std::make_unique<cli::Client>(o_.server);
    }
    return;
  }
  if (r->status != 200) {
    base::log::Warn("heartbeat of {} refused: {}", link.registration.node, cli::ErrorMessage(*r));
    return;
  }
  link.notices.erase(link.notices.begin(),
                     link.notices.begin() + static_cast<std::ptrdiff_t>(beat.notices.size()));
  auto terms = protocol::DecodeTerms(r->body);
  if (terms.ok()) lease_ = terms->lease;
  link.heard = true;
  server_seen_at_ = base::WallClockNow();
  answered_at_[link.registration.node] = server_seen_at_;
  for (const protocol::DecodedAssignment& d : protocol::DecodeAssignments(r->body)) {
    if (!d.assignment.ok()) {
      base::log::Warn("an assignment to {} does not decode: {}", link.registration.node,
                      d.assignment.status().message());
      continue;
    }
    const protocol::Assignment& a = *d.assignment;
    RunState& run = runs_[RunTag{a.job, a.generation}];
    run.tag = RunTag{a.job, a.generation};
    run.listed = true;
    TaskState& task = run.tasks[a.task];
    task.assignment = a;
    task.node = link.registration.node;
    if (a.stop) run.stop = true;
  }
}

SlurmConnector::Outcome SlurmConnector::Submit(const Order& order) const {
  Outcome out;
  out.tag = order.tag;
  const protocol::Assignment& first = order.tasks.begin()->second.assignment;
  const JobUser* user = UserOf(first.project);
  if (!run_as_.empty() && !user) {
    out.refused = "project " + first.project +
                  " has no user to run as on this Slurm cluster (its connector's --run-as)";
    return out;
  }
  const JobUser& runs_as = user ? *user : own_;
  const std::string dir = RunDir(order.tag);
  const std::string files = dir + "/" + kJobFolder;  // made once nothing refuses the run
  // The tasks on each Slurm node, the same number on each (--ntasks-per-node), all of one shape
  // (--gpus-per-task, --cpus-per-task; --mem per node). Slurm lays the tasks out node by node
  // and binds each task's GPUs; the script below finds its Meridian task from its node and its
  // local rank there.
  std::map<std::string, std::vector<int32_t>> on_node;  // Slurm node -> its tasks, in order
  std::string nodelist, cases;
  size_t gpus = 0;
  int64_t cpu_milli = 0, memory_mib = 0;
  for (const auto& [index, task] : order.tasks) {
    auto name = order.slurm_names.find(task.node);
    const std::string slurm_name = name == order.slurm_names.end() ? task.node : name->second;
    std::vector<int32_t>& here = on_node[slurm_name];
    if (here.empty()) nodelist += (nodelist.empty() ? "" : ",") + slurm_name;
    cases += "  " + Quote(slurm_name + ":" + std::to_string(here.size())) +
             ") __meridian_i=" + std::to_string(index) + " __meridian_node=" + Quote(task.node) +
             " ;;\n";
    here.push_back(index);
    gpus = std::max(gpus, task.assignment.devices.size());
    cpu_milli = std::max(cpu_milli, task.assignment.run.cpu_milli);
    memory_mib = std::max(memory_mib, task.assignment.run.memory_mib);
  }
  const size_t per_node = on_node.begin()->second.size();
  for (const auto& [slurm_name, here] : on_node) {
    if (here.size() == per_node) continue;
    std::string layout;
    for (const auto& [name, tasks] : on_node) {
      layout += (layout.empty() ? "" : ", ") + name + ": " + std::to_string(tasks.size());
    }
    // Nothing Meridian can see tells it so when it places: given back to its queue (with the
    // back-off of any refusal), where a later placement may lay it out evenly.
    out.given_back = "tasks spread unevenly over Slurm nodes (" + layout +
                     "): Slurm runs as many tasks of a job on each of its nodes";
    return out;
  }
  const protocol::TaskRun& spec = first.run;
  if (!spec.image.empty()) {
    out.refused = "image " + spec.image + ": the Slurm back end runs commands, not images";
    return out;
  }
  if (spec.command.empty()) {
    out.refused = "the job has no command";
    return out;
  }
  std::string command;
  for (const std::string& w : spec.command) command += (command.empty() ? "" : " ") + Quote(w);
  std::map<std::string, std::string> env = spec.env;
  env["MERIDIAN_JOB_ID"] = std::to_string(order.tag.job);
  env["MERIDIAN_JOB_NAME"] = first.name;
  env["MERIDIAN_PROJECT"] = first.project;
  env["MERIDIAN_WORLD_SIZE"] = std::to_string(first.world_size);
  env["MERIDIAN_MASTER_ADDR"] = first.master_addr;
  env["MERIDIAN_GENERATION"] = std::to_string(order.tag.generation);
  env["MERIDIAN_RESTART"] = "0";
  if (first.array_id > 0) {
    env["MERIDIAN_ARRAY_JOB_ID"] = std::to_string(first.array_id);
    env["MERIDIAN_ARRAY_INDEX"] = std::to_string(first.array_index);
  }
  const std::string notice = SignalName(spec.notice_signal);
  const bool in_batch = InBatchStep(order.tasks.size());
  // The job's environment first; the wrapper's own variables after, under names no job uses,
  // so that a job's R or i cannot move its output or its exit code.
  std::string script = "#!/bin/bash\n# Meridian job " + std::to_string(order.tag.job) +
                       ", generation " + std::to_string(order.tag.generation) +
                       " (written by meridian slurm-connector).\n";
  for (const auto& [k, v] : env) {
    const bool name = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                      std::all_of(k.begin(), k.end(),
                                  [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!name || k.rfind("__meridian", 0) == 0) {
      out.refused = "env: \"" + k + "\" is not a variable name the Slurm back end can set";
      return out;
    }
    script += "export " + k + "=" + Quote(v) + "\n";
  }
  script += "__meridian_r=" + Quote(files) +
            "\n"
            "case \"$SLURMD_NODENAME:$SLURM_LOCALID\" in\n" +
            cases +
            "  *) echo \"meridian: task $SLURM_LOCALID on $SLURMD_NODENAME is not one of this run\""
            " >&2; exit 125 ;;\n"
            "esac\n"
            "export MERIDIAN_TASK_INDEX=$__meridian_i MERIDIAN_NODE=$__meridian_node\n";
  if (!spec.working_dir.empty()) {
    script += "cd " + Quote(spec.working_dir) + " || exit 125\n";
  }
  // The wrapper outlives the task's signals (its notice, Slurm's SIGTERM) to write its exit code,
  // and remembers them: a task told to stop is not started again. restartPolicy on-failure
  // restarts a failed task in place, as an agent does: after 1, 2, 4 ... 60 s, at most
  // maxRestarts times; each restart, once made, is written to task-I.restarts ("N why") for the
  // connector to report. Waits are a second at a time, so that a stop ends one at once. A wait
  // for the task that a signal cut short is made again: bash keeps the status of a child that
  // ended meanwhile. In the batch step (InBatchStep) the notice comes to this shell alone, which
  // passes it on to every process of the task, as srun would to a step's.
  const int64_t max_restarts = spec.restart.on_failure ? spec.restart.max_restarts : 0;
  const std::string cap = std::to_string(domain::kMaxRestartBackoffSeconds);
  script +=
      "__meridian_stop= __meridian_n=0 __meridian_rc=143 __meridian_b=0 __meridian_child=\n"
      "__meridian_t=\"$__meridian_r/task-$__meridian_i\"\n"
      "trap __meridian_stop=1 TERM\n";
  if (!notice.empty() && !in_batch) script += "trap __meridian_stop=1 " + notice + "\n";
  if (in_batch) {
    // The traps only note what came while the task is being started (its PID not known yet);
    // __meridian_act carries it out once it is. A kill order with no task running ends the
    // wrapper at once; a notice then stops it (no task is started again). What a task leaves
    // running when it ends is killed, as Slurm kills what is left of a step.
    script += kTaskTreeFunctions;
    script +=
        "__meridian_kill= __meridian_tell= __meridian_starting=\n"
        "export __meridian_run=\"${SLURM_JOB_ID:-0}.$$\"\n"
        "__meridian_act() {\n"
        "  [ -n \"$__meridian_starting\" ] && return 0\n"
        "  if [ -n \"$__meridian_kill\" ]; then\n"
        "    __meridian_killtree $__meridian_child\n"
        "    kill -KILL $$\n"
        "  fi\n" +
        (notice.empty() ? std::string()
                        : "  if [ -n \"$__meridian_tell\" ] && [ -n \"$__meridian_child\" ]; then\n"
                          "    local pids=$(trap '' TERM; __meridian_tree \"$__meridian_child\")\n"
                          "    [ -n \"$pids\" ] && __meridian_tell= && kill -s " +
                              notice + " $pids 2>/dev/null\n  fi\n") +
        "}\n"
        "trap '__meridian_kill=1; __meridian_act' " +
        std::string(kKillOrder) + "\n";
    if (!notice.empty()) {
      script += "trap '__meridian_stop=1 __meridian_tell=1; __meridian_act' " + notice + "\n";
    }
  }
  script +=
      "while [ -z \"$__meridian_stop\" ]; do\n"
      "  if [ \"$__meridian_n\" -gt 0 ]; then\n"
      "    echo \"$__meridian_n exited with code $__meridian_rc; restarted after $__meridian_b s\""
      " > \"$__meridian_t.restarts.tmp\" &&"
      " mv \"$__meridian_t.restarts.tmp\" \"$__meridian_t.restarts\"\n"
      "  fi\n"
      "  export MERIDIAN_RESTART=$__meridian_n\n" +
      std::string(in_batch ? "  __meridian_starting=1\n" : "") + "  " + command +
      " >> \"$__meridian_t.out\" 2>&1 &\n" + "  __meridian_child=$!" +
      (in_batch ? " __meridian_starting=\n  __meridian_act" : "") +
      "\n"
      "  while :; do wait \"$__meridian_child\";"
      " kill -0 \"$__meridian_child\" 2>/dev/null || break; done\n"
      "  wait \"$__meridian_child\"; __meridian_rc=$? __meridian_child=\n" +
      std::string(in_batch ? "  [ -n \"$(__meridian_marked)\" ] && __meridian_killtree\n" : "") +
      "  if [ \"$__meridian_rc\" = 0 ] || [ -n \"$__meridian_stop\" ] ||"
      " [ \"$__meridian_n\" -ge " +
      std::to_string(max_restarts) +
      " ]; then break; fi\n"
      "  __meridian_n=$((__meridian_n + 1)) __meridian_b=1 __meridian_k=1\n"
      "  while [ \"$__meridian_k\" -lt \"$__meridian_n\" ] && [ \"$__meridian_b\" -lt " +
      cap +
      " ]; do"
      " __meridian_b=$((__meridian_b * 2)) __meridian_k=$((__meridian_k + 1)); done\n"
      "  [ \"$__meridian_b\" -gt " +
      cap + " ] && __meridian_b=" + cap +
      "\n"
      "  echo \"meridian: exited with code $__meridian_rc; restarting in $__meridian_b s\""
      " >> \"$__meridian_t.out\"\n"
      "  __meridian_k=0\n"
      "  while [ \"$__meridian_k\" -lt \"$__meridian_b\" ] && [ -z \"$__meridian_stop\" ]; do\n"
      "    sleep 1 & __meridian_s=$!\n"
      "    wait \"$__meridian_s\" || kill \"$__meridian_s\" 2>/dev/null\n"
      "    __meridian_k=$((__meridian_k + 1))\n"
      "  done\n"
      "done\n"
      "echo \"$__meridian_rc\" > \"$__meridian_t.exit.tmp\" &&"
      " mv \"$__meridian_t.exit.tmp\" \"$__meridian_t.exit\"\n"
      "exit \"$__meridian_rc\"\n";
  if (Status s = MakeRunFolder(dir, files, script, runs_as); !s.ok()) {
    base::log::Warn("run folder {}: {}", dir, s.message());
    return out;  // not submitted: again next round
  }
  std::vector<std::string> options = {
      "--job-name=" + TagName(order.tag, o_.instance),
      "--comment=meridian job " + std::to_string(order.tag.job) + " generation " +
          std::to_string(order.tag.generation) + " project " + first.project,
      "--nodes=" + std::to_string(on_node.size()),
      "--nodelist=" + nodelist,
      "--ntasks=" + std::to_string(order.tasks.size()),
      "--ntasks-per-node=" + std::to_string(per_node),
      "--cpus-per-task=" + std::to_string(SlurmCpus(cpu_milli)),
      "--mem=" + std::to_string(SlurmMemoryMib(memory_mib) * static_cast<int64_t>(per_node)) + "M",
      "--no-requeue",
      "--output=" + files + "/slurm.out",
      "--chdir=" + (spec.working_dir.empty() ? files : spec.working_dir)};
  if (runs_as.uid != own_.uid) {
    options.push_back("--uid=" + std::to_string(runs_as.uid));
    options.push_back("--gid=" + std::to_string(runs_as.gid));
  }
  if (gpus > 0) options.push_back("--gpus-per-task=" + std::to_string(gpus));
  if (!o_.partitions.empty()) options.push_back("--partition=" + o_.partitions.front());
  if (const std::string* account = ForProject(o_.accounts, first.project)) {
    options.push_back("--account=" + *account);
  }
  if (spec.runtime_limit > 0) {
    options.push_back("--time=" +
                      std::to_string(static_cast<int64_t>((spec.runtime_limit + 59) / 60)));
    if (!notice.empty()) {
      options.push_back("--signal=" + std::string(in_batch ? "B:" : "") + notice + "@" +
                        std::to_string(static_cast<int64_t>(std::max(1.0, spec.grace_period))));
    }
  }
  // Past the lease the server may have given the run to other nodes: not started (the round
  // takes it up again if the server still lists it once it answers).
  if (base::WallClockNow() >= order.deadline) return out;
  // The run is recorded before sbatch: whatever happens next, it is never submitted again.
  if (in_batch && !WriteFile(dir + "/" + kBatchStepFile, "")) {
    base::log::Warn("cannot write {}/{}", dir, kBatchStepFile);
    return out;
  }
  out.launch = in_batch ? Launch::kBatchStep : Launch::kSrun;
  if (!WriteFile(dir + "/" + kJobFolderFile, "")) {
    base::log::Warn("cannot write {}/{}", dir, kJobFolderFile);
    return out;
  }
  out.files = files;
  if (user && user->uid != own_.uid) out.user = *user;
  if (!WriteFile(dir + "/slurm-job", "")) {
    base::log::Warn("cannot write {}/slurm-job", dir);
    return out;
  }
  out.submitted = true;
  out.slurm_state = "GONE";
  ++submitted_;
  auto id = slurm_.Submit(options,
                          std::string("#!/bin/bash\nexec ") +
                              (in_batch ? "" : "srun --kill-on-bad-exit=0 ") + "/bin/bash " +
                              Quote(dir + "/task.sh") + "\n",
                          JobEnv(runs_as));
  if (!id.ok() && id.status().code() == base::StatusCode::kUnavailable) {
    // Taken or not, nobody knows yet: looked for by name in squeue, and given back if it never
    // shows (GiveBackStuck). Never submitted again.
    out.slurm_state = "SUBMITTING";
    out.pending_since = base::WallClockNow();
    base::log::Warn("job {} generation {}: {}; looking for it in squeue", order.tag.job,
                    order.tag.generation, id.status().message());
    return out;
  }
  if (!id.ok()) {
    out.refused = id.status().message();
    base::log::Warn("job {} generation {}: {}", order.tag.job, order.tag.generation, out.refused);
    return out;
  }
  WriteFile(dir + "/slurm-job", std::to_string(*id) + "\n");
  out.slurm_id = *id;
  out.slurm_state = "PENDING";
  base::log::Info(base::log::Fields{{"job", std::to_string(order.tag.job)}},
                  "job {} generation {} submitted to Slurm as job {} on {}", order.tag.job,
                  order.tag.generation, *id, nodelist);
  return out;
}

void SlurmConnector::Stop(RunState& run) {
  if (!run.submitted || run.slurm_id <= 0 || !IsActiveState(run.slurm_state)) return;
  const double now = base::WallClockNow();
  const protocol::Assignment& a = run.tasks.begin()->second.assignment;
  if (run.noticed_at == 0) {
    const double within = a.stop_within.value_or(a.run.grace_period);
    run.noticed_at = now;
    run.kill_at = now + within;
    const std::string notice = SignalName(a.run.notice_signal);
    run.term_at = notice.empty() ? now : now + within / 2;
    if (!notice.empty()) {
      Status s = run.launch == Launch::kBatchStep ? slurm_.SignalBatch(run.slurm_id, notice)
                                                  : slurm_.Cancel(run.slurm_id, notice);
      base::log::Info("job {} generation {}: {} to Slurm job {} ({}){}", run.tag.job,
                      run.tag.generation, a.run.notice_signal, run.slurm_id, a.stop_reason,
                      s.ok() ? "" : ": " + s.message());
    }
  }
  // Each step is marked done only once Slurm took it: a scancel lost to a slurmctld hiccup is
  // sent again next round.
  if (!run.termed && now >= run.term_at) run.termed = slurm_.Cancel(run.slurm_id).ok();
  // At its deadline, killed as the lease kills (a SIGKILL to the whole job would wait KillWait).
  if (!run.killed && now >= run.kill_at) run.killed = KillNow(run).ok();
}

Status SlurmConnector::KillNow(RunState& run) {
  // SIGKILL first to what runs its tasks: step 0 (the srun its batch script runs), or, through
  // its batch shell, the task run there (kBatchStep, kKillOrder); both for a run whose folder is
  // gone. Slurm's own cancel, and a SIGKILL sent to the whole job, send SIGTERM and wait its
  // KillWait (30 s by default) before SIGKILL, longer than the server waits before it runs the
  // job elsewhere. A job with no step yet has nothing to kill.
  if (run.launch != Launch::kSrun && run.slurm_state != "PENDING" && run.kill_ordered_at == 0) {
    // Slurm's cancel comes later (FollowKillOrders), should the order not have ended the job: its
    // SIGTERM, sent with the order, ended a task's launcher before the wrapper had found the
    // workers it started, which then passed to init and ran on.
    Status order = slurm_.SignalBatch(run.slurm_id, kKillOrder);
    if (!order.ok()) {
      base::log::Warn("Slurm job {}: the kill order to its batch shell: {}", run.slurm_id,
                      order.message());
      return order;  // sent again next round
    }
    run.kill_ordered_at = base::WallClockNow();
  }
  if (run.launch == Launch::kBatchStep && run.kill_ordered_at > 0) return Status::Ok();
  if (run.launch != Launch::kBatchStep) (void)slurm_.SignalStep(run.slurm_id, 0, "KILL");
  return slurm_.Cancel(run.slurm_id);
}

void SlurmConnector::FollowKillOrders() {
  const double now = base::WallClockNow();
  for (auto& [tag, run] : runs_) {
    if (run.kill_ordered_at == 0 || run.kill_cancelled || !IsActiveState(run.slurm_state) ||
        now - run.kill_ordered_at < kKillOrderTime) {
      continue;
    }
    run.kill_cancelled = slurm_.Cancel(run.slurm_id).ok();
    if (run.kill_cancelled && run.slurm_state != "COMPLETING") {
      base::log::Warn("Slurm job {} ({}) still {} {:.1f} s after its kill order: cancelled",
                      run.slurm_id, TagName(tag, o_.instance), run.slurm_state,
                      now - run.kill_ordered_at);
    }
  }
}

void SlurmConnector::EnforceLease() {
  const double now = base::WallClockNow();
  // Each node's lease, as each agent has its own: a node whose heartbeat has not been answered
  // for longer than the lease (the server silent, or the node left Slurm's partitions and is
  // heartbeated no more) may have been given up by the server, and its runs given to other
  // nodes. A run found again after a restart, its tasks not yet known, goes by the server's
  // last answer to any node.
  for (auto& [tag, run] : runs_) {
    if (run.killed || run.slurm_id <= 0 || !IsActiveState(run.slurm_state)) continue;
    double seen = server_seen_at_;
    const std::string* node = nullptr;  // the node heard from least lately
    for (const auto& [index, task] : run.tasks) {
      auto at = answered_at_.find(task.node);
      const double node_seen = at == answered_at_.end() ? server_seen_at_ : at->second;
      if (!node || node_seen < seen) {
        seen = node_seen;
        node = &task.node;
      }
    }
    if (seen <= 0 || now - seen <= lease_) continue;
    const std::string silent =
        !node ? "the server"
              : "node " + *node + (links_.count(*node) ? "" : " (out of Slurm's partitions)");
    run.killed = KillNow(run).ok();
    base::log::Warn("lease ran out: killed Slurm job {} ({}): {} not answered", run.slurm_id,
                    TagName(tag, o_.instance), silent);
    if (run.killed) {
      Notify(run, "BackendLeaseExpired",
             fmt::format("killed Slurm job {} ({}): the heartbeat of {} had not been answered "
                         "for longer than the agents' lease ({:.0f} s)",
                         run.slurm_id, TagName(tag, o_.instance), silent, lease_));
    }
  }
}

void SlurmConnector::GiveBackStuck() {
  const double now = base::WallClockNow();
  for (auto& [tag, run] : runs_) {
    if (run.listed && !run.stop && run.given_back.empty() && run.slurm_state == "SUBMITTING" &&
        now - run.pending_since >= o_.pending_timeout) {
      run.given_back = "sbatch's answer was lost and Slurm never showed the job";
      continue;  // should it show up later, it is not listed: fenced
    }
    // A reason of None: Slurm has not looked at it yet (it just took it, or came back from a
    // restart and is recovering what its nodes run).
    if (!run.listed || run.stop || run.ran || !run.give_back_why.empty() ||
        !run.given_back.empty() || run.slurm_id <= 0 || run.slurm_state != "PENDING" ||
        run.slurm_reason.empty() || run.slurm_reason == "None" || run.pending_since == 0 ||
        now - run.pending_since < o_.pending_timeout) {
      continue;
    }
    // Meridian chose free nodes; Slurm still keeps the job waiting: its own users' work took them
    // first. Cancelled before it can start, and given back.
    // Only while still pending: one that has just started is left alone. Given back once squeue
    // shows it cancelled (Observe).
    Status s = slurm_.Cancel(run.slurm_id, "", "PENDING");
    if (!s.ok()) continue;
    run.give_back_why = "Slurm kept job " + std::to_string(run.slurm_id) + " pending for " +
                        std::to_string(static_cast<int>(now - run.pending_since)) + " s (" +
                        run.slurm_reason + ")";
    base::log::Warn("job {} generation {}: {}; cancelled there, to be given back", tag.job,
                    tag.generation, run.give_back_why);
  }
}

void SlurmConnector::Act() {
  {
    // Orders no submitter has taken yet, of runs the server no longer wants started (told to
    // stop, or not listed this round): taken back, as if never handed over.
    std::lock_guard<std::mutex> lock(submit_mu_);
    std::erase_if(orders_, [&](const Order& o) {
      auto it = runs_.find(o.tag);
      if (it == runs_.end()) return true;
      if (it->second.listed && !it->second.stop) return false;
      it->second.in_flight = false;
      return true;
    });
  }
  // Runs not started yet in Slurm (being submitted, or pending there): no more than
  // kMaxUnstarted. Beyond what Slurm can start, more only wait in its queue, where its scheduler
  // passes over them (with 2,000 at once here, a third waited past --pending-timeout and were
  // given back to run again).
  size_t unstarted = 0;
  for (const auto& [tag, run] : runs_) {
    unstarted +=
        run.in_flight ||
        (run.submitted && (run.slurm_state == "PENDING" || run.slurm_state == "SUBMITTING"));
  }
  std::vector<Order> orders;
  for (auto& [tag, run] : runs_) {
    if (!run.listed || run.tasks.empty()) continue;
    if (run.stop) {
      Stop(run);  // one being submitted is stopped once its outcome is in
      continue;
    }
    const int32_t world = run.tasks.begin()->second.assignment.world_size;
    if (!run.submitted && !run.in_flight && run.refused.empty() && run.given_back.empty() &&
        run.tasks.size() == static_cast<size_t>(std::max(1, world)) && unstarted < kMaxUnstarted) {
      ++unstarted;
      run.in_flight = true;
      Order& order = orders.emplace_back(Order{tag, run.tasks, {}, server_seen_at_ + lease_});
      for (const auto& [index, task] : run.tasks) {
        auto link = links_.find(task.node);
        if (link != links_.end()) order.slurm_names[task.node] = link->second.slurm_name;
      }
    }
  }
  if (orders.empty()) return;
  queued_ += orders.size();
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    for (Order& o : orders) orders_.push_back(std::move(o));
  }
  submit_cv_.notify_all();
}

void SlurmConnector::Submitter() {
  std::unique_lock<std::mutex> lock(submit_mu_);
  while (true) {
    submit_cv_.wait(lock, [&] { return stopping_ || !orders_.empty(); });
    if (stopping_) return;  // what is left is not submitted: its folder does not say so
    Order order = std::move(orders_.front());
    orders_.pop_front();
    ++submitting_;
    lock.unlock();
    Outcome outcome = Submit(order);
    lock.lock();
    --submitting_;
    outcomes_.push_back(std::move(outcome));
  }
}

bool SlurmConnector::SubmissionsDone() {
  std::lock_guard<std::mutex> lock(submit_mu_);
  return !outcomes_.empty() && orders_.empty();
}

bool SlurmConnector::NothingOut() {
  std::lock_guard<std::mutex> lock(submit_mu_);
  return orders_.empty() && submitting_ == 0;
}

void SlurmConnector::TakeOutcomes() {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    outcomes.swap(outcomes_);
  }
  for (Outcome& o : outcomes) {
    auto it = runs_.find(o.tag);
    if (it == runs_.end()) continue;  // never: a run being submitted is kept (Cleanup)
    RunState& run = it->second;
    run.in_flight = false;
    run.refused = std::move(o.refused);
    run.given_back = std::move(o.given_back);
    if (!o.submitted) continue;  // nothing reached Slurm: again next round
    run.submitted = true;
    run.launch = o.launch;
    run.files = std::move(o.files);
    run.user = std::move(o.user);
    // squeue may have shown it already, by name: what it showed of this very job stands. Another
    // job of that name (an older one, adopted) gives way to the one sbatch made.
    if (run.slurm_id > 0 && (o.slurm_id == 0 || o.slurm_id == run.slurm_id)) continue;
    run.slurm_id = o.slurm_id;
    run.slurm_state = o.slurm_state;
    run.pending_since = o.pending_since;
    run.slurm_nodes.clear();
    run.slurm_reason.clear();
    run.wait_status = 0;
  }
}

void SlurmConnector::Fence() {
  for (auto& [tag, run] : runs_) {
    if (run.listed || run.killed) continue;
    // Only once every node it ran on has been heard from this round: a node not heard may still
    // list it. COMPLETING: it has ended, Slurm is cleaning up after it.
    if (!HeardFromAll(run) || !run.submitted || run.slurm_id <= 0 ||
        !IsActiveState(run.slurm_state) || run.slurm_state == "COMPLETING") {
      continue;
    }
    // Every task wrote its exit code: it ended by itself and was reported so, and Slurm shows the
    // job ended a moment later. Nothing of it runs, so nothing is cancelled, and no operator is
    // told of a fence that was none (with 1,000 short jobs, 2% were so "fenced").
    // Not for ever: one that Slurm still shows running 30 s after (a hung step, or a job that
    // wrote its exit codes and ran on) is fenced. By the connector's clock: the files' times are
    // the job's to set.
    const double now = base::WallClockNow();
    const RunState& of = run;  // a structured binding: not capturable before C++20's clang
    if (!run.tasks.empty() && std::all_of(run.tasks.begin(), run.tasks.end(), [&](const auto& t) {
          struct stat st {};
          return ::lstat(TaskFile(of, t.first, ".exit").c_str(), &st) == 0;
        })) {
      if (run.exits_seen_at == 0) run.exits_seen_at = now;
      if (now - run.exits_seen_at < 30) continue;
    } else {
      run.exits_seen_at = 0;
    }
    Status s = KillNow(run);
    run.killed = s.ok();  // else again next round
    const std::string what = fmt::format(
        "Slurm job {} ({}, on {}): Meridian no longer runs job {} generation {} there",
        run.slurm_id, TagName(tag, o_.instance),
        run.slurm_nodes.empty() ? "no node yet" : run.slurm_nodes, tag.job, tag.generation);
    base::log::Warn("fenced {}{}", what, s.ok() ? "" : ": " + s.message());
    if (s.ok()) Notify(run, "BackendJobFenced", "cancelled " + what);
  }
}

void SlurmConnector::Notify(const RunState& run, const std::string& reason,
                            const std::string& message) {
  constexpr size_t kMaxNotices = 32;
  Link* link = nullptr;
  if (!run.tasks.empty()) {
    auto it = links_.find(run.tasks.begin()->second.node);
    if (it != links_.end()) link = &it->second;
  }
  if (!link && !links_.empty()) link = &links_.begin()->second;
  if (!link || link->notices.size() >= kMaxNotices) return;  // the log has it
  link->notices.push_back({reason, message});
}

void SlurmConnector::UploadLogs() {
  constexpr int64_t kChunk = 1 << 20;
  for (auto& [tag, run] : runs_) {
    for (auto& [index, task] : run.tasks) {
      auto link = links_.find(task.node);
      if (link == links_.end() || !link->second.registered) continue;
      int64_t size = 0;
      auto read =
          ReadJobFile(TaskFile(run, index, ".out"), OwnerOf(run), task.uploaded, kChunk, &size);
      if (!read || read->empty() || size <= task.uploaded) continue;
      const std::string& chunk = *read;
      const std::string target =
          "/api/v1/agents/" + task.node + "/logs?job=" + std::to_string(tag.job) +
          "&task=" + std::to_string(index) + "&generation=" + std::to_string(tag.generation) +
          "&offset=" + std::to_string(task.uploaded);
      auto r = link->second.client->Raw("POST", target, chunk, "application/octet-stream");
      if (!r.ok()) continue;
      if (r->status == 403 || r->status == 404) {
        task.uploaded = size;  // the server will never take it
        continue;
      }
      const Json answer = Json::parse(r->body, nullptr, false);
      if (r->status != 200 || !answer.is_object() || !answer.contains("size") ||
          !answer.at("size").is_number_integer()) {
        continue;
      }
      const bool full = answer.contains("full") && answer.at("full").is_boolean() &&
                        answer.at("full").get<bool>();
      task.uploaded = full ? size : answer.at("size").get<int64_t>();
    }
  }
}

void SlurmConnector::Cleanup() {
  int64_t budget = kCleanupBudget;
  for (auto it = runs_.begin(); it != runs_.end();) {
    RunState& run = it->second;
    // Once no answer can still list it: every node it ran on heard from this round (every node,
    // for a run found again after a restart, whose tasks are unknown), or it would be submitted
    // again. And once its output is all with the server (or refused by it for good).
    bool done =
        !run.in_flight && !run.listed && !IsActiveState(run.slurm_state) && HeardFromAll(run);
    const double now = base::WallClockNow();
    if (!done) run.ended_at = 0;
    if (done && run.ended_at == 0) run.ended_at = now;
    // Its output, all of it with the server (or refused by it for good); not waited for past
    // kUploadAfterEnd, as something of the job's user may keep growing it.
    for (auto t = run.tasks.begin();
         done && now - run.ended_at < kUploadAfterEnd && t != run.tasks.end(); ++t) {
      int64_t size = 0;
      done = !ReadJobFile(TaskFile(run, t->first, ".out"), OwnerOf(run), 0, 0, &size) ||
             t->second.uploaded >= size;
    }
    if (!done || budget <= 0) {
      ++it;
      continue;
    }
    // Its job's folder is its user's, who may change it while it is removed: RemoveTree follows
    // no link, and takes a share of the round's budget (the rest at the next round), at most a
    // fifth of it, so that other runs' folders go too. One its user keeps filling is left.
    int64_t share = std::min(budget, kCleanupBudget / 5);
    budget -= share;
    auto removed = RemoveTree(RunDir(it->first), &share);
    budget += share;
    if (removed.ok() && !*removed && ++run.removal_rounds < kMaxRemovalRounds) {
      ++it;
      continue;
    }
    if (!removed.ok()) base::log::Warn("{}; left there", removed.status().message());
    if (removed.ok() && !*removed) {
      base::log::Warn("{}: still not removed after {} rounds; left there", RunDir(it->first),
                      kMaxRemovalRounds);
    }
    // A run of another user whose sbatch never answered: Slurm may show it yet, to be fenced.
    if (run.user && run.submitted && run.slurm_id <= 0) {
      unanswered_[it->first] = {run.user->uid, base::WallClockNow() + kUnansweredWatch};
    }
    it = runs_.erase(it);
  }
}

void SlurmConnector::KeepBell() {
  auto kept = links_.find(bell_node_);
  const Link* under = kept == links_.end() ? nullptr : &kept->second;
  // A node of its own credential (not the bootstrap token's, which speaks for no node).
  auto own = [&](const Link& l) {
    return l.registered && l.client && l.client->config().token != o_.server.token;
  };
  if (!under || !own(*under)) {
    under = nullptr;
    for (const auto& [name, link] : links_) {
      if (own(link)) {
        under = &link;
        break;
      }
    }
  }
  if (!under) return;  // none yet: rounds at the interval
  if (bell_ && under->registration.node == bell_node_ &&
      under->client->config().token == bell_token_) {
    return;
  }
  if (!bell_ || under->registration.node != bell_node_) {
    bell_ = std::make_unique<agent::OrdersWaiter>(under->registration.node, true);
  }
  bell_node_ = under->registration.node;
  bell_token_ = under->client->config().token;
  bell_->Use(under->client->config());
  base::log::Info(
      "waiting on cluster {}'s doorbell under node {}: new orders start a round at once",
      o_.cluster, bell_node_);
}

Status SlurmConnector::Round() {
  TakeOutcomes();  // before squeue is read: what it shows of them then stands
  const double now = base::WallClockNow();
  auto nodes = slurm_.Nodes();
  const double nodes_read = base::WallClockNow();
  auto jobs = nodes.ok() ? slurm_.Jobs() : base::Result<std::vector<SlurmJob>>(nodes.status());
  const std::set<uint32_t> others = OtherUsers();
  if (jobs.ok()) {
    // Jobs run as other users (--run-as) are not --me: asked for apart, by their users.
    auto theirs = slurm_.JobsOf({others.begin(), others.end()});
    if (theirs.ok()) {
      jobs->insert(jobs->end(), theirs->begin(), theirs->end());
    } else {
      jobs = theirs.status();
    }
  }
  const double jobs_read = base::WallClockNow();
  if (nodes.ok() && jobs.ok()) {
    if (slurm_lost_said_) base::log::Info("Slurm answers again");
    slurm_lost_said_ = false;
    slurm_seen_at_ = now;
    FindUnanswered();
    Observe(*jobs, others);
    Sync(*nodes);
    KeepBell();
  } else if (now - slurm_seen_at_ > o_.slurm_timeout) {
    // Nothing Slurm runs can be vouched for: its nodes go silent, and the server gives them up.
    if (!slurm_lost_said_) {
      base::log::Warn(
          "Slurm has not answered for {:.0f} s ({}); its nodes are no longer "
          "heartbeated",
          now - slurm_seen_at_, (nodes.ok() ? jobs.status() : nodes.status()).message());
    }
    slurm_lost_said_ = true;
    for (auto& [name, link] : links_) link.heard = false;
    return Status::Ok();
  }
  for (auto& [tag, run] : runs_) run.listed = false;
  const double heard_before = server_seen_at_;
  for (auto& [name, link] : links_) {
    Beat(link);
    EnforceLease();  // between heartbeats too: a silent server makes each one wait
  }
  if (server_seen_at_ != heard_before) {
    WriteFile(o_.work_dir + "/lease", fmt::format("{} {:.3f}\n", lease_, server_seen_at_), 0600);
  }
  EnforceLease();
  const double beaten = base::WallClockNow();
  const size_t queued = queued_;
  Act();
  const double acted = base::WallClockNow();
  GiveBackStuck();
  UploadLogs();
  const double uploaded = base::WallClockNow();
  Fence();
  FollowKillOrders();
  const double fenced = base::WallClockNow();
  Cleanup();
  const double end = base::WallClockNow();
  base::log::Debug(
      "round of {:.0f} ms: sinfo {:.0f} ms, squeue {:.0f} ms ({} jobs), heartbeats {:.0f} ms, "
      "{} to submit ({} submitted since the last round) in {:.0f} ms, logs {:.0f} ms, fencing "
      "{:.0f} ms, clean-up {:.0f} ms",
      (end - now) * 1e3, (nodes_read - now) * 1e3, (jobs_read - nodes_read) * 1e3,
      jobs.ok() ? jobs->size() : 0, (beaten - jobs_read) * 1e3, queued_ - queued,
      submitted_ - logged_submitted_, (acted - beaten) * 1e3, (uploaded - acted) * 1e3,
      (fenced - uploaded) * 1e3, (end - fenced) * 1e3);
  logged_submitted_ = submitted_;
  return Status::Ok();
}

Status SlurmConnector::Run(const std::atomic<bool>& stop) {
  std::error_code ec;
  fs::create_directories(o_.work_dir, ec);
  if (ec) return Status::Io("--work-dir " + o_.work_dir + ": " + ec.message());
  // Two connectors on one work dir would each submit and fence the same runs.
  base::DirLock lock;
  if (Status s = lock.Acquire(o_.work_dir, "--work-dir", "Slurm connector",
                              "one connector per work dir; stop it or choose another work dir");
      !s.ok()) {
    // A shared filesystem mounted without locks: the connector runs, unguarded.
    if (s.code() != base::StatusCode::kUnavailable) return s;
    base::log::Warn("{}: nothing keeps a second connector off it", s.message());
  }
  if (Status s = ResolveUsers(); !s.ok()) return s;
  if (Status s = LoadRuns(); !s.ok()) return s;
  // The lease counts from the server's last answer, of this life or of the one before (kept in
  // the work directory with the lease it gave), as an agent's shims count it from the lease
  // file: a connector restarted during a server outage keeps its runs no longer than it may.
  server_seen_at_ = base::WallClockNow();
  std::istringstream kept(base::ReadWholeFile(o_.work_dir + "/lease"));
  double lease = 0, seen = 0;
  if (kept >> lease >> seen && lease > 0 && seen > 0) {
    lease_ = lease;
    server_seen_at_ = std::min(seen, server_seen_at_);
  }
  slurm_seen_at_ = base::WallClockNow();
  base::log::Info(
      "Slurm connector for cluster {} (SLURM_CONF {}), every {:.1f} s; its Slurm jobs are named "
      "meridian-{}-JOB-GENERATION",
      o_.cluster, o_.slurm_conf.empty() ? "default" : o_.slurm_conf, o_.interval, o_.instance);
  // Submitters beside the round: sbatch waits on slurmctld (tens of milliseconds, seconds when it
  // is busy), and the nodes' heartbeats must not wait for it.
  stopping_ = false;
  for (size_t i = 0; i < kSubmitters; ++i) submitters_.emplace_back([this] { Submitter(); });
  while (!stop) {
    if (Status s = Round(); !s.ok()) base::log::Warn("{}", s.message());
    // The next round after the interval, or sooner (a fifth of it) once every submission handed
    // over is back, to see them start; when the cluster's bell rang (new orders, a stop) and no
    // submission is out, as soon as a fifth of the interval (at most 1 s) has passed, so that a
    // stream of rings does not make rounds back to back. Not while submissions wait: each round
    // reads squeue and sinfo from slurmctld, which sbatch waits on too (with 2,000 jobs at once,
    // rounds at that pace halved the rate of submissions).
    const double done = base::WallClockNow();
    while (!stop) {
      const double now = base::WallClockNow();
      if (now >= done + o_.interval) break;
      if (now >= done + o_.interval / 5 && SubmissionsDone()) break;
      if (bell_ && bell_->rung() && now >= done + std::min(o_.interval / 5, 1.0) && NothingOut()) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (bell_) bell_->TakeRung();  // this round hears what it rang for
  }
  {
    std::lock_guard<std::mutex> lock(submit_mu_);
    stopping_ = true;
  }
  submit_cv_.notify_all();
  for (std::thread& t : submitters_) t.join();
  submitters_.clear();
  return Status::Ok();
}

}  // namespace meridian::slurm
