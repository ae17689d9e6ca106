#pragma once

// What a handler of the HTTP server sees: one parsed request, and the response it fills in.
// Plain data, with no socket behind it: handlers run on worker threads, and the server's I/O
// threads own the connections (http_server.h).

#include <functional>
#include <map>
#include <string>
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

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // Set for a streamed answer: called over and over, on the handler's thread, until it calls
  // sink.done() or returns false.
  std::function<bool(Sink&)> stream;

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
