#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "net/websocket_client.h"

namespace meridian::cli {

using Json = nlohmann::json;

// Exit codes of every client verb (documented in docs/user-guide.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // the server refused for another reason, or a server error
  kExitUsage = 2,        // bad flags or invalid input (validation errors)
  kExitUnavailable = 3,  // cannot reach the server: connection, TLS, timeout
  kExitAuth = 4,         // not authenticated, or not allowed
  kExitNotFound = 5,
  kExitConflict = 6,  // already exists, changed meanwhile, or already ended
};

// Where to reach the server and as whom. Flags win over the environment (MERIDIAN_SERVER,
// MERIDIAN_TOKEN, MERIDIAN_CA_CERT, as Nomad and Vault do it), which wins over the file that
// `meridian login` writes.
struct ClientConfig {
  std::string server;
  std::string token;
  std::string ca_cert;
  bool insecure = false;  // skip TLS verification (tests, never production)
  // Keep one connection open and send every call over it (node agents: a heartbeat every few
  // seconds need not cost a connection each). Calls from several threads at once take turns.
  bool keep_connection = false;
  // Seconds a call waits for its answer once sent. A runner that must act on its own when the
  // server goes silent (the Slurm connector's lease) waits less than its lease.
  double read_timeout = 60;
};

// $MERIDIAN_CONFIG, else $HOME/.config/meridian/config.json.
std::string DefaultConfigPath();
base::Result<ClientConfig> LoadConfig(const std::string& path);  // empty config when missing
base::Status SaveConfig(const std::string& path, const ClientConfig& config);  // mode 0600
ClientConfig ResolveConfig(const ClientConfig& flags, const ClientConfig& file);

struct Response {
  int status = 0;
  Json body;  // the decoded JSON body (null when there was none)
};

struct RawResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

// A JSON-over-HTTP(S) client of /api/v1. Transport failures come back as a Status whose
// message says what to check (is the server running, the certificate trusted).
class Client {
 public:
  explicit Client(ClientConfig config);
  const ClientConfig& config() const { return config_; }
  // From the next call on, waits at most `seconds` for an answer (ClientConfig::read_timeout).
  // Not while another thread calls through this client without a kept connection.
  void SetReadTimeout(double seconds);

  // `headers`: sent besides the token's (an Idempotency-Key).
  base::Result<Response> Call(const std::string& method, const std::string& path,
                              const Json* body = nullptr,
                              const std::map<std::string, std::string>& headers = {}) const;
  // Any body (log uploads, task output): sent and answered as it is.
  base::Result<RawResponse> Raw(const std::string& method, const std::string& path,
                                const std::string& payload, const char* content_type,
                                const std::map<std::string, std::string>& headers = {}) const;

 private:
  ClientConfig config_;
  struct Connection;                        // the one kept open (keep_connection)
  std::shared_ptr<Connection> connection_;  // shared by copies of this client
};

// Opens `path` as a WebSocket on the configured server (servers in turn while one cannot be
// reached; a follower's 307 to its leader followed), with the config's token and TLS settings.
net::WebSocketOpen OpenWebSocket(const ClientConfig& config, const std::string& path);

// The exit code for an HTTP status; and the message of an error body.
int ExitCodeFor(int http_status);
std::string ErrorMessage(const Response& r);

}  // namespace meridian::cli
