#pragma once

// The client end of a WebSocket (RFC 6455) to the control plane, on Boost.Beast: what `meridian
// exec` and `port-forward` open to the server, and what an agent opens to carry a session into
// one of its tasks (docs/adr/0029-sessions-into-tasks.md).
//
// One thread drives everything: messages from the server, data from local file descriptors (a
// terminal, a child's pipes, a forwarded socket) and timers all arrive as callbacks on the thread
// that calls Run, so that none of them needs a lock, and Beast's rule of one read and one write
// at a time holds by construction.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace meridian::net {

struct WebSocketTarget {
  std::string server;                          // http://host:port or https://host:port
  std::string path;                            // with its query
  std::map<std::string, std::string> headers;  // e.g. Authorization
  std::string ca_cert;                         // PEM file to trust; empty: the system's
  bool insecure = false;                       // skip TLS verification (tests only)
  double connect_timeout = 10;                 // seconds for TCP, TLS and the handshake
  double idle_timeout = 60;  // seconds without a message or an answered ping: the peer is gone
};

class WebSocketClient;

// How a connection attempt went: a WebSocket, or the server's answer that declined it (its
// status, body and Location), or why no answer came (status 0).
struct WebSocketOpen {
  std::unique_ptr<WebSocketClient> socket;
  int status = 0;
  std::string body;
  std::string location;
  std::string error;  // what went wrong, in words, when there is no socket
};

class WebSocketClient {
 public:
  static WebSocketOpen Connect(const WebSocketTarget& target);
  virtual ~WebSocketClient() = default;

  // Queues one binary message; messages go out in the order queued.
  virtual void Send(std::string message) = 0;
  // Reads `fd` (a duplicate of it: the caller keeps its own) as data arrives: each chunk goes to
  // `on_data`, then an empty view once it has ended. A regular file is read whole at once.
  virtual void Watch(int fd, std::function<void(std::string_view)> on_data) = 0;
  // Writes to `fd` (a duplicate), in order, without blocking the loop where `fd` allows it.
  virtual void WriteTo(int fd, std::string data) = 0;
  // Closes this client's duplicate of `fd` once what was queued for it is written (a child's
  // stdin: it sees the end of its input).
  virtual void CloseWhenWritten(int fd) = 0;
  // Calls `fn` on the loop after `seconds`.
  virtual void After(double seconds, std::function<void()> fn) = 0;
  // Sends what is queued, then a close frame; Run returns once the server has answered it.
  virtual void Close() = 0;
  // Runs the loop until the WebSocket has ended; returns "" for a close by either side, or why
  // it broke. `on_message` gets each message from the server.
  virtual std::string Run(std::function<void(std::string_view)> on_message) = 0;
};

}  // namespace meridian::net
