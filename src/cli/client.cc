#include "cli/client.h"

#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "base/strings.h"

namespace meridian::cli {

using base::Status;

std::string DefaultConfigPath() {
  if (const char* p = std::getenv("MERIDIAN_CONFIG"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/meridian/config.json";
}

base::Result<ClientConfig> LoadConfig(const std::string& path) {
  ClientConfig c;
  std::ifstream in(path);
  if (!in) return c;
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Invalid(path + ": not a Meridian client configuration (JSON object)");
  }
  c.server = j.value("server", "");
  c.token = j.value("token", "");
  c.ca_cert = j.value("caCert", "");
  c.insecure = j.value("insecureSkipVerify", false);
  return c;
}

Status SaveConfig(const std::string& path, const ClientConfig& c) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  Json j = {{"server", c.server}, {"token", c.token}};
  if (!c.ca_cert.empty()) j["caCert"] = c.ca_cert;
  if (c.insecure) j["insecureSkipVerify"] = true;
  {
    std::ofstream out(path, std::ios::trunc);
    if (!out) return Status::Io("cannot write " + path);
    chmod(path.c_str(), 0600);
    out << j.dump(2) << "\n";
    if (!out) return Status::Io("cannot write " + path);
  }
  return Status::Ok();
}

ClientConfig ResolveConfig(const ClientConfig& flags, const ClientConfig& file) {
  auto pick = [](const std::string& flag, const char* env, const std::string& from_file) {
    if (!flag.empty()) return flag;
    if (const char* v = std::getenv(env); v && *v) return std::string(v);
    return from_file;
  };
  ClientConfig c;
  c.server = pick(flags.server, "MERIDIAN_SERVER", file.server);
  c.token = pick(flags.token, "MERIDIAN_TOKEN", file.token);
  c.ca_cert = pick(flags.ca_cert, "MERIDIAN_CA_CERT", file.ca_cert);
  c.insecure = flags.insecure || file.insecure;
  return c;
}

base::Result<Response> Client::Call(const std::string& method, const std::string& path,
                                    const Json* body,
                                    const std::map<std::string, std::string>& headers) const {
  auto r = Raw(method, path, body ? body->dump() : "", "application/json", headers);
  if (!r.ok()) return r.status();
  Response out;
  out.status = r->status;
  if (!r->body.empty()) {
    out.body = Json::parse(r->body, nullptr, false);
    if (out.body.is_discarded()) out.body = Json{{"text", r->body}};
  }
  return out;
}

// What copies of a client share: the server in use (one of the list, or the leader a follower
// redirected to) and, with keep_connection, the connection kept open to it.
struct Client::Connection {
  std::mutex mu;
  size_t index = 0;        // of the server list: the one in use, or the next to try
  std::string redirected;  // the leader's URL a follower pointed at, while it answers
  std::unique_ptr<httplib::Client> http;  // made on first use, and again after a failure
  std::string http_base;                  // the server `http` is connected to
};

Client::Client(ClientConfig config)
    : config_(std::move(config)), connection_(std::make_shared<Connection>()) {}

void Client::SetReadTimeout(double seconds) {
  // Under the connection's lock, as calls read the config (a kept connection's under it); a call
  // in flight keeps the timeout it began with.
  std::lock_guard<std::mutex> lock(connection_->mu);
  config_.read_timeout = seconds;
  if (connection_->http) {  // the kept connection goes on, with the new timeout
    connection_->http->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::duration<double>(seconds)));
  }
}

namespace {

std::unique_ptr<httplib::Client> NewHttpClient(const ClientConfig& config,
                                               const std::string& server) {
  auto http = std::make_unique<httplib::Client>(server);
  http->set_connection_timeout(5);
  http->set_tcp_nodelay(true);
  http->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(config.read_timeout)));
  http->set_keep_alive(config.keep_connection);
  if (!config.token.empty()) http->set_bearer_token_auth(config.token);
  if (!config.ca_cert.empty()) http->set_ca_cert_path(config.ca_cert.c_str());
  http->enable_server_certificate_verification(!config.insecure);
  return http;
}

