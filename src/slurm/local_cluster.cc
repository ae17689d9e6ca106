#include "slurm/local_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <thread>

#include "slurm/slurm_cli.h"

namespace meridian::slurm {

using base::Status;
namespace fs = std::filesystem;

namespace {

bool Within(double seconds, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A loopback port free now (Slurm's daemons bind their own; a race with another process is
// unlikely and shows as a daemon that does not start).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((d + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

}  // namespace

void LocalCluster::Daemon::Start(std::vector<std::string> args, const std::string& log,
                                 const std::string& conf) {
  // Everything the child needs is made before fork(): this process has threads, and its child
  // may make only async-signal-safe calls until it execs.
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = {"SLURM_CONF=" + conf};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SLURM_CONF=", 11) != 0) env.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  // Killed with this process: PR_SET_PDEATHSIG follows the thread that forked, so only when that
  // is the main thread (the dev estate starts Slurm from a thread that ends; Stop is its way).
  const bool main_thread = ::gettid() == ::getpid();
  pid = ::fork();
  if (pid == 0) {
    if (main_thread) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (out >= 0) ::close(out);
}

bool LocalCluster::Daemon::Running() {
  if (pid <= 0) return false;
  if (::waitpid(pid, nullptr, WNOHANG) == 0) return true;
  pid = -1;  // ended and reaped: its PID may be another process's by now
  return false;
}

void LocalCluster::Daemon::Stop(int sig) {
  if (!Running()) return;
  ::kill(pid, sig);
  if (!Within(10, [&] { return ::waitpid(pid, nullptr, WNOHANG) == pid; })) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  pid = -1;
}

LocalCluster::LocalCluster(std::string dir, int nodes, int gpus, std::string gpu_type)
    : dir_(fs::absolute(dir).lexically_normal().string()),
      nodes_(nodes),
      gpus_(gpus),
      gpu_type_(std::move(gpu_type)),
      slurmd_(static_cast<size_t>(nodes)) {}

bool LocalCluster::Runnable() {
  if (::geteuid() != 0) return false;
  for (const char* p : {"munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch"}) {
    if (!OnPath(p)) return false;
  }
  return true;
}

std::string LocalCluster::Command(const std::vector<std::string>& argv) const {
  auto r = RunCommand(argv, {{"SLURM_CONF", conf()}}, "", 30);
  return r.ok() ? r->out + r->err : "";
}

int LocalCluster::IdleNodes() const {
  std::istringstream in(Command({"sinfo", "-h", "-N", "-t", "idle", "-o", "%N"}));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

Status LocalCluster::Start() {
  started_ = true;
  std::error_code ec;
  for (const char* d : {"etc", "state", "log", "run", "dev", "munge/key", "munge/run", "spool"}) {
    fs::create_directories(dir_ + "/" + d, ec);
    if (ec) return Status::Io("creating " + dir_ + "/" + d + ": " + ec.message());
  }
  // munged wants its key's folder private and the folders above its socket searchable: those of
  // this cluster (the ones above are the caller's).
  ::chmod((dir_ + "/munge/key").c_str(), 0700);
  for (const char* d : {"", "/munge", "/munge/run"}) ::chmod((dir_ + d).c_str(), 0711);
  for (fs::path p = fs::path(dir_).parent_path(); p != p.parent_path(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
      return Status::Invalid("munged needs every folder above its socket searchable by all, and " +
                             p.string() + " is not (chmod o+x " + p.string() + ")");
    }
  }
  for (int i = 0; i < gpus_; ++i) {
    const std::string dev = dir_ + "/dev/nvidia" + std::to_string(i);
    if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 && errno != EEXIST) {
      return Status::Io("mknod " + dev + " (a fake GPU device; needs root)");
    }
  }
  const std::string key = dir_ + "/munge/key/munge.key";
  if (!fs::exists(key)) {
    auto made = RunCommand({"mungekey", "--create", "--keyfile=" + key}, {}, "", 30);
    if (!made.ok() || made->exit_code != 0) {
      return Status::Internal("mungekey: " + (made.ok() ? made->err : made.status().message()));
    }
  }
  munge_socket_ = dir_ + "/munge/run/munge.socket";
  munge_.Start(
      {"munged", "-F", "--socket=" + munge_socket_, "--key-file=" + key,
       "--log-file=" + dir_ + "/munge/munged.log", "--pid-file=" + dir_ + "/munge/munged.pid",
       "--seed-file=" + dir_ + "/munge/munged.seed"},
      dir_ + "/log/munged.out", conf());
  if (!Within(10, [&] { return fs::exists(munge_socket_); })) {
    return Status::Internal("munged did not start: " + Tail(dir_ + "/log/munged.out"));
  }
  if (Status s = WriteConfiguration(); !s.ok()) return s;
  if (Status s = StartController(true); !s.ok()) return s;
  for (int i = 0; i < nodes_; ++i) {
    const std::string name = "n" + std::to_string(i + 1);
    fs::create_directories(dir_ + "/spool/" + name, ec);
    slurmd_[static_cast<size_t>(i)].Start({"slurmd", "-D", "-N", name},
                                          dir_ + "/log/slurmd-" + name + ".out", conf());
  }
  if (!Within(30, [&] { return IdleNodes() >= nodes_; })) {
    return Status::Internal("Slurm's nodes did not become idle: " + Command({"sinfo", "-N"}) +
                            Tail(dir_ + "/log/slurmctld.log"));
  }
  return Status::Ok();
}

Status LocalCluster::StartController(bool clear) {
  std::vector<std::string> args = {"slurmctld", "-D", "-i"};
  if (clear) args.push_back("-c");
  controller_.Start(args, dir_ + "/log/slurmctld.out", conf());
  if (!Within(20, [&] { return Command({"scontrol", "ping"}).find("UP") != std::string::npos; })) {
    return Status::Internal("slurmctld did not answer: " + Tail(dir_ + "/log/slurmctld.out"));
  }
  return Status::Ok();
}

void LocalCluster::KillController() { controller_.Stop(SIGKILL); }

void LocalCluster::Stop() {
  if (controller_.Running()) {
    Command({"scancel", "--partition=gpu"});  // everyone's, not only root's
    Within(15, [&] { return Command({"squeue", "-h"}).empty(); });
  }
  for (Daemon& d : slurmd_) d.Stop(SIGTERM);
  controller_.Stop(SIGTERM);
  munge_.Stop(SIGTERM);
  if (started_) KillLeftovers();
  started_ = false;
}

// After a slurmctld killed and restarted from a state saved before a job started, Slurm can show
// the job cancelled while its step runs on: what Stop cancelled is not all there is.
void LocalCluster::KillLeftovers() const {
  const std::string mine = "SLURM_CONF=" + conf() + '\0';
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stoi(pid) == ::getpid()) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(mine) != std::string::npos) ::kill(std::stoi(pid), SIGKILL);
  }
}

Status LocalCluster::WriteConfiguration() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string h = std::string(host).substr(0, std::string(host).find('.'));
  std::ostringstream c;
  c << "ClusterName=meridian\nSlurmctldHost=" << h << "(127.0.0.1)\n"
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
    c << "NodeName=n" << i + 1 << " NodeHostname=" << h << " NodeAddr=127.0.0.1 Port=" << FreePort()
      << " CPUs=16 RealMemory=64000 Gres=gpu:" << gpu_type_ << ":" << gpus_ << " State=UNKNOWN\n";
  }
  c << "PartitionName=gpu Nodes=n[1-" << nodes_
    << "] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n";
  std::ofstream(conf()) << c.str();
  std::ofstream gres(dir_ + "/etc/gres.conf");
  gres << "AutoDetect=off\nNodeName=n[1-" << nodes_ << "] Name=gpu Type=" << gpu_type_
       << " File=" << dir_ << "/dev/nvidia[0-" << gpus_ - 1 << "]\n";
  if (!gres) return Status::Io("cannot write " + dir_ + "/etc/gres.conf");
  return Status::Ok();
}

}  // namespace meridian::slurm
