#include "server/server.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "api/api.h"
#include "api/dashboard.h"
#include "base/dir_lock.h"
#include "base/files.h"
#include "base/log.h"
#include "base/strings.h"
#include "net/http_server.h"
#include "server/alerting.h"
#include "server/budgets.h"
#include "server/controller.h"
#include "server/idle_reclaim.h"
#include "server/leadership.h"
#include "server/restart_in_place.h"
#include "server/telemetry_metrics.h"
#include "store/postgres/postgres_store.h"
#include "store/sqlite/sqlite_store.h"

namespace meridian::server {

using base::Status;

namespace {

// Times every store call for the metrics; otherwise passes through.
class InstrumentedStore final : public store::Store {
 public:
  InstrumentedStore(store::Store* inner, api::Metrics* metrics) : inner_(inner), metrics_(metrics) {
    metrics_->Describe("meridian_store_operation_duration_seconds", "histogram",
                       "Store transactions by operation (a write includes its group commit).");
  }
  Status Write(const std::function<Status(store::Tx&)>& fn) override {
    return Timed("write", [&] { return inner_->Write(fn); });
  }
  Status Read(const std::function<Status(store::Tx&)>& fn) override {
    return Timed("read", [&] { return inner_->Read(fn); });
  }
  int32_t SchemaVersion() const override { return inner_->SchemaVersion(); }
  uint64_t CredentialsGeneration() const override { return inner_->CredentialsGeneration(); }

 private:
  template <class F>
  Status Timed(const char* op, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = f();
    metrics_->Observe("meridian_store_operation_duration_seconds", {{"operation", op}},
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return s;
  }
  store::Store* inner_;
  api::Metrics* metrics_;
};

// Each connection is a file descriptor: the limit is raised to what max_connections needs (with
// room for the store, logs and listening socket), as far as the host lets it. Returns how many
// connections fit; the start-up log says so when that is fewer than 10,000.
int RaiseOpenFileLimit(int max_connections) {
  const int64_t kReserve = base::kFilesKeptBesideConnections;
  max_connections = std::max(1, max_connections);
  const int64_t files = base::RaiseOpenFiles(max_connections + kReserve);
  const int fit = files < 0
                      ? max_connections
                      : static_cast<int>(std::clamp<int64_t>(files - kReserve, 1, max_connections));
  if (fit < std::min(max_connections, 10000)) {
    base::log::Warn(
        "at most {} client connections (the open-file limit is {}; raise it with ulimit -n or "
        "LimitNOFILE=)",
        fit, files);
  }
  return fit;
}

Status SplitListen(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::Invalid("--listen: expected HOST:PORT");
  *host = listen.substr(0, colon);
  try {
    size_t used = 0;
    *port = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1 || *port < 0 || *port > 65535)
      throw std::out_of_range("");
  } catch (const std::exception&) {
    return Status::Invalid("--listen: \"" + listen.substr(colon + 1) + "\" is not a port");
  }
  return Status::Ok();
}

// Creates the data dir open to its owner only, or checks that an existing one is: it holds the
// database (every token's hash, every job's env) and the admin token. An existing folder's mode
// is the operator's: it is refused, not changed behind the operator's back.
Status PrepareDataDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return Status::Io("--data-dir " + dir + ": " + ec.message());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Io("--data-dir " + dir + ": cannot create it: " + std::strerror(errno));
    }
    if (::stat(dir.c_str(), &st) != 0) return Status::Io("--data-dir " + dir + ": cannot read it");
  }
  if (!S_ISDIR(st.st_mode)) return Status::Invalid("--data-dir " + dir + ": not a directory");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status(base::StatusCode::kFailedPrecondition,
                  "--data-dir " + dir + " has mode " + mode +
                      ": it holds the database and the admin token, so it must be open to its "
                      "owner only; run `chmod 700 " +
                      dir + "` and start again");
  }
  return Status::Ok();
}

// Refuses a database that is damaged, and one that is missing or empty beside an admin.token:
// such a data dir held a database before, and starting as on a first start would write a new
// admin token over the one in use and begin an empty estate.
Status CheckDatabase(const std::string& dir) {
  const std::string db = dir + "/meridian.db", token = dir + "/admin.token";
  struct stat st {};
  const bool has_db = ::stat(db.c_str(), &st) == 0;
  const bool empty = !has_db || st.st_size == 0;
  if (empty && ::access(token.c_str(), F_OK) == 0) {
    return Status(base::StatusCode::kFailedPrecondition,
                  db + (has_db ? " is empty (0 bytes)" : " is missing") + " but " + token +
                      " exists: this data dir held a database, and starting afresh would replace "
                      "its admin token. Restore meridian.db from a backup; or, to start a new "
                      "estate here, move admin.token away first");
  }
  if (empty) return Status::Ok();
  if (Status s = store::SqliteStore::CheckIntegrity(db); !s.ok()) {
    return Status(base::StatusCode::kFailedPrecondition,
                  db + " fails SQLite's integrity check (" + s.message() +
                      "): the file is damaged, and the server does not start on it. Restore it "
                      "from a backup (stop the server, copy the backup over meridian.db and "
                      "remove meridian.db-wal and meridian.db-shm); `sqlite3 meridian.db .recover` "
                      "may save part of it. To start a new estate instead, move meridian.db and "
                      "admin.token away");
  }
  return Status::Ok();
}

