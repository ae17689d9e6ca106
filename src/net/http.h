#pragma once

// What a handler of the HTTP server sees: one parsed request, and the response it fills in.
// Plain data, with no socket behind it: handlers run on worker threads, and the server's I/O
// threads own the connections (http_server.h).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meridian::net {

// Header names compare without case (RFC 9110 section 5.1).
struct LessNoCase {
  bool operator()(const std::string& a, const std::string& b) const;
};
using Headers = std::multimap<std::string, std::string, LessNoCase>;

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // decoded, without the query
  Headers headers;
  std::multimap<std::string, std::string> params;  // the query, decoded
  std::string body;
  std::string remote_addr;
  // The client asked to turn the connection into a WebSocket (RFC 6455): a handler may answer
  // with Response::upgrade.
  bool websocket = false;
  // The route's pattern matched against the path: [0] the whole path, then each capture.
  std::vector<std::string> matches;

  bool has_param(const std::string& key) const { return params.count(key) > 0; }
  // The first value of a query parameter, or "".
  std::string get_param_value(const std::string& key) const;
  bool has_header(const std::string& key) const { return headers.count(key) > 0; }
  std::string get_header_value(const std::string& key) const;
};

// Where a streamed answer goes, one chunk at a time (chunked transfer encoding).
class Sink {
 public:
  virtual ~Sink() = default;
  // False when the client is gone or too slow to take it (the stream should end).
  virtual bool write(const char* data, size_t size) = 0;
  // The stream is complete: no more writes.
  virtual void done() = 0;
};

// A WebSocket that a handler took over (Response::upgrade): whole binary messages each way.
// One thread may read while another writes; Close may come from either, and makes every call
// after it fail. A call also fails once the peer has gone or the server stops.
class Tunnel {
 public:
  virtual ~Tunnel() = default;
  // The next message, waiting as long as the peer is alive (pings find out that it is not).
  virtual bool Read(std::string* message) = 0;
  // Sends one message; false when it could not be sent within the write timeout.
  virtual bool Write(std::string_view message) = 0;
  // Ends the WebSocket (a close frame, then the connection).
  virtual void Close() = 0;
};

// A WebSocket that a handler took over as a channel of messages (Response::channel): the server
// reads each message on its I/O loop and hands it to the handler's function on a worker, one at
// a time and in order, holding no thread while the channel is quiet (10,000 agents each keep
// one). The handler sends through this, from any thread.
class Channel {
 public:
  virtual ~Channel() = default;
  // Queues one message; false once the channel has ended.
  virtual bool Send(std::string message) = 0;
  // Ends the channel once what is queued is written.
  virtual void Close() = 0;
  virtual bool open() const = 0;
};

struct Response;

// An answer a handler gives later, from any thread (Response::later): meanwhile the connection
// waits holding no thread, so that many clients can wait at once (agents for their next orders).
class Later {
 public:
  virtual ~Later() = default;
  // Sends `response` as the answer; false when an answer was sent already (this one or the
  // timeout's), or the connection is gone. Thread-safe.
  virtual bool Answer(Response response) = 0;
  // Whether the connection still waits for its answer.
  virtual bool waiting() const = 0;
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // Set for a streamed answer: called over and over, on the handler's thread, until it calls
  // sink.done() or returns false.
  std::function<bool(Sink&)> stream;
  // Set to take the connection over as a WebSocket (a request with `websocket`): the server
  // completes the handshake, then calls this on the handler's thread, which should be one of the
  // route's waits, and closes the connection when it returns. A request that asked for no
  // WebSocket is answered 400.
  std::function<void(std::shared_ptr<Tunnel>)> upgrade;
  // Set to take the connection over as a channel (a request with `websocket`): once the
  // handshake is done the server calls this, on a worker, with the channel; what it returns is
  // called with each message, on a worker, the next only once it has returned.
  std::function<std::function<void(std::string)>(std::shared_ptr<Channel>)> channel;
  // Set to answer later without holding a thread (a long poll): the server calls this on the
  // handler's thread, once the handler has returned, with the Later to answer through. If
  // nothing answers within later_timeout seconds, the server sends this Response as it is
  // (status, headers, body) instead.
  std::function<void(std::shared_ptr<Later>)> later;
  double later_timeout = 30;

  void set_header(const std::string& key, const std::string& value);
  void set_content(std::string content, const std::string& content_type);
  void set_chunked_content_provider(const std::string& content_type,
                                    std::function<bool(Sink&)> provider);
};

// "a%20b" → "a b"; with plus_is_space, "+" too (query strings).
std::string PercentDecode(const std::string& s, bool plus_is_space);
// The query "a=1&b=x%20y" as its parameters.
std::multimap<std::string, std::string> ParseQuery(const std::string& query);

}  // namespace meridian::net
