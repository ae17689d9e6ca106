#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace meridian::server {

struct ServerOptions {
  std::string data_dir = "meridian-data";
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  std::string tls_cert;                   // PEM files; both or neither
  std::string tls_key;
  int threads = 64;       // HTTP workers: each keep-alive connection or watch holds one
  std::string port_file;  // when set, the bound port is written there (for tests and scripts)
  // The dashboard's charts: a sample of the estate every history_interval seconds, kept in the
  // store for history_retention seconds.
  double history_interval = 10;
  double history_retention = 6 * 3600;
  // /metrics without a token (`server --dev` only; the start-up log says so). Otherwise it needs
  // a token of an admin or of a user with the metrics role.
  bool open_metrics = false;
  // Per-token writes (a burst, then a rate a second) and failed authentications per client
  // address a minute, past which requests answer 429 (api::ApiOptions; 0 turns a limit off).
  double write_rate = 50;
  double write_burst = 500;
  double failed_auths_per_minute = 60;
  // Called on its own thread once the server serves, with its URL and the admin token (empty
  // when the data dir existed before and its token file is gone); used by `server --dev`.
  std::function<void(const std::string& url, const std::string& admin_token)> on_ready;
  // Called after the server has stopped serving.
  std::function<void()> on_stop;
};

// Runs the control plane until SIGINT or SIGTERM: the store under data_dir, the scheduler loop
// and the HTTP API. On first start it creates data_dir (mode 0700), the admin user, and writes
// its token to data_dir/admin.token (mode 0600). Returns an error, saying what to do, when it
// cannot start, and refuses a data dir that is open to others than its owner, a database that
// fails SQLite's quick_check, and a missing or empty database beside an admin.token (a data dir
// that held a database before: starting afresh would write a new admin token over the old).
base::Status RunServer(const ServerOptions& options);

}  // namespace meridian::server
