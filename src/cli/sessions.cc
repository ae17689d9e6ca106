// `meridian exec` and `meridian port-forward`: the user's end of a session into a running task,
// a WebSocket to the server that the task's agent takes up (docs/adr/0029-sessions-into-
// tasks.md).
#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/strings.h"
#include "cli/verbs.h"
#include "protocol/agent_protocol.h"

namespace meridian::cli {

using protocol::Channel;
using protocol::Frame;

namespace {

// Writes all of `data` to `fd`, waiting while it is full (a terminal shares its non-blocking
// flag with stdin, which the loop reads without blocking).
void WriteAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return;
    }
  }
}

// The terminal in raw mode while a -t session runs: keys go to the remote command as typed
// (^C included), and its echo is the only one.
class RawTerminal {
 public:
  RawTerminal() {
    if (::tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(0, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

int g_winch_pipe = -1;
void OnWinch(int) {
  if (g_winch_pipe >= 0) (void)!::write(g_winch_pipe, "w", 1);
}

std::string SizeFrame() {
  winsize w{};
  if (::ioctl(1, TIOCGWINSZ, &w) != 0 || w.ws_col == 0) return "";
  protocol::TerminalSize size{w.ws_col, w.ws_row};
  return Frame(Channel::kResize, protocol::ToJson(size).dump());
}

// Opens the session's WebSocket, or says why not and gives the exit code.
std::unique_ptr<net::WebSocketClient> Open(Context& c, const std::string& path, int* code) {
  net::WebSocketOpen open = OpenWebSocket(c.client.config(), path);
  if (open.socket) return std::move(open.socket);
  if (open.status == 0) {
    c.err << "meridian: " << open.error << "\n";
    *code = kExitUnavailable;
    return nullptr;
  }
  Response r{open.status, Json::parse(open.body, nullptr, false)};
  c.err << "meridian: " << ErrorMessage(r) << "\n";
  *code = ExitCodeFor(open.status);
  return nullptr;
}

// The exit code a session's status frame gives: the command's, 128 + its signal's, or the
// CLI's own when it could not run.
int EndCode(Context& c, std::string_view data) {
  const Json j = Json::parse(data, nullptr, false);
  auto end = protocol::DecodeSessionEnd(j.is_discarded() ? Json::object() : j);
  if (!end.ok()) {
    c.err << "meridian: the session's status is unreadable: " << end.status().message() << "\n";
    return kExitError;
  }
  if (!end->error.empty()) {
    c.err << "meridian: " << end->error << "\n";
    return kExitError;
  }
  if (end->signal) return 128 + static_cast<int>(*end->signal);
  return end->exit_code ? static_cast<int>(*end->exit_code) : 0;
}

std::string WithIndexAndQuery(const std::string& job_path, const httplib::Params& params) {
  std::string query;
  for (const auto& [k, v] : params) {
    query += (query.empty() ? "" : "&") + k + "=" + httplib::detail::encode_query_param(v);
  }
  return job_path + (job_path.find('?') == std::string::npos ? "?" : "&") + query;
}

}  // namespace

int Exec(Context& c, const ExecOptions& o) {
  if (!JobId(c, o.job)) return kExitUsage;
  if (o.command.empty()) {
    c.err << "meridian: exec: say what to run after --, e.g. meridian exec 12 -- nvidia-smi\n";
    return kExitUsage;
  }
  httplib::Params params{{"task", std::to_string(o.task)}};
  for (const std::string& a : o.command) params.emplace("command", a);
  const bool tty = o.tty && ::isatty(0);
  if (o.tty && !tty) {
    c.err << "meridian: -t: this input is not a terminal; the command runs without one\n";
  }
  if (tty) params.emplace("tty", "1");
  int code = kExitOk;
  auto ws = Open(c, WithIndexAndQuery(JobPath(o.job, "/exec"), params), &code);
  if (!ws) return code;

  std::optional<RawTerminal> raw;
  int winch[2] = {-1, -1};
  if (tty) {
    raw.emplace();
    if (const std::string size = SizeFrame(); !size.empty()) ws->Send(size);
    if (::pipe2(winch, O_CLOEXEC) == 0) {
      g_winch_pipe = winch[1];
      struct sigaction sa {};
      sa.sa_handler = OnWinch;
      sigaction(SIGWINCH, &sa, nullptr);
      ws->Watch(winch[0], [&ws](std::string_view) {
        if (const std::string size = SizeFrame(); !size.empty()) ws->Send(size);
      });
    }
  }
  if (o.stdin) {
    ws->Watch(0, [&ws](std::string_view data) {
      ws->Send(data.empty() ? Frame(Channel::kStdinEnd, "") : Frame(Channel::kStdin, data));
    });
  } else {
    ws->Send(Frame(Channel::kStdinEnd, ""));  // without -i the command reads an empty input
  }
  bool ended = false;
  const std::string broke = ws->Run([&](std::string_view message) {
    if (message.empty()) return;
    const auto channel = static_cast<Channel>(message[0]);
    const std::string_view data = message.substr(1);
    if (channel == Channel::kStdout) WriteAll(1, data);
    if (channel == Channel::kStderr) WriteAll(2, data);
    if (channel == Channel::kStatus && !ended) {
      ended = true;
      raw.reset();  // messages below go to a terminal in its usual mode
      code = EndCode(c, data);
      ws->Close();
    }
  });
  raw.reset();
  if (winch[0] >= 0) {
    signal(SIGWINCH, SIG_DFL);
    g_winch_pipe = -1;
    ::close(winch[0]);
    ::close(winch[1]);
  }
  if (!ended) {
    c.err << "meridian: the session ended before the command did"
          << (broke.empty() ? "" : ": " + broke) << "\n";
    return kExitUnavailable;
  }
  return code;
}

namespace {

// One forwarded connection: its bytes to the task's port and back, until either side ends.
void Forward(Context& c, const std::string& path, int fd) {
  int code = 0;
  auto ws = Open(c, path, &code);
  if (!ws) {
    ::close(fd);
    return;
  }
  ws->Watch(fd, [&ws](std::string_view data) {
    ws->Send(data.empty() ? Frame(Channel::kStdinEnd, "") : Frame(Channel::kStdin, data));
  });
  ws->Run([&](std::string_view message) {
    if (message.empty()) return;
    const auto channel = static_cast<Channel>(message[0]);
    if (channel == Channel::kStdout) WriteAll(fd, message.substr(1));
    if (channel == Channel::kStatus) {
      EndCode(c, message.substr(1));  // an error is said; a clean end says nothing
      ws->Close();
    }
  });
  ws.reset();
  ::close(fd);
}

}  // namespace

int PortForward(Context& c, const std::string& job, int task, const std::string& ports,
                const std::string& address) {
  if (!JobId(c, job)) return kExitUsage;
  const size_t colon = ports.find(':');
  long long local = 0, remote = 0;
  const std::string local_text = colon == std::string::npos ? ports : ports.substr(0, colon);
  const std::string remote_text = colon == std::string::npos ? ports : ports.substr(colon + 1);
  const bool parsed = (local_text.empty() || base::ParseInt64(local_text, &local)) &&
                      base::ParseInt64(remote_text, &remote);
  if (!parsed || local < 0 || local > 65535 || remote < 1 || remote > 65535) {
    c.err << "meridian: port-forward: ports are LOCAL:REMOTE (e.g. 8888:8888, or :8888 for any "
             "free local port), got \""
          << ports << "\"\n";
    return kExitUsage;
  }
  const std::string path =
      WithIndexAndQuery(JobPath(job, "/portforward"),
                        {{"task", std::to_string(task)}, {"port", std::to_string(remote)}});
  // The job must be there and running before anything listens: a typo fails now, not at the
  // first connection.
  auto r = c.client.Call("GET", JobPath(job));
  if (!r.ok()) {
    c.err << "meridian: " << r.status().message() << "\n";
    return kExitUnavailable;
  }
  if (r->status != 200) {
    c.err << "meridian: " << ErrorMessage(*r) << "\n";
    return ExitCodeFor(r->status);
  }
  const Json& status =
      r->body.is_object() && r->body.contains("status") ? r->body["status"] : Json();
  const std::string phase = status.is_object() ? status.value("phase", "") : "";
  if (phase != "Running") {
    c.err << "meridian: job " << job << " is " << phase
          << ", not Running: there is nothing to forward to\n";
    return kExitConflict;
  }

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(local));
  if (inet_pton(AF_INET, address.c_str(), &at.sin_addr) != 1) {
    c.err << "meridian: port-forward: --address \"" << address << "\" is not an IPv4 address\n";
    return kExitUsage;
  }
  if (::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      ::listen(listener, 64) != 0) {
    c.err << "meridian: port-forward: cannot listen on " << address << ":" << local << ": "
          << std::strerror(errno) << "\n";
    return kExitError;
  }
  socklen_t len = sizeof at;
  getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len);
  c.out << "Forwarding from " << address << ":" << ntohs(at.sin_port) << " -> " << remote
        << " of job " << job << " task " << task << std::endl;
  for (;;) {
    const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR) continue;
      c.err << "meridian: port-forward: " << std::strerror(errno) << "\n";
      return kExitError;
    }
    std::thread([&c, path, conn] { Forward(c, path, conn); }).detach();
  }
}

}  // namespace meridian::cli