httplib::Result Send(httplib::Client& http, const std::string& method, const std::string& path,
                     const std::string& payload, const char* content_type,
                     const httplib::Headers& headers) {
  return method == "GET"      ? http.Get(path, headers)
         : method == "DELETE" ? http.Delete(path, headers)
         : method == "PUT"    ? http.Put(path, headers, payload, content_type)
                              : http.Post(path, headers, payload, content_type);
}

std::vector<std::string> Servers(const std::string& list) {
  std::vector<std::string> out;
  for (std::string_view part : base::Split(list, ',')) {
    std::string server(base::Trim(part));
    while (!server.empty() && server.back() == '/') server.pop_back();
    if (!server.empty()) out.push_back(server);
  }
  return out;
}

// "http://host:port/api/v1/jobs?x" -> "http://host:port"; "" when it is not an http(s) URL.
std::string Origin(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0))
    return "";
  return url.substr(0, url.find('/', scheme + 3));
}

std::string Unreachable(const ClientConfig& config, const std::string& server, httplib::Error e) {
  std::string why;
  switch (e) {
    case httplib::Error::Connection:
      why = "connection refused or host unreachable (is `meridian server` running there?)";
      break;
    case httplib::Error::ConnectionTimeout:
      why = "timed out connecting";
      break;
    case httplib::Error::SSLServerVerification:
      why = "TLS: the server's certificate is not trusted (pass --ca-cert FILE)";
      break;
    case httplib::Error::SSLConnection:
      why = "TLS handshake failed (is the server serving HTTPS on this port?)";
      break;
    case httplib::Error::SSLLoadingCerts:
      why = "TLS: cannot load the CA certificate " + config.ca_cert;
      break;
    default:
      why = httplib::to_string(e);
  }
  return "cannot reach " + server + ": " + why;
}

}  // namespace

// Servers are tried in turn: a call that could not reach one (it was not sent: refused, or no
// connection in time) goes to the next, and the next call starts from the one that answered. A
// follower's 307 names its leader, which the call (and the next ones) goes to instead. A call
// that was sent and got no answer is not sent again: it may have been done.
base::Result<RawResponse> Client::Raw(const std::string& method, const std::string& path,
                                      const std::string& payload, const char* content_type,
                                      const std::map<std::string, std::string>& extra) const {
  const httplib::Headers headers(extra.begin(), extra.end());
  const std::vector<std::string> servers = Servers(config_.server);
  if (servers.empty()) {
    return Status::Invalid(
        "no server: pass --server, set MERIDIAN_SERVER, or run `meridian login --server URL`");
  }
  for (const std::string& server : servers) {
    if (server.rfind("http://", 0) != 0 && server.rfind("https://", 0) != 0) {
      return Status::Invalid("server \"" + server + "\" must start with http:// or https://");
    }
  }
  Connection& c = *connection_;
  // Calls over the kept connection take turns; others only read and update where to go.
  std::unique_lock<std::mutex> turn(c.mu, std::defer_lock);
  if (config_.keep_connection) turn.lock();
  auto locked = [&](auto&& f) {
    if (config_.keep_connection) return f();
    std::lock_guard<std::mutex> lock(c.mu);
    return f();
  };
  std::string server = locked([&] {
    if (c.index >= servers.size()) c.index = 0;
    return c.redirected.empty() ? servers[c.index] : c.redirected;
  });
  size_t failures = 0;
  int redirects = 0;
  for (;;) {
    httplib::Result r = [&] {
      if (!config_.keep_connection) {
        return Send(*NewHttpClient(config_, server), method, path, payload, content_type, headers);
      }
      const bool reused = c.http != nullptr && c.http_base == server;
      if (!reused) {
        c.http = NewHttpClient(config_, server);
        c.http_base = server;
      }
      httplib::Result sent = Send(*c.http, method, path, payload, content_type, headers);
      if (!sent) {
        // The server may have closed the kept connection (its idle timeout, a restart): a call
        // that was not sent goes once more on a new one.
        const bool unsent =
            sent.error() == httplib::Error::Write || sent.error() == httplib::Error::Connection;
        c.http = NewHttpClient(config_, server);
        if (reused && unsent) sent = Send(*c.http, method, path, payload, content_type, headers);
        if (!sent) c.http.reset();
      }
      return sent;
    }();
    if (!r) {
      const httplib::Error e = r.error();
      const bool unsent = e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout;
      // The next server of the list, each tried once.
      if (unsent && ++failures < servers.size()) {
        server = locked([&] {
          c.redirected.clear();
          c.index = (c.index + 1) % servers.size();
          return servers[c.index];
        });
        continue;
      }
      return Status(base::StatusCode::kIoError, Unreachable(config_, server, e));
    }
    if ((r->status == 307 || r->status == 308) && redirects < 3) {
      const std::string leader = Origin(r->get_header_value("Location"));
      if (!leader.empty() && leader != server) {
        ++redirects;
        server = leader;
        locked([&] {
          c.redirected = leader;
          return 0;
        });
        continue;
      }
    }
    RawResponse out;
    out.status = r->status;
    out.body = std::move(r->body);
    for (const auto& [k, v] : r->headers) out.headers[k] = v;
    return out;
  }
}

