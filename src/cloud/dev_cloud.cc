#include "cloud/dev_cloud.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "base/rng.h"
#include "base/status.h"
#include "base/strings.h"
#include "cloud/provisioner.h"

namespace meridian::cloud {

using base::Status;
using base::StatusCode;

namespace {

// How long a deleted instance's agent may take to stop its tasks before its group is killed.
constexpr double kStopWait = 15;
constexpr const char* kStateFile = "instances.json";
constexpr const char* kLockFile = "lock";

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SteadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// One instance as the state file keeps it, deleted ones included (for the bill).
struct Record {
  std::string id;
  std::string node;
  std::string pool;
  std::string cluster;
  std::string region;
  bool spot = false;
  double price_per_hour = 0;
  double boot_seconds = 0;
  double created_at = 0;
  std::optional<double> deleted_at;
  std::optional<double> interrupt_at;  // a spot instance being taken back: when it goes
  double checked_at = 0;    // when interruptions at a rate were last drawn for it (0: never)
  int pid = 0;              // its agent's process and process group; 0: none (never_boot)
  uint64_t start_time = 0;  // /proc/PID/stat's starttime: our process, not a reused pid
};

struct State {
  int64_t next = 1;  // the number of the next instance id, dc-<next>
  std::vector<Record> instances;
};

Json ToJson(const Record& r) {
  Json j{{"id", r.id},
         {"node", r.node},
         {"pool", r.pool},
         {"cluster", r.cluster},
         {"region", r.region},
         {"spot", r.spot},
         {"pricePerHour", r.price_per_hour},
         {"bootSeconds", r.boot_seconds},
         {"createdAt", r.created_at},
         {"pid", r.pid},
         {"startTime", r.start_time}};
  if (r.deleted_at) j["deletedAt"] = *r.deleted_at;
  if (r.interrupt_at) j["interruptAt"] = *r.interrupt_at;
  if (r.checked_at > 0) j["checkedAt"] = r.checked_at;
  return j;
}

// The state file is ours, but it is still a file: a damaged one is reported, never trusted.
base::Result<State> StateOf(const std::string& text, const std::string& path) {
  State s;
  try {
    const Json j = Json::parse(text);
    s.next = j.at("next").get<int64_t>();
    for (const Json& i : j.at("instances")) {
      Record r;
      r.id = i.at("id").get<std::string>();
      r.node = i.at("node").get<std::string>();
      r.pool = i.at("pool").get<std::string>();
      r.cluster = i.value("cluster", "");
      r.region = i.value("region", "");
      r.spot = i.value("spot", false);
      r.price_per_hour = i.value("pricePerHour", 0.0);
      r.boot_seconds = i.value("bootSeconds", 0.0);
      r.created_at = i.at("createdAt").get<double>();
      if (i.contains("deletedAt")) r.deleted_at = i.at("deletedAt").get<double>();
      if (i.contains("interruptAt")) r.interrupt_at = i.at("interruptAt").get<double>();
      r.checked_at = i.value("checkedAt", 0.0);
      r.pid = i.value("pid", 0);
      r.start_time = i.value("startTime", uint64_t{0});
      s.instances.push_back(std::move(r));
    }
  } catch (const Json::exception& e) {
    return Status::Internal(path + ": not a dev-cloud state file: " + e.what());
  }
  return s;
}

// Writes `data` to `path` so that a reader sees the old or the new file whole, and the new one
// survives a crash once this returns.
Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Io(Errno(tmp));
  fchmod(fd, mode);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Status::Io(Errno(tmp));
      close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    Status s = Status::Io(Errno("fsync " + tmp));
    close(fd);
    return s;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Status::Io(Errno("rename " + tmp));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return Status::Ok();
  return Status::Io(Errno("mkdir " + path));
}

// `seconds` as nanosleep takes them.
timespec TimespecOf(double seconds) {
  timespec t{};
  t.tv_sec = static_cast<time_t>(seconds);
  t.tv_nsec = static_cast<long>((seconds - static_cast<double>(t.tv_sec)) * 1e9);
  return t;
}

// In a child after fork, only async-signal-safe calls: sleeps `t` whole, signals or not.
void SleepFor(timespec t) {
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

// The state directory, its state file and the lock that serialises every invocation on them.
class StateStore {
 public:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
  ~StateStore() { Unlock(); }
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& dir() const { return dir_; }

  Status Lock() {
    if (dir_.empty()) return Status::Invalid("no state directory");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir_, ec)) {
      std::filesystem::create_directories(dir_, ec);
      if (ec) return Status::Io("mkdir " + dir_ + ": " + ec.message());
      chmod(dir_.c_str(), 0711);  // tasks run under uids of their own pass through to theirs
    }
    const std::string path = dir_ + "/" + kLockFile;
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return Status::Io(Errno(path));
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        Status s = Status::Io(Errno("flock " + path));
        Unlock();
        return s;
      }
    }
    return Status::Ok();
  }

  void Unlock() {
    if (fd_ >= 0) close(fd_);  // closing the only descriptor releases the lock
    fd_ = -1;
  }

  // The state as it is now, for a reader that writes nothing: the lock only while reading.
  base::Result<State> ReadNow() {
    if (Status s = Lock(); !s.ok()) return s;
    auto state = Read();
    Unlock();
    return state;
  }

  base::Result<State> Read() const {
    const std::string path = dir_ + "/" + kStateFile;
    std::ifstream in(path);
    if (!in) return State{};
    std::stringstream text;
    text << in.rdbuf();
    return StateOf(text.str(), path);
  }

  Status Write(const State& s) const {
    Json j{{"next", s.next}, {"instances", Json::array()}};
    for (const Record& r : s.instances) j["instances"].push_back(ToJson(r));
    return WriteFileAtomic(dir_ + "/" + kStateFile, j.dump(2) + "\n", 0600);
  }

 private:
  std::string dir_;
  int fd_ = -1;
};

