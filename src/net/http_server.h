#pragma once

// The control plane's HTTP/1.1 server: event-driven connections on Boost.Beast and Asio, and
// handlers on worker threads (docs/adr/0018-event-driven-http-server.md).
//
// A connection costs a socket and a few kilobytes until a whole request has arrived; only then
// does a worker thread take it. So idle keep-alive connections (agents, dashboards) and slow
// clients hold no thread, and every phase of a request has a deadline: the headers, the body,
// the idle wait between requests, each write. Handlers that wait on purpose (long polls,
// watches) run on threads of their own, bounded apart from the workers, so that they never
// take the workers' place.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "net/http.h"

namespace meridian::net {

struct ServerOptions {
  int workers = 64;            // threads that run handlers
  int io_threads = 2;          // threads that move bytes
  double header_timeout = 10;  // seconds from the first byte of a request to its last header
  double body_timeout = 30;    // seconds for the body, once the headers are in
  double idle_timeout = 120;   // seconds a keep-alive connection may wait for its next request
  double write_timeout = 30;   // seconds for the client to take one response or chunk
  // Seconds a WebSocket (Response::upgrade) may pass without a message or an answered ping
  // before it is closed: pings every half of it keep a live but quiet one open.
  double tunnel_idle_timeout = 60;
  size_t max_body_bytes = 1 << 20;
  int max_connections = 30000;             // open at once; more are closed at accept
  int max_connections_per_address = 2000;  // open at once from one client address
  int max_waiting = 2048;                  // handlers that wait (long polls, watches) at once
  std::string tls_cert;                    // PEM files: serve HTTPS; both or neither
  std::string tls_key;
};

using Handler = std::function<void(const Request&, Response&)>;

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes are tried in the order they were added; the pattern must match the whole path
  // (std::regex, ECMAScript). `waits` says of a request whether its handler may wait (a long
  // poll): those run on their own threads, at most max_waiting at once, past which they are
  // answered 503.
  void Handle(const std::string& method, const std::string& pattern, Handler handler,
              std::function<bool(const Request&)> waits = nullptr);
  // The body of an answer the server makes itself (no route: 404; too large: 413; bad
  // request: 400; a handler threw: 500), as {status, message} → (body, content type).
  void SetErrorBody(std::function<std::pair<std::string, std::string>(int, const std::string&)> f);

  // Called on a handler's thread before every routed request: when it fills the Response and
  // returns true, that is the answer and the route's handler is not run (a follower redirecting
  // writes to its leader). Set before Run.
  void SetGate(std::function<bool(const Request&, Response&)> gate);

  // Answers `req` as a request of its own would be answered (the gate, then the route whose
  // pattern matches), on the calling thread: a channel's handler passes its messages through
  // the same routes, with the authentication and accounting that they do. An answer that is not
  // whole at once (a stream, a later answer, a WebSocket) is refused with 400.
  void Answer(Request& req, Response& res);

  // Binds host:port (port 0: any free one); returns the bound port.
  base::Result<int> Bind(const std::string& host, int port);
  // Serves until Stop(); returns once every connection is closed and every handler has ended.
  void Run();
  // Thread-safe; also from a signal-waiting thread.
  void Stop();

  // Open connections now (for metrics and tests).
  int connections() const;

  struct Impl;  // the listener, connections and threads (http_server.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::net
