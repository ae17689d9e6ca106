// `meridian server`: flags, and the call into the server module.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "apps/meridian/commands.h"
#include "apps/meridian/config_file.h"
#include "base/duration.h"
#include "base/log.h"
#include "dev/dev_estate.h"
#include "server/server.h"

int Fail(const meridian::base::Status& s) {
  std::cerr << "meridian: " << s.message() << "\n";
  return s.code() == meridian::base::StatusCode::kInvalidArgument ? 2 : 1;
}

CLI::Validator DurationFlag() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto seconds = meridian::base::ParseDuration(text);
        if (!seconds.ok()) return seconds.status().message();
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", *seconds);
        text = buf;
        return "";
      },
      "DURATION", "duration");
}

void AddLogFlags(CLI::App* command, LogFlags* flags) {
  command->add_option("--log-level", flags->level, "lines below it are left out")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  command->add_option("--log-format", flags->format, "text, or json: one JSON object a line")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
}

void InitLog(const LogFlags& flags, const std::string& program) {
  namespace log = meridian::base::log;
  log::LogOptions o;
  o.program = program;
  // The flags' checks allow only names that parse.
  if (auto level = log::ParseLevel(flags.level); level.ok()) o.level = *level;
  if (auto format = log::ParseFormat(flags.format); format.ok()) o.format = *format;
  log::Init(o);
}

void AddServerCommands(CLI::App& app, int* rc) {
  static meridian::server::ServerOptions o;
  CLI::App* server = app.add_subcommand("server", "Run the control plane (API, store, scheduler)");
  server->add_option("--data-dir", o.data_dir, "where the state lives (SQLite, admin token)");
  server->add_option("--store", o.store,
                     "postgresql://... : keep the state in PostgreSQL instead of SQLite in "
                     "--data-dir (which still holds the admin token and job logs)");
  server
      ->add_option("--store-wait", o.store_wait,
                   "how long a start waits for the PostgreSQL database of --store to answer "
                   "(restarting, failing over) before it gives up")
      ->transform(DurationFlag())
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  server->add_option("--listen", o.listen, "HOST:PORT to serve on (port 0: any free port)");
  server->add_option("--advertise", o.advertise,
                     "URL clients reach this server at, where the other servers on its "
                     "PostgreSQL redirect writes while it leads (default: from --listen)");
  server->add_option("--tls-cert", o.tls_cert, "PEM certificate: serve HTTPS");
  server->add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  server->add_option("--threads", o.threads, "HTTP worker threads (they run handlers)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server
      ->add_option("--header-timeout", o.header_timeout,
                   "how long a client has to send a request's headers")
      ->transform(DurationFlag())
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server
      ->add_option("--idle-timeout", o.idle_timeout,
                   "how long an idle keep-alive connection stays open")
      ->transform(DurationFlag())
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server->add_option("--max-connections", o.max_connections, "client connections open at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server
      ->add_option("--max-connections-per-address", o.max_connections_per_address,
                   "client connections open at once from one address")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server
      ->add_option("--max-waits-per-token", o.max_waits_per_token,
                   "long polls and watches open at once with one token; then 429")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server->add_option("--port-file", o.port_file, "write the bound port to this file");
  server
      ->add_option("--history-interval", o.history_interval,
                   "time between samples of the estate for the dashboard's charts")
      ->transform(DurationFlag())
      ->capture_default_str();
  server
      ->add_option("--history-retention", o.history_retention,
                   "how long samples are kept (in the store)")
      ->transform(DurationFlag())
      ->capture_default_str();
  server
      ->add_option("--write-rate", o.write_rate,
                   "writes a second per token after the burst; then 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  server->add_option("--write-burst", o.write_burst, "writes at once per token")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  server
      ->add_option("--failed-auth-limit", o.failed_auths_per_minute,
                   "failed authentications a minute per client address; then 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  static std::vector<std::string> provisioners;
  server->add_option("--provisioner", provisioners,
                     "NAME=COMMAND: the program (and its arguments, split at spaces) that creates "
                     "and deletes the instances of elastic node pools naming provisioner NAME "
                     "(repeatable; docs/adr/0039-elastic-pools.md)");
  static LogFlags log_flags;
  AddLogFlags(server, &log_flags);
  static bool dev = false;
  server->add_flag("--dev", dev,
                   "a whole hybrid estate on this machine: the example configuration and local "
                   "agents with simulated GPUs (a fresh data dir unless --data-dir is given)");
  static std::string dev_slurm = "auto";
  server
      ->add_option("--dev-slurm", dev_slurm,
                   "with --dev: a local Slurm cluster too (a real slurmctld and slurmd, fake GPU "
                   "devices), federated through `meridian slurm-connector`; auto: when Slurm "
                   "and munge are installed and the server runs as root")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  static std::string config;
  AddConfigFlag(server, &config);
  server->callback([rc, server] {
    if (meridian::base::Status s = ApplyConfigFile(server, config); !s.ok()) {
      *rc = Fail(s);
      return;
    }
    for (const std::string& p : provisioners) {
      const size_t eq = p.find('=');
      std::vector<std::string> argv;
      std::istringstream words(eq == std::string::npos ? "" : p.substr(eq + 1));
      for (std::string w; words >> w;) argv.push_back(w);
      if (eq == 0 || eq == std::string::npos || argv.empty()) {
        *rc = Fail(meridian::base::Status::Invalid("--provisioner " + p +
                                                   ": expected NAME=COMMAND [ARGS...]"));
        return;
      }
      o.provisioners[p.substr(0, eq)] = std::move(argv);
    }
    InitLog(log_flags, "meridian");
    meridian::base::Status s;
    if (dev) {
      meridian::dev::DevOptions d;
      d.server = o;
      d.fresh_data_dir = server->count("--data-dir") == 0;
      d.agent_args = {"--log-level", log_flags.level, "--log-format", log_flags.format};
      d.slurm = dev_slurm;
      s = meridian::dev::RunDevEstate(d);
    } else {
      s = meridian::server::RunServer(o);
    }
    *rc = s.ok() ? 0 : Fail(s);
  });
}