// /proc/PID/stat's state letter and start time (clock ticks after boot); false when it is gone.
bool ProcStat(int pid, char* state, uint64_t* start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  // After the command's ")": state is field 3, starttime field 22.
  for (int k = 3; k <= 22 && fields >> field; ++k) {
    if (k == 3) *state = field.empty() ? '?' : field[0];
    if (k == 22) {
      *start_time = std::strtoull(field.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

// Whether the instance's agent (its group's leader) still runs. A zombie counts as gone (and is
// reaped when it is this process's child); a pid now used by another process counts as gone.
bool ProcessAlive(const Record& r) {
  if (r.pid <= 0) return false;
  char state = '?';
  uint64_t start = 0;
  if (!ProcStat(r.pid, &state, &start)) return false;
  if (r.start_time != 0 && start != r.start_time) return false;
  if (state == 'Z' || state == 'X') {
    int status = 0;
    waitpid(r.pid, &status, WNOHANG);
    return false;
  }
  return true;
}

bool GroupExists(int pgid) { return pgid > 0 && kill(-pgid, 0) == 0; }

// Whether the group of an agent that is gone still has members. A group id is not reused while
// the group has a member, so the group is the agent's unless its pid now names another process.
bool OnlyLeftovers(const Record& r) {
  if (r.pid <= 0) return false;
  char state = '?';
  uint64_t start = 0;
  if (ProcStat(r.pid, &state, &start) && r.start_time != 0 && start != r.start_time) return false;
  return GroupExists(r.pid);
}

// Stops the agents of `records`: SIGTERM to each process group, up to kStopWait seconds for the
// agents to stop their tasks and exit, then SIGKILL to whatever is left of each group.
void StopAgents(const std::vector<const Record*>& records, std::string* err) {
  std::vector<const Record*> live;
  for (const Record* r : records) {
    if (ProcessAlive(*r)) {
      if (kill(-r->pid, SIGTERM) != 0) kill(r->pid, SIGTERM);
      live.push_back(r);
    } else if (OnlyLeftovers(*r)) {
      kill(-r->pid, SIGKILL);  // the agent crashed; what it started may not outlive it
    }
  }
  const double deadline = SteadyNow() + kStopWait;
  std::vector<const Record*> waiting = live;
  while (!waiting.empty() && SteadyNow() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::erase_if(waiting, [](const Record* r) { return !ProcessAlive(*r); });
  }
  for (const Record* r : live) {
    const bool stubborn = ProcessAlive(*r);
    if (stubborn) *err += "dev-cloud: " + r->id + " did not stop on SIGTERM: killed\n";
    // What the agent left in its group (it has exited, so the group id is not reused while any
    // of them lives) goes too.
    if (stubborn || GroupExists(r->pid)) kill(-r->pid, SIGKILL);
  }
  const double reap_deadline = SteadyNow() + 5;
  while (SteadyNow() < reap_deadline) {
    std::erase_if(live, [](const Record* r) { return !ProcessAlive(*r); });
    if (live.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::vector<std::string> AgentArgv(const DevCloudOptions& o, const CreateRequest& req,
                                   const std::string& node, const std::string& node_dir) {
  std::vector<std::string> a = {o.agent.empty() ? SelfExe() : o.agent,
                                "--server",
                                req.server,
                                "agent",
                                "--node",
                                node,
                                "--cluster",
                                req.cluster,
                                "--pool",
                                req.pool,
                                "--address",
                                "127.0.0.1",
                                "--work-dir",
                                node_dir + "/work",
                                "--token-file",
                                node_dir + "/token"};
  if (req.shape.gpus > 0) {
    a.insert(a.end(),
             {"--simulate-gpus", std::to_string(req.shape.gpus) + "x" + req.shape.gpu_model});
  } else {
    // Without simulated GPUs the agent would look for NVIDIA's driver.
    a.insert(a.end(), {"--gpu-discovery", "none"});
  }
  // 0 leaves the agent's default: all of the machine's.
  if (req.shape.cpu_milli > 0) {
    a.insert(a.end(), {"--cpu-milli", std::to_string(req.shape.cpu_milli)});
  }
  if (req.shape.memory_mib > 0) {
    a.insert(a.end(), {"--memory-mib", std::to_string(req.shape.memory_mib)});
  }
  a.insert(a.end(), o.agent_args.begin(), o.agent_args.end());
  return a;
}

// Starts the instance's agent as a daemon: a new session (its pid is its process group), stdin
// from /dev/null, stdout and stderr to its agent.log, no other descriptor of ours (the caller
// waits for EOF on our stdout; the state lock must not outlive this call), after `boot` seconds.
// Returns its pid once it has its own session, so that a delete can signal its group at once.
base::Result<int> StartAgent(const std::vector<std::string>& argv, const std::string& log_path,
                             double boot) {
  std::vector<std::string> args = argv;
  std::vector<char*> exec_argv;
  for (std::string& a : args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  const std::string exec_failed = "dev-cloud: cannot run " + argv[0] + "\n";
  const timespec delay = TimespecOf(boot);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  const int max_fd = static_cast<int>(std::min<long>(sysconf(_SC_OPEN_MAX), 65536));

  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return Status::Io(Errno("/dev/null"));
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    Status s = Status::Io(Errno(log_path));
    close(null_fd);
    return s;
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    Status s = Status::Io(Errno("pipe"));
    close(null_fd), close(log_fd);
    return s;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    // The child: only async-signal-safe calls until execv.
    setsid();
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) {
      sigaction(sig, &default_action, nullptr);
    }
    dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    // Closes every other descriptor, the ready pipe's included: its EOF tells the parent.
    if (close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < max_fd; ++fd) close(fd);
    }
    SleepFor(delay);
    execv(exec_argv[0], exec_argv.data());
    (void)!write(2, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  const int fork_errno = errno;
  close(ready[1]), close(null_fd), close(log_fd);
  if (pid < 0) {
    close(ready[0]);
    errno = fork_errno;
    return Status::Internal(Errno("fork"));
  }
  char byte;
  while (read(ready[0], &byte, 1) < 0 && errno == EINTR) {
  }
  close(ready[0]);
  return static_cast<int>(pid);
}

Instance InstanceOfRecord(const Record& r, double now, bool* alive) {
  *alive = ProcessAlive(r);
  Instance i;
  i.id = r.id;
  i.node = r.node;
  i.pool = r.pool;
  i.state = r.pid > 0 && *alive && now >= r.created_at + r.boot_seconds ? "running" : "booting";
  i.created_at = r.created_at;
  i.spot = r.spot;
  i.interrupt_at = r.interrupt_at.value_or(0);
  return i;
}

Json ListedInstance(const Record& r, double now) {
  bool alive = false;
  Json j = ToJson(InstanceOfRecord(r, now, &alive));
  j["processAlive"] = alive;
  return j;
}

base::Result<Json> ParseRequest(const std::string& in, bool empty_is_object) {
  if (empty_is_object && in.find_first_not_of(" \t\r\n") == std::string::npos) {
    return Json::object();
  }
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Invalid("the request is not a JSON object");
  }
  return j;
}

base::Result<std::string> PoolOf(const Json& request) {
  if (!request.contains("pool") || request.at("pool").is_null()) return std::string();
  if (!request.at("pool").is_string()) return Status::Invalid("pool: must be a string");
  return request.at("pool").get<std::string>();
}

// Starts one agent per new node, or none: on a failure the ones started are stopped again.
Status StartAgents(const DevCloudOptions& o, const CreateRequest& req, const std::string& dir,
                   std::vector<Record>* fresh, std::string* err) {
  for (Record& r : *fresh) {
    const std::string node_dir = dir + "/" + r.node;
    Status s = MakeDir(node_dir, 0711);
    if (s.ok()) s = MakeDir(node_dir + "/work", 0711);
    if (s.ok()) s = WriteFileAtomic(node_dir + "/token", req.token + "\n", 0600);
    if (s.ok() && !o.never_boot) {
      const std::vector<std::string> argv = AgentArgv(o, req, r.node, node_dir);
      if (argv[0].empty() || access(argv[0].c_str(), X_OK) != 0) {
        s = Status::Internal("the agent " + argv[0] + " is not an executable file");
      } else {
        auto pid = StartAgent(argv, node_dir + "/agent.log", req.boot_seconds);
        s = pid.status();
        if (pid.ok()) {
          r.pid = *pid;
          char state = '?';
          ProcStat(r.pid, &state, &r.start_time);
          *err += "dev-cloud: " + r.id + " (node " + r.node + ", pool " + r.pool + "): agent pid " +
                  std::to_string(r.pid) + ", boots in " + base::Decimal(req.boot_seconds) + " s\n";
        }
      }
    }
    if (!s.ok()) {
      std::vector<const Record*> started;
      for (const Record& f : *fresh) {
        if (f.pid > 0) started.push_back(&f);
      }
      StopAgents(started, err);
      return s;
    }
  }
  return Status::Ok();
}

base::Result<Json> Create(const DevCloudOptions& o, StateStore& store, const Json& request,
                          std::string* err) {
  auto req = CreateRequestOf(request);
  if (!req.ok()) return req.status();
  if (Status s = store.Lock(); !s.ok()) return s;
  auto state = store.Read();
  if (!state.ok()) return state.status();
  const double now = WallNow();
  // A create that is asked again (its answer was lost) answers with the instances it made.
  Json answer{{"instances", Json::array()}};
  std::vector<Record> fresh;
  int live_in_pool = 0;
  for (const std::string& node : req->nodes) {
    const Record* existing = nullptr;
    for (const Record& r : state->instances) {
      if (!r.deleted_at && r.node == node) existing = &r;
    }
    if (existing && existing->pool != req->pool) {
      return Status::Invalid("nodes: " + node + " is already instance " + existing->id +
                             " of pool " + existing->pool);
    }
    if (existing) {
      bool alive = false;
      answer["instances"].push_back(ToJson(InstanceOfRecord(*existing, now, &alive)));
      continue;
    }
    Record r;
    r.id = "dc-" + std::to_string(state->next++);
    r.node = node;
    r.pool = req->pool;
    r.cluster = req->cluster;
    r.region = req->region;
    r.spot = req->spot;
    r.price_per_hour = req->price_per_hour;
    r.boot_seconds = o.never_boot ? 0 : req->boot_seconds;
    r.created_at = now;
    fresh.push_back(std::move(r));
  }
  for (const Record& r : state->instances) {
    if (!r.deleted_at && r.pool == req->pool) ++live_in_pool;
  }
  if (auto cap = o.capacity.find(req->pool);
      cap != o.capacity.end() && live_in_pool + static_cast<int>(fresh.size()) > cap->second) {
    return Status(StatusCode::kUnavailable,
                  "pool " + req->pool + " has room for " +
                      std::to_string(std::max(0, cap->second - live_in_pool)) +
                      " more instance(s), " + std::to_string(fresh.size()) + " asked");
  }
  if (Status s = StartAgents(o, *req, store.dir(), &fresh, err); !s.ok()) return s;
  for (const Record& r : fresh) {
    Instance i{r.id, r.node, r.pool, "booting", r.created_at, r.spot};
    answer["instances"].push_back(ToJson(i));
    state->instances.push_back(r);
  }
  if (Status s = store.Write(*state); !s.ok()) {
    // Unrecorded agents would run for ever: stop them.
    std::vector<const Record*> started;
    for (const Record& r : fresh) started.push_back(&r);
    StopAgents(started, err);
    return s;
  }
  return answer;
}

base::Result<Json> Delete(StateStore& store, const Json& request, std::string* err) {
  if (!request.contains("instances") || !request.at("instances").is_array()) {
    return Status::Invalid("instances: must be a list of instance ids");
  }
  std::vector<std::string> ids;
  for (size_t k = 0; k < request.at("instances").size(); ++k) {
    const Json& id = request.at("instances")[k];
    if (!id.is_string()) {
      return Status::Invalid("instances[" + std::to_string(k) + "]: must be a string");
    }
    ids.push_back(id.get<std::string>());
  }
  const std::set<std::string> wanted(ids.begin(), ids.end());
  // Stopping agents takes up to kStopWait: it is done outside the lock, and the deletion is
  // recorded only afterwards, so that a delete that is interrupted is simply asked again.
  auto state = store.ReadNow();
  if (!state.ok()) return state.status();
  std::vector<const Record*> doomed;
  for (const Record& r : state->instances) {
    if (!r.deleted_at && wanted.count(r.id)) doomed.push_back(&r);
  }
  StopAgents(doomed, err);
  if (Status s = store.Lock(); !s.ok()) return s;
  auto now_state = store.Read();
  if (!now_state.ok()) return now_state.status();
  const double now = WallNow();
  for (Record& r : now_state->instances) {
    if (r.deleted_at || !wanted.count(r.id)) continue;
    r.deleted_at = now;
    *err += "dev-cloud: deleted " + r.id + " (node " + r.node + ")\n";
  }
  if (Status s = store.Write(*now_state); !s.ok()) return s;
  return Json{{"deleted", ids}};
}

// Takes a spot instance back `notice` seconds from `now`: it is listed with when it goes, and
// then its agent's processes are killed (by a daemon of its own that waits for it) and it is
// listed no more. Billing ends then.
void TakeBack(Record& r, double notice, double now, std::string* err) {
  r.interrupt_at = now + notice;
  *err += "dev-cloud: " + r.id + " (node " + r.node + ") is taken back in " +
          std::to_string(notice) + " s\n";
  if (r.pid <= 0) return;
  const pid_t group = r.pid;
  const timespec wait = TimespecOf(notice);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t killer = fork();
  if (killer == 0) {  // only async-signal-safe calls from here
    setsid();
    // Holds neither the state's lock nor the caller's pipes while it waits.
    if (null_fd >= 0) dup2(null_fd, 0), dup2(null_fd, 1), dup2(null_fd, 2);
    if (close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 1024; ++fd) close(fd);
    }
    const pid_t inner = fork();  // not our child: nobody need wait for it
    if (inner != 0) _exit(0);
    SleepFor(wait);
    kill(-group, SIGKILL);
    _exit(0);
  }
  if (null_fd >= 0) close(null_fd);
  if (killer > 0) waitpid(killer, nullptr, 0);
}

// Spot interruptions at the configured rate, for the time since each live spot instance was
// last looked at: with probability 1 - exp(-rate × hours) it is taken back now.
Status DrawInterruptions(const DevCloudOptions& o, StateStore& store, std::string* err) {
  if (Status s = store.Lock(); !s.ok()) return s;
  auto state = store.Read();
  if (!state.ok()) return state.status();
  const double now = WallNow();
  for (Record& r : state->instances) {
    if (!r.spot || r.deleted_at || r.interrupt_at) continue;
    const double hours = std::max(0.0, now - std::max(r.created_at, r.checked_at)) / 3600;
    r.checked_at = now;
    base::Rng rng(o.seed ^ std::hash<std::string>{}(r.id) ^
                  static_cast<uint64_t>(std::llround(now * 1000)));
    if (rng.UniformDouble() < 1 - std::exp(-o.interrupt_rate * hours)) {
      TakeBack(r, o.interrupt_notice, now, err);
    }
  }
  Status written = store.Write(*state);
  store.Unlock();  // the list reads under a lock of its own
  return written;
}

base::Result<Json> List(const DevCloudOptions& o, StateStore& store, const Json& request,
                        std::string* err) {
  auto pool = PoolOf(request);
  if (!pool.ok()) return pool.status();
  if (o.interrupt_rate > 0) {
    if (Status s = DrawInterruptions(o, store, err); !s.ok()) return s;
  }
  auto state = store.ReadNow();
  if (!state.ok()) return state.status();
  const double now = WallNow();
  Json answer{{"instances", Json::array()}};
  for (const Record& r : state->instances) {
    if (r.deleted_at || (!pool->empty() && r.pool != *pool)) continue;
    if (r.interrupt_at && *r.interrupt_at <= now) continue;  // taken back: gone
    answer["instances"].push_back(ListedInstance(r, now));
  }
  return answer;
}

base::Result<Json> Bill(StateStore& store, const Json& request) {
  auto pool = PoolOf(request);
  if (!pool.ok()) return pool.status();
  auto state = store.ReadNow();
  if (!state.ok()) return state.status();
  const double now = WallNow();
  Json answer{{"instances", Json::array()}, {"total", 0.0}};
  double total = 0;
  for (const Record& r : state->instances) {
    if (!pool->empty() && r.pool != *pool) continue;
    const double end = std::min(r.deleted_at.value_or(now), r.interrupt_at.value_or(now));
    const double seconds = std::max(0.0, end - r.created_at);
    const double cost = seconds / 3600 * r.price_per_hour;
    total += cost;
    answer["instances"].push_back(Json{{"id", r.id},
                                       {"node", r.node},
                                       {"pool", r.pool},
                                       {"spot", r.spot},
                                       {"pricePerHour", r.price_per_hour},
                                       {"seconds", seconds},
                                       {"cost", cost}});
  }
  answer["total"] = total;
  return answer;
}

// A spot interruption, as a cloud delivers one: the instance is listed with when it goes, and
// at that time its agent's processes are killed (a daemon of its own waits for it) and it is
// listed no more. Billing ends then.
base::Result<Json> Interrupt(StateStore& store, const Json& request, std::string* err) {
  if (!request.contains("instances") || !request.at("instances").is_array()) {
    return Status::Invalid("instances: must be a list of instance ids");
  }
  const Json notice = request.value("noticeSeconds", Json(120));
  if (!notice.is_number() || notice.get<double>() < 0 || notice.get<double>() > 3600) {
    return Status::Invalid("noticeSeconds: must be a number of seconds from 0 to 3600");
  }
  std::set<std::string> wanted;
  for (const Json& id : request.at("instances")) {
    if (!id.is_string()) return Status::Invalid("instances: must be strings");
    wanted.insert(id.get<std::string>());
  }
  if (Status s = store.Lock(); !s.ok()) return s;
  auto state = store.Read();
  if (!state.ok()) return state.status();
  const double now = WallNow();
  Json answer{{"interrupted", Json::array()}};
  for (Record& r : state->instances) {
    if (r.deleted_at || r.interrupt_at || !wanted.count(r.id)) continue;
    TakeBack(r, notice.get<double>(), now, err);
    answer["interrupted"].push_back(Json{{"id", r.id}, {"interruptAt", *r.interrupt_at}});
  }
  if (Status s = store.Write(*state); !s.ok()) return s;
  return answer;
}

int Answer(const base::Result<Json>& result, std::string* out, std::string* err) {
  if (result.ok()) {
    *out = result->dump() + "\n";
    return 0;
  }
  const Status& s = result.status();
  const std::string code = s.code() == StatusCode::kInvalidArgument ? "invalid"
                           : s.code() == StatusCode::kUnavailable   ? "capacity"
                                                                    : "internal";
  *out = Json{{"error", {{"code", code}, {"message", s.message()}}}}.dump() + "\n";
  *err += "dev-cloud: " + code + ": " + s.message() + "\n";
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int RunDevCloud(const DevCloudOptions& o, const std::string& verb, const std::string& in,
                std::string* out, std::string* err) {
  out->clear();
  StateStore store(o.state_dir);
  if (verb != "create" && verb != "delete" && verb != "list" && verb != "bill" &&
      verb != "interrupt") {
    return Answer(
        Status::Invalid("unknown verb " + verb + " (create, delete, list, bill or interrupt)"), out,
        err);
  }
  if (o.state_dir.empty()) return Answer(Status::Invalid("no state directory"), out, err);
  auto request = ParseRequest(in, verb == "list" || verb == "bill");
  if (!request.ok()) return Answer(request.status(), out, err);
  if (verb == "create") return Answer(Create(o, store, *request, err), out, err);
  if (verb == "delete") return Answer(Delete(store, *request, err), out, err);
  if (verb == "list") return Answer(List(o, store, *request, err), out, err);
  if (verb == "interrupt") return Answer(Interrupt(store, *request, err), out, err);
  return Answer(Bill(store, *request), out, err);
}

}  // namespace meridian::cloud