// The store `--store` names: SQLite in the data dir (checked first), or a PostgreSQL database.
base::Result<std::unique_ptr<store::Store>> OpenStore(const ServerOptions& o) {
  if (o.store.empty()) {
    if (Status s = CheckDatabase(o.data_dir); !s.ok()) return s;
    auto sqlite = store::SqliteStore::Open(o.data_dir + "/meridian.db");
    if (!sqlite.ok()) return sqlite.status();
    return std::unique_ptr<store::Store>(std::move(sqlite.value()));
  }
  if (o.store.rfind("postgresql://", 0) != 0 && o.store.rfind("postgres://", 0) != 0) {
    return Status::Invalid(
        "--store: expected a postgresql:// URL (or no --store, for SQLite in "
        "--data-dir)");
  }
  auto pg = store::PostgresStore::Open(o.store);
  if (!pg.ok()) return Status(pg.status().code(), "--store: " + pg.status().message());
  return std::unique_ptr<store::Store>(std::move(pg.value()));
}

Status WriteSecret(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::Io("cannot write " + path);
  chmod(path.c_str(), 0600);
  std::fputs((text + "\n").c_str(), f);
  if (std::fclose(f) != 0) return Status::Io("cannot write " + path);
  return Status::Ok();
}

}  // namespace

