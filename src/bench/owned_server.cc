#include "bench/owned_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace meridian::bench {

using Clock = std::chrono::steady_clock;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

OwnedServer::~OwnedServer() {
  if (pid > 0) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  std::error_code ignored;
  if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
}

std::string OwnedServer::admin_token() const { return Slurp(dir + "/data/admin.token"); }

void OwnedServer::Usage(double* cpu_seconds, double* rss_mib) const {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  std::istringstream fields(line.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {
    if (i == 14) utime = std::stod(f);
    if (i == 15) {
      stime = std::stod(f);
      break;
    }
  }
  *cpu_seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) *rss_mib = std::stod(line.substr(6)) / 1024.0;
  }
}

base::Result<std::unique_ptr<OwnedServer>> StartServer(const std::string& binary,
                                                       const std::vector<std::string>& flags) {
  auto s = std::make_unique<OwnedServer>();
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/meridian-bench-XXXXXX";
  if (!mkdtemp(pattern.data())) return base::Status::Io("cannot make a temporary directory");
  s->dir = pattern;
  const std::string port_file = s->dir + "/port";
  // Made before fork(): the benchmark has threads, and its child may make only
  // async-signal-safe calls until it execs.
  std::vector<std::string> args = {binary,     "server",      "--data-dir",  s->dir + "/data",
                                   "--listen", "127.0.0.1:0", "--port-file", port_file};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log_path = s->dir + "/server.log";
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  s->pid = fork();
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the server goes when the benchmark goes
    if (log >= 0) dup2(log, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (log >= 0) close(log);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Slurp(port_file).empty()) {
    if (Clock::now() > deadline) {
      return base::Status::Io("the server did not start: " + Slurp(s->dir + "/server.log"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s->port = std::stoi(Slurp(port_file));
  return s;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return v[i];
}

}  // namespace meridian::bench
