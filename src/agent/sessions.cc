#include "agent/sessions.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/task_isolation.h"
#include "base/log.h"

namespace meridian::agent {

using Json = nlohmann::json;
using protocol::Channel;
using protocol::EndFrame;
using protocol::ErrorFrame;
using protocol::Frame;

namespace {

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  void Reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// The command's ends of its stdin, stdout and stderr, and ours: a terminal, or three pipes.
struct Stdio {
  Fd in, out, err;  // ours: we write `in`, read `out` and `err` (a terminal: all one fd)
  Fd child_in, child_out, child_err;
  bool tty = false;

  bool Open(bool terminal, std::string* error) {
    tty = terminal;
    if (terminal) {
      int master = -1, slave = -1;
      winsize size{24, 80, 0, 0};
      if (openpty(&master, &slave, nullptr, nullptr, &size) != 0) {
        *error = std::string("cannot open a terminal: ") + std::strerror(errno);
        return false;
      }
      fcntl(master, F_SETFD, FD_CLOEXEC);
      in.fd = master;
      out.fd = ::dup(master);
      fcntl(out.fd, F_SETFD, FD_CLOEXEC);
      child_in.fd = slave;
      child_out.fd = ::dup(slave);
      child_err.fd = ::dup(slave);
      return true;
    }
    int a[2], b[2], c[2];
    if (pipe2(a, O_CLOEXEC) != 0 || pipe2(b, O_CLOEXEC) != 0 || pipe2(c, O_CLOEXEC) != 0) {
      *error = std::string("cannot make pipes: ") + std::strerror(errno);
      return false;
    }
    child_in.fd = a[0];
    in.fd = a[1];
    out.fd = b[0];
    child_out.fd = b[1];
    err.fd = c[0];
    child_err.fd = c[1];
    return true;
  }
};

// Starts `meridian-shim --exec` on the command's stdio, the spec on its fd 3 and its status
// pipe on fd 4; returns its pid (-1 on failure, with `error`).
pid_t StartShim(const SessionWork& work, Stdio& io, int status_write, std::string* error) {
  int spec[2];
  if (pipe2(spec, O_CLOEXEC) != 0) {
    *error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return -1;
  }
  const std::string shim = work.shim;
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls here: the agent has other threads.
    dup2(io.child_in.fd, 0);
    dup2(io.child_out.fd, 1);
    dup2(io.child_err.fd, 2);
    dup2(spec[0], 3);
    dup2(status_write, 4);
    CloseFdsFrom(5);
    execl(shim.c_str(), shim.c_str(), "--exec", static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(spec[0]);
  if (pid < 0) {
    ::close(spec[1]);
    *error = std::string("cannot start the shim: ") + std::strerror(errno);
    return -1;
  }
  const std::string text = protocol::ToJson(work.exec).dump();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(spec[1], text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(spec[1]);
  return pid;
}

void RunExec(const SessionWork& work, net::WebSocketClient& ws) {
  Stdio io;
  std::string error;
  if (!io.Open(work.offer.tty, &error)) {
    ws.Send(ErrorFrame(error));
    ws.Close();
    ws.Run([](std::string_view) {});
    return;
  }
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) return;
  Fd status_read(status_pipe[0]);
  Fd status_write(status_pipe[1]);
  const pid_t shim = StartShim(work, io, status_write.fd, &error);
  io.child_in.Reset();
  io.child_out.Reset();
  io.child_err.Reset();
  status_write.Reset();
  if (shim < 0) {
    ws.Send(ErrorFrame(error));
    ws.Close();
    ws.Run([](std::string_view) {});
    return;
  }
  // The session ends once the command's output has ended and its status has come.
  int open_streams = io.tty ? 2 : 3;
  std::string status;
  bool command_ended = false;
  auto finished = [&] {
    if (--open_streams > 0) return;
    command_ended = true;
    const Json j = Json::parse(status, nullptr, false);
    auto end = protocol::DecodeSessionEnd(j.is_discarded() ? Json::object() : j);
    if (status.empty() || !end.ok()) {
      ws.Send(ErrorFrame("the command's supervisor ended without a status"));
    } else {
      ws.Send(EndFrame(*end));
    }
    ws.Close();
  };
  auto forward = [&](Channel channel) {
    return [&, channel](std::string_view data) {
      if (data.empty()) return finished();
      ws.Send(Frame(channel, data));
    };
  };
  ws.Watch(io.out.fd, forward(Channel::kStdout));
  if (!io.tty) ws.Watch(io.err.fd, forward(Channel::kStderr));
  ws.Watch(status_read.fd, [&](std::string_view data) {
    if (data.empty()) return finished();
    status.append(data);
  });
  bool input_ended = false;
  const std::string broke = ws.Run([&](std::string_view message) {
    if (message.empty()) return;
    const auto channel = static_cast<Channel>(message[0]);
    const std::string_view data = message.substr(1);
    if (channel == Channel::kStdin && !input_ended) {
      ws.WriteTo(io.in.fd, std::string(data));
    } else if (channel == Channel::kStdinEnd && !input_ended) {
      input_ended = true;
      // A terminal has no end of input but the one its line discipline reads: ^D.
      if (io.tty) {
        ws.WriteTo(io.in.fd, "\x04");
      } else {
        // The loop's copy closes once what was queued is written; ours now.
        ws.CloseWhenWritten(io.in.fd);
        io.in.Reset();
      }
    } else if (channel == Channel::kResize && io.tty) {
      const Json j = Json::parse(data, nullptr, false);
      auto size = protocol::DecodeTerminalSize(j.is_discarded() ? Json::object() : j);
      if (size.ok()) {
        winsize w{static_cast<unsigned short>(size->rows), static_cast<unsigned short>(size->cols),
                  0, 0};
        ::ioctl(io.in.fd, TIOCSWINSZ, &w);
      }
    }
  });
  // The user went away (or the server): the command ends with the session.
  if (!command_ended) {
    ::kill(shim, SIGTERM);
    base::log::Info("session {} into job {} task {} ended{}; its command is being stopped",
                    work.offer.id, work.offer.job, work.offer.task,
                    broke.empty() ? "" : " (" + broke + ")");
  }
  // The agent's loop reaps children too; ours may be gone already.
  for (int i = 0; i < 200 && waitpid(shim, nullptr, WNOHANG) == 0; ++i) usleep(20000);
}

void RunPortForward(const SessionWork& work, net::WebSocketClient& ws) {
  Fd socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(work.offer.port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (socket.fd < 0 || ::connect(socket.fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ws.Send(ErrorFrame("nothing listens on port " + std::to_string(work.offer.port) + " of node " +
                       work.node + " (" + std::strerror(errno) + ")"));
    ws.Close();
    ws.Run([](std::string_view) {});
    return;
  }
  ws.Watch(socket.fd, [&](std::string_view data) {
    if (!data.empty()) return ws.Send(Frame(Channel::kStdout, data));
    ws.Send(EndFrame(protocol::SessionEnd{}));
    ws.Close();
  });
  ws.Run([&](std::string_view message) {
    if (message.empty()) return;
    const auto channel = static_cast<Channel>(message[0]);
    if (channel == Channel::kStdin) ws.WriteTo(socket.fd, std::string(message.substr(1)));
    if (channel == Channel::kStdinEnd) ::shutdown(socket.fd, SHUT_WR);
  });
}

}  // namespace

void RunSession(const SessionWork& work) {
  net::WebSocketOpen open =
      cli::OpenWebSocket(work.server, "/api/v1/agents/" + work.node + "/sessions/" + work.offer.id);
  if (!open.socket) {
    base::log::Warn("session {} into job {} task {}: {}{}", work.offer.id, work.offer.job,
                    work.offer.task, open.error, open.body.empty() ? "" : ": " + open.body);
    return;
  }
  net::WebSocketClient& ws = *open.socket;
  if (!work.refusal.empty()) {
    ws.Send(ErrorFrame(work.refusal));
    ws.Close();
    ws.Run([](std::string_view) {});
    return;
  }
  if (work.offer.kind == "port-forward") return RunPortForward(work, ws);
  RunExec(work, ws);
}

}  // namespace meridian::agent