Status RunServer(const ServerOptions& o) {
  // A start afresh in place binds the address its predecessor had bound (RestartInPlace).
  const std::string again = TakeRestartListen();
  std::string host;
  int port = 0;
  if (Status s = SplitListen(again.empty() ? o.listen : again, &host, &port); !s.ok()) return s;
  if (!(o.history_interval > 0) || !(o.history_retention >= o.history_interval)) {
    return Status::Invalid(
        "--history-interval must be positive and --history-retention at least as long");
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return Status::Invalid("--tls-cert and --tls-key go together");
  }
  // A client that goes away mid-answer must not take the server with it.
  signal(SIGPIPE, SIG_IGN);
  // glibc gives each of the 64 HTTP workers an arena of its own (up to 8 per core), and each
  // keeps the memory of the large answers it built. One arena per core halved the dashboards'
  // reads of 1,000 nodes (134 → 77 ms p50) and the RSS (158 → 64 MiB) with heartbeats
  // unchanged (`meridian bench agents --dashboards 2`). MALLOC_ARENA_MAX, when set, wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) {
    mallopt(M_ARENA_MAX, static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
  }
  // SIGINT and SIGTERM are taken by one thread (below), so every other thread
  // blocks them; threads inherit the mask, so this comes before any is started (the store
  // starts its writer).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (Status s = PrepareDataDir(o.data_dir); !s.ok()) return s;
  base::DirLock lock;
  if (Status s = lock.Acquire(o.data_dir); !s.ok()) return s;
  auto opened = OpenStore(o);
  // PostgreSQL restarting or failing over (or this server starting afresh after it lost its
  // session) is waited for, a second between tries, and SIGINT or SIGTERM ends the wait.
  const auto wait_until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.store_wait);
  std::string waiting_for;
  while (!opened.ok() && opened.status().code() == base::StatusCode::kUnavailable &&
         !o.store.empty() && std::chrono::steady_clock::now() < wait_until) {
    if (opened.status().message() != waiting_for) {
      waiting_for = opened.status().message();
      base::log::Warn("{}: waiting for the database (at most {} s in all; --store-wait)",
                      waiting_for, o.store_wait);
    }
    const timespec second{1, 0};
    if (const int sig = sigtimedwait(&signals, nullptr, &second); sig > 0) {
      base::log::Info("stopping (signal {}) before the database answered", sig);
      return Status::Ok();
    }
    opened = OpenStore(o);
  }
  if (!opened.ok()) return opened.status();
  if (!waiting_for.empty()) base::log::Info("the database answers now");

  api::Metrics metrics;
  InstrumentedStore store(opened->get(), &metrics);
  base::SystemClock clock;
  base::SystemEntropy entropy;
  api::EventBus bus;
  NodeService nodes(&store, &clock, &bus);
  SchedulerController controller(&store, &clock, &bus, &metrics, &nodes);
  controller.KeepHistory(o.history_interval, o.history_retention);
  nodes.OnChange([&controller] { controller.Wake(); });
  api::LogStore logs(o.data_dir + "/logs");
  api::ApiOptions api_options;
  api_options.open_metrics = o.open_metrics;
  api_options.write_rate = o.write_rate;
  api_options.write_burst = o.write_burst;
  api_options.failed_auths_per_minute = o.failed_auths_per_minute;
  api_options.max_waits_per_token = o.max_waits_per_token;
  api::Api api(&store, &clock, &entropy, &controller, &bus, &metrics, api_options);
  // The estate's GPUs, nodes and job outcomes, computed when /metrics is scraped.
  TelemetryMetrics telemetry(&store, &controller, &nodes);
  metrics.AddCollector([&telemetry] { return telemetry.Render(); });
  metrics.Describe("meridian_build_info", "gauge", "1, with the version of this server.");
  metrics.Set("meridian_build_info", {{"version", MERIDIAN_VERSION}}, 1);
  api.ServeAgents(&nodes, &logs);
  nodes.OnOrders([&api](const std::string& node, const std::string& cluster) {
    api.doorbells().Ring(node);
    if (!cluster.empty()) api.doorbells().Ring(api::ClusterBell(cluster));
  });
  api.ServeNodeOperations(&nodes);
  // Alert rules evaluated on the server's clock, sent to the configured receivers.
  HttpAlertNotifier notifier;
  AlertService alerts(&store, &clock, &controller, &nodes, &notifier);
  api.ServeAlerts(&alerts);
  // IdlePolicy documents applied to the running jobs (docs/adr/0019-idle-reclamation.md).
  IdleReclaimer idle(&store, &clock, &bus, &nodes);
  idle.OnChange([&controller] { controller.Wake(); });
  api.ServeIdle(&idle);
  alerts.SetIdleSource([&idle] { return idle.AlertJobs(); });
  // Budget documents held against the accounting records (docs/adr/0041-budgets.md).
  BudgetWatch budgets(&store, &clock);
  budgets.OnChange([&controller] { controller.Wake(); });
  api.ServeBudgets(&budgets);
  alerts.SetBudgetSource([&budgets] { return budgets.AlertThresholds(); });
  controller.SetBudgetBlocks([&budgets] { return budgets.Blocks(); },
                             [&budgets] { return budgets.Room(); });
  metrics.AddCollector([&budgets] {
    api::Metrics m;
    budgets.Render(&m);
    return m.Render();
  });
  metrics.AddCollector([&idle] {
    api::Metrics m;
    idle.Render(&m);
    return m.Render();
  });
  net::ServerOptions http_options;
  http_options.workers = o.threads;
  http_options.max_body_bytes = api_options.max_body_bytes;
  http_options.header_timeout = o.header_timeout;
  http_options.idle_timeout = o.idle_timeout;
  http_options.max_connections = RaiseOpenFileLimit(o.max_connections);
  http_options.max_connections_per_address = o.max_connections_per_address;
  http_options.tls_cert = o.tls_cert;
  http_options.tls_key = o.tls_key;
  auto http = std::make_unique<net::HttpServer>(http_options);
  api.Register(*http);
  api::ServeDashboard(*http, api::DashboardAssets());
  metrics.AddCollector([&http] {
    return "# HELP meridian_http_connections Client connections open now (idle keep-alive ones "
           "included).\n# TYPE meridian_http_connections gauge\nmeridian_http_connections " +
           std::to_string(http->connections()) + "\n";
  });
  auto bound_or = http->Bind(host, port);
  if (!bound_or.ok()) return bound_or.status();
  const int bound = *bound_or;
  const std::string url = std::string(o.tls_cert.empty() ? "http" : "https") + "://" + host + ":" +
                          std::to_string(bound);
  {
    ElasticOptions elastic;
    elastic.provisioners = o.provisioners;
    elastic.server_url = o.advertise.empty() ? url : o.advertise;
    controller.SetElasticPools(
        std::make_unique<ElasticPools>(std::move(elastic), &store, &nodes, &bus, &metrics, &entropy,
                                       [&controller] { controller.Wake(); }));
  }

  // On PostgreSQL, one of the servers on the database leads (docs/adr/0028): only it acts (the
  // scheduler loop, node expiry, alerting, idle reclaim) and writes; the others follow. A
  // deposed leader (another took over, or its database session was lost: PostgreSQL restarted
  // or moved) stops acting at once by starting afresh in place rather than stopping its loops:
  // its state in memory (heartbeats, assignments, the scheduler's) is a leader's, and a start
  // afresh is the one path to a clean follower that every start exercises. Should that fail,
  // it exits with status 3 for its supervisor to restart it.
  auto* election = dynamic_cast<store::Election*>(opened->get());
  std::unique_ptr<Leadership> leadership;
  std::atomic<bool> signalled{false};   // SIGINT or SIGTERM: stopping
  std::atomic<bool> restarting{false};  // deposed: about to start afresh
  if (election) {
    election->OnDeposed([&, bound](const std::string& why) {
      // Either this sees the stop, or the signal's thread sees the restart (both flags are
      // sequentially consistent) and leaves the signal pending for the new start.
      restarting = true;
      if (signalled) {
        base::log::Error("{}: this server was stopping, and exits now (status 3)", why);
        std::fflush(nullptr);
        std::_Exit(3);
      }
      base::log::Error(
          "{}: this server stops acting and starts afresh in place (the same process id and "
          "address), to follow or to lead again",
          why);
      // Not ready until the new start says so.
      if (!o.port_file.empty()) std::remove(o.port_file.c_str());
      const Status s = RestartInPlace(host + ":" + std::to_string(bound));
      base::log::Error("{}: exits now (status 3); its supervisor restarts it as a follower",
                       s.message());
      std::fflush(nullptr);
      std::_Exit(3);
    });
    leadership =
        std::make_unique<Leadership>(election, o.advertise.empty() ? url : o.advertise, o.tls_cert);
    http->SetGate([&leadership](const net::Request& req, net::Response& res) {
      return leadership->Gate(req, res);
    });
    api.SetForwarder(
        [&leadership](const std::string& action, const net::Request& req, net::Response& res) {
          return leadership->Forward(action, req, res);
        });
    auto secret = election->PeerSecret();
    if (!secret.ok())
      return Status(secret.status().code(), "--store: " + secret.status().message());
    leadership->SetPeerSecret(*secret);
    api.TrustPeers(*secret);
    if (Status s = leadership->CampaignOnce(); !s.ok()) {
      return Status(s.code(), "--store: " + s.message());
    }
  }
  const std::string token_path = o.data_dir + "/admin.token";
  // The admin user and its first token, on the first start of an estate (by its first leader).
  auto bootstrap = [&api, &token_path]() -> base::Result<std::string> {
    auto token = api.Bootstrap();
    if (!token.ok()) return token.status();
    if (!token->empty()) {
      if (Status s = WriteSecret(token_path, *token); !s.ok()) return s;
      base::log::Info("first start: the admin token is in {} (mode 0600)", token_path);
    }
    return token;
  };
  base::Result<std::string> token = std::string();
  if (!leadership || leadership->leading()) token = bootstrap();
  if (!token.ok()) return token.status();
  // The port file says the server is ready: written once the admin token of a first start is
  // (what scripts and tests read next).
  if (!o.port_file.empty()) {
    std::ofstream(o.port_file) << bound << "\n";
  }
  base::log::Info("server listening on {}://{}:{} (data in {})",
                  o.tls_cert.empty() ? "http" : "https", host, bound, o.data_dir);
  if (o.open_metrics) {
    base::log::Warn(
        "dev mode: /metrics answers without a token (without --dev it needs the token of a user "
        "with the metrics role)");
  }
  alerts.SetGeneratorUrl(url);
  std::atomic<bool> acting{false};
  auto act = [&] {
    // Spent budgets hold back bursts from the first round, not from the first evaluation after.
    if (Status s = budgets.RunOnce(); !s.ok()) base::log::Warn("budgets: {}", s.message());
    controller.Start();
    alerts.Start();
    idle.Start();
    budgets.Start();
    acting = true;
  };
  if (!leadership || leadership->leading()) act();
  if (leadership) {
    leadership->Start([&] {
      api.ForgetCredentials();  // before it acts on writes as the leader
      nodes.TakeOver();
      if (auto t = bootstrap(); !t.ok()) base::log::Warn("bootstrap: {}", t.status().message());
      act();
    });
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    signalled = true;
    if (restarting) {
      // The signal waits, blocked and pending, for the new start: a pending signal outlives exec.
      kill(getpid(), sig);
      return;
    }
    base::log::Info("stopping (signal {})", sig);
    // What runs beside the server (the dev estate's agents) stops first, while the API still
    // answers: an agent's last report to a server that no longer reads waits out its timeout.
    if (o.on_stop) o.on_stop();
    bus.Close();
    http->Stop();
  });
  std::thread ready;
  if (o.on_ready) {
    std::string admin = *token;
    if (admin.empty()) {
      std::ifstream in(token_path);
      in >> admin;
    }
    ready = std::thread([&o, url, admin] { o.on_ready(url, admin); });
  }
  http->Run();
  // Run returns only after Stop; should it return otherwise, the waiter still waits: wake it.
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (ready.joinable()) ready.join();
  if (!signalled && o.on_stop) o.on_stop();
  if (leadership) leadership->Stop();
  if (acting) {
    budgets.Stop();
    idle.Stop();
    alerts.Stop();
    controller.Stop();
  }
  return Status::Ok();
}

}  // namespace meridian::server
