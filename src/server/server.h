#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace meridian::server {

struct ServerOptions {
  std::string data_dir = "meridian-data";
  // Empty: SQLite in data_dir. A postgresql:// (or postgres://) URL: that PostgreSQL database.
  std::string store;
  // How long a start waits for the PostgreSQL database to answer (it may be restarting, or
  // failing over) before it gives up; SQLite does not wait.
  double store_wait = 60;
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  // The URL clients and agents reach this server at, where followers redirect writes when it
  // leads (PostgreSQL, several servers). Empty: http(s)://listen, as bound.
  std::string advertise;
  // Provisioners of elastic node pools by name (a NodePool's `provisioner`): the program and its
  // leading arguments (src/cloud/provisioner.h). Set on the server, not in documents, so that
  // applying a document never makes the server run a program of the caller's choosing.
  std::map<std::string, std::vector<std::string>> provisioners;
  std::string tls_cert;  // PEM files; both or neither
  std::string tls_key;
  int threads = 64;  // HTTP workers: they run handlers; connections and long polls hold none
  // Connections (net::ServerOptions): the deadline for a request's headers, how long an idle
  // keep-alive connection stays open, and how many may be open in all and per client address.
  double header_timeout = 10;
  double idle_timeout = 120;
  int max_connections = 30000;
  int max_connections_per_address = 2000;
  int max_waits_per_token = 16;  // long polls and watches open at once with one token
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
  // Called at SIGINT or SIGTERM while the server still serves (the dev estate's agents stop
  // their tasks and report them, then exit), or once it has stopped serving otherwise.
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
