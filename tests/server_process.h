#pragma once

// Starts real `meridian server` processes on loopback ports for the integration tests, and
// talks to them over HTTP and through the real CLI.

#include <fcntl.h>
#include <grp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace meridian::testing {

using Json = nlohmann::json;

// Polls `ready` until it holds or `seconds` pass.
inline bool Eventually(const std::function<bool()>& ready, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A child process as the tests start one: `argv[0]` run with `argv`, its output in `log`, killed
// when the thread that started it ends.
struct ChildSpec {
  std::vector<std::string> argv{};
  std::string log{};       // empty: the output stays where the test's goes
  bool truncate = false;   // the log is started afresh rather than appended to
  bool log_stdout = true;  // false: only stderr goes to the log
  std::vector<std::pair<std::string, std::string>> env{};  // set on top of this process's own
  std::optional<uint32_t>
      uid{};  // run as this uid (and the same gid), without supplementary groups
};

// Starts `spec`; its pid, or -1. A test process has threads (a CLI run beside the test's own, an
// HTTP client's), and a child forked from a threaded process may make only async-signal-safe
// calls until it execs: an allocation or a stdio call can wait for ever on a lock that another
// thread held at the fork (under a full ASan run a CLI child once hung so for 90 s, before it had
// printed anything). So everything is made before fork(), and the child only redirects, drops
// its uid and execs.
// This process's environment with `set` set on top, as execve takes it (with CStrings).
inline std::vector<std::string> EnvironmentWith(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == name;
    if (!replaced) env.emplace_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

// `strings` as a null-terminated array of pointers into them, as execve takes it.
inline std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

inline pid_t SpawnChild(ChildSpec spec) {
  std::vector<std::string> env = EnvironmentWith(spec.env);
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(env);
  const int log =
      spec.log.empty()
          ? -1
          : open(spec.log.c_str(),
                 O_WRONLY | O_CREAT | O_CLOEXEC | (spec.truncate ? O_TRUNC : O_APPEND), 0644);
  const pid_t pid = fork();
  if (pid == 0) {
    // A child outlives no test: otherwise it would hold ctest's output pipe open, and ctest
    // would wait for it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (log >= 0) {
      if (spec.log_stdout) dup2(log, 1);
      dup2(log, 2);
    }
    if (spec.uid &&
        (setgroups(0, nullptr) != 0 || setresgid(*spec.uid, *spec.uid, *spec.uid) != 0 ||
         setresuid(*spec.uid, *spec.uid, *spec.uid) != 0)) {
      _exit(125);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (log >= 0) close(log);
  return pid;
}

class ServerProcess {
 public:
  ServerProcess(std::string binary, std::string data_dir, std::vector<std::string> extra = {})
      : binary_(std::move(binary)), data_dir_(std::move(data_dir)), extra_(std::move(extra)) {}
  ~ServerProcess() { Stop(SIGKILL); }

  // Starts the server and waits until it answers /healthz.
  bool Start() {
    const std::string port_file = data_dir_ + ".port";
    std::remove(port_file.c_str());
    // A restart listens on the port of the first start, where agents and clients look for it.
    std::vector<std::string> args = {binary_,       "server",
                                     "--data-dir",  data_dir_,
                                     "--listen",    "127.0.0.1:" + std::to_string(port_),
                                     "--port-file", port_file,
                                     "--threads",   "32"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    ChildSpec spec;
    spec.argv = args;
    spec.log = data_dir_ + ".log";
    spec.log_stdout = false;
    pid_ = SpawnChild(std::move(spec));
    if (!Eventually([&] { return !ReadFile(port_file).empty(); })) return false;
    port_ = std::stoi(ReadFile(port_file));
    return tls() || Eventually([&] {
             httplib::Client c("127.0.0.1", port_);
             auto r = c.Get("/healthz");
             return r && r->status == 200;
           });
  }

  void Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // A signal without waiting: SIGSTOP and SIGCONT make an outage that a restart does not.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  bool tls() const {
    for (const std::string& a : extra_) {
      if (a == "--tls-cert") return true;
    }
    return false;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const {
    return std::string(tls() ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
  }
  std::string admin_token() const { return ReadFile(data_dir_ + "/admin.token"); }
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string binary_;
  std::string data_dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A `meridian agent` process: `meridian agent ARGS` with the server and token in its
// environment, its output in `log`. Dies with the test.
class AgentProcess {
 public:
  AgentProcess(std::string binary, std::vector<std::string> args, std::string log,
               std::vector<std::pair<std::string, std::string>> env = {})
      : binary_(std::move(binary)),
        args_(std::move(args)),
        log_(std::move(log)),
        env_(std::move(env)) {}
  ~AgentProcess() { Stop(SIGKILL); }

  // Runs `meridian SUBCOMMAND` instead of `meridian agent` (the Slurm connector).
  AgentProcess& As(std::string subcommand) {
    subcommand_ = std::move(subcommand);
    return *this;
  }

  void Start(const std::string& server, const std::string& token) {
    std::vector<std::string> args = {binary_, subcommand_};
    args.insert(args.end(), args_.begin(), args_.end());
    std::vector<std::pair<std::string, std::string>> env = {
        {"MERIDIAN_SERVER", server},
        {"MERIDIAN_TOKEN", token},
        {"MERIDIAN_CONFIG", "/nonexistent/config.json"}};
    env.insert(env.end(), env_.begin(), env_.end());
    ChildSpec spec;
    spec.argv = args;
    spec.log = log_;
    spec.env = env;
    pid_ = SpawnChild(std::move(spec));
  }
  // SIGTERM: the agent stops its tasks and exits; SIGKILL: it vanishes, its tasks' shims stay.
  void Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // A signal without waiting: SIGSTOP cuts the agent off from the server as a partition would,
  // while its shims and tasks run on.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  bool running() const { return pid_ > 0; }

 private:
  std::string binary_;
  std::vector<std::string> args_;
  std::string log_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::string subcommand_ = "agent";
  pid_t pid_ = -1;
};

struct HttpResult {
  int status = 0;
  Json body;
  std::string text;
};

inline HttpResult Http(const ServerProcess& s, const std::string& method, const std::string& path,
                       const std::string& token, const std::string& body = "",
                       httplib::Headers h = {}) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET"      ? c.Get(path, h)
                      : method == "DELETE" ? c.Delete(path, h)
                      : method == "PUT"    ? c.Put(path, h, body, "application/json")
                                           : c.Post(path, h, body, "application/json");
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.text = r->body;
  out.body = Json::parse(r->body, nullptr, false);
  return out;
}

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `binary ARGS` with its output in `log` and waits up to `seconds` for it to exit. A
// process still running then is killed and reported with code -1.
inline CliResult RunToExit(const std::string& binary, std::vector<std::string> args,
                           const std::string& log, double seconds) {
  args.insert(args.begin(), binary);
  ChildSpec spec;
  spec.argv = args;
  spec.log = log;
  spec.truncate = true;
  const pid_t pid = SpawnChild(std::move(spec));
  CliResult out;
  int status = 0;
  const bool exited = Eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }, seconds);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  } else {
    out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  out.output = ReadFile(log);
  return out;
}

// Runs the real CLI with the server and token in the environment, as a user would.
inline CliResult Cli(const std::string& binary, const std::string& args, const std::string& server,
                     const std::string& token) {
  const std::string cmd = "MERIDIAN_CONFIG=/nonexistent/config.json MERIDIAN_SERVER='" + server +
                          "' MERIDIAN_TOKEN='" + token + "' " + binary + " " + args + " 2>&1";
  CliResult out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.output.append(buf, n);
  const int status = pclose(p);
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Reads the tests of several binaries share: a job as the API shows it, its phase ("" when it
// cannot be read), its events; a file written for a test.
// A token of the user "agents" (role agent), made by `admin`, for agents to register with; empty
// when the server refused either step.
inline std::string AgentToken(const ServerProcess& s, const std::string& admin) {
  const Json user = {{"spec", {{"roles", Json::array({{{"role", "agent"}}})}}}};
  if (Http(s, "PUT", "/api/v1/users/agents", admin, user.dump()).status != 201) return "";
  const HttpResult t = Http(s, "POST", "/api/v1/tokens", admin,
                            Json{{"user", "agents"}, {"description", "test agents"}}.dump());
  return t.status == 201 ? t.body.value("token", "") : "";
}

inline Json GetJob(const ServerProcess& s, const std::string& token, int64_t id) {
  return Http(s, "GET", "/api/v1/jobs/" + std::to_string(id), token).body;
}
inline std::string JobPhase(const ServerProcess& s, const std::string& token, int64_t id) {
  const Json j = GetJob(s, token, id);
  return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
}
inline std::vector<Json> JobEvents(const ServerProcess& s, const std::string& token, int64_t id) {
  const Json e =
      Http(s, "GET", "/api/v1/jobs/" + std::to_string(id) + "/events?limit=1000", token).body;
  std::vector<Json> out;
  if (e.is_object()) {
    for (const Json& x : e.value("items", Json::array())) out.push_back(x);
  }
  return out;
}
inline std::string WriteTestFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// A free loopback port: bound to port 0, read, and closed (Prometheus takes no port file).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// A child process that dies with the test, its output in `log`.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::string& log) {
    ChildSpec spec;
    spec.argv = std::move(argv);
    spec.log = log;
    pid_ = SpawnChild(std::move(spec));
  }
  ~ChildProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace meridian::testing