net::WebSocketOpen OpenWebSocket(const ClientConfig& config, const std::string& path) {
  net::WebSocketOpen last;
  last.error = "no server configured (--server, MERIDIAN_SERVER or `meridian login`)";
  std::vector<std::string> servers = Servers(config.server);
  for (size_t i = 0, redirects = 0; i < servers.size(); ++i) {
    net::WebSocketTarget target;
    target.server = servers[i];
    target.path = path;
    if (!config.token.empty()) target.headers["Authorization"] = "Bearer " + config.token;
    target.ca_cert = config.ca_cert;
    target.insecure = config.insecure;
    last = net::WebSocketClient::Connect(target);
    if ((last.status == 307 || last.status == 308) && redirects++ < 3) {
      const std::string leader = Origin(last.location);
      if (!leader.empty()) {
        servers.insert(servers.begin() + static_cast<std::ptrdiff_t>(i) + 1, leader);
        continue;
      }
    }
    if (last.status != 0) return last;  // an answer: a WebSocket, or the server's refusal
  }
  return last;
}

int ExitCodeFor(int status) {
  if (status < 300) return kExitOk;
  if (status == 400 || status == 413) return kExitUsage;
  if (status == 401 || status == 403) return kExitAuth;
  if (status == 404) return kExitNotFound;
  if (status == 409 || status == 422) return kExitConflict;
  return kExitError;
}

std::string ErrorMessage(const Response& r) {
  if (r.body.is_object() && r.body.contains("error")) {
    const Json& e = r.body.at("error");
    std::string msg = e.value("message", "request failed");
    if (e.contains("details") && e.at("details").size() > 1) {
      msg.clear();
      for (const Json& d : e.at("details")) {
        std::string where = d.value("file", "");
        if (d.contains("line")) {
          where += (where.empty() ? "" : ":") + std::to_string(d.value("line", 0)) + ":" +
                   std::to_string(d.value("column", 0));
        }
        msg += (msg.empty() ? "" : "\n") + (where.empty() ? "" : where + ": ") +
               d.value("field", "") + ": " + d.value("message", "");
      }
    }
    if (r.status == 401) msg += " (run `meridian login`, or set MERIDIAN_TOKEN)";
    return msg;
  }
  return "HTTP " + std::to_string(r.status);
}

}  // namespace meridian::cli
