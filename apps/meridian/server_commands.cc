// `meridian server`: flags, and the call into the server module.
#include <iostream>

#include "apps/meridian/commands.h"
#include "dev/dev_estate.h"
#include "server/server.h"

int Fail(const meridian::base::Status& s) {
  std::cerr << "meridian: " << s.message() << "\n";
  return s.code() == meridian::base::StatusCode::kInvalidArgument ? 2 : 1;
}

void AddServerCommands(CLI::App& app, int* rc) {
  static meridian::server::ServerOptions o;
  CLI::App* server = app.add_subcommand("server", "Run the control plane (API, store, scheduler)");
  server->add_option("--data-dir", o.data_dir, "where the state lives (SQLite, admin token)");
  server->add_option("--listen", o.listen, "HOST:PORT to serve on (port 0: any free port)");
  server->add_option("--tls-cert", o.tls_cert, "PEM certificate: serve HTTPS");
  server->add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  server->add_option("--threads", o.threads, "HTTP worker threads");
  server->add_option("--port-file", o.port_file, "write the bound port to this file");
  server->add_option("--history-interval", o.history_interval,
                     "seconds between samples of the estate for the dashboard's charts")
      ->capture_default_str();
  server->add_option("--history-retention", o.history_retention,
                     "seconds of samples kept (in the store)")
      ->capture_default_str();
  server->add_option("--write-rate", o.write_rate,
                     "writes a second per token after the burst; then 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  server->add_option("--write-burst", o.write_burst, "writes at once per token")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server->add_option("--failed-auth-limit", o.failed_auths_per_minute,
                     "failed authentications a minute per client address; then 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  static bool dev = false;
  server->add_flag("--dev", dev,
                   "a whole hybrid estate on this machine: the example configuration and local "
                   "agents with simulated GPUs (a fresh data dir unless --data-dir is given)");
  server->callback([rc, server] {
    meridian::base::Status s;
    if (dev) {
      meridian::dev::DevOptions d;
      d.server = o;
      d.fresh_data_dir = server->count("--data-dir") == 0;
      s = meridian::dev::RunDevEstate(d);
    } else {
      s = meridian::server::RunServer(o);
    }
    *rc = s.ok() ? 0 : Fail(s);
  });
}
