#include "server/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
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
#include "base/strings.h"
#include "server/alerting.h"
#include "server/controller.h"
#include "server/telemetry_metrics.h"
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

// httplib listens with a backlog of 5: when many clients connect at once, the kernel drops
// their SYNs and they retry a second later. Listening again on the bound socket raises it.
template <class Base>
class WideBacklog final : public Base {
 public:
  using Base::Base;
  void RaiseBacklog(int n) { ::listen(this->svr_sock_, n); }
};

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

// An Accept-Encoding value without its "br" entry ("gzip, deflate, br;q=1" → "gzip, deflate").
std::string WithoutBrotli(const std::string& accepted) {
  std::string out;
  for (std::string_view entry : base::Split(accepted, ',')) {
    std::string_view name = base::Trim(entry.substr(0, entry.find(';')));
    if (name == "br" || base::Trim(entry).empty()) continue;
    if (!out.empty()) out += ", ";
    out += base::Trim(entry);
  }
  return out;
}

// The exclusive lock on a data dir, held from before the store opens until the server stops
// (the kernel drops it when the process dies, however it dies). Two servers on one store would
// each expire the nodes missing from their own heartbeat map and fail the other's jobs.
class DataDirLock {
 public:
  DataDirLock() = default;
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;
  ~DataDirLock() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Takes the lock on dir/LOCK without waiting and writes this process's pid there. Fails at
  // once when another process holds it, naming the dir and the holder's pid when it is known.
  Status Acquire(const std::string& dir) {
    const std::string path = dir + "/LOCK";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return Status::Io("--data-dir " + dir + ": cannot open " + path);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder;
      char buf[32] = {};
      if (::pread(fd_, buf, sizeof buf - 1, 0) > 0) holder = std::string(base::Trim(buf));
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK) return Status::Io("--data-dir " + dir + ": cannot lock " + path);
      return Status(base::StatusCode::kFailedPrecondition,
                    "--data-dir " + dir + " is in use by another meridian server" +
                        (holder.empty() ? std::string() : " (pid " + holder + ")") +
                        ": one server per data dir; stop it or choose another --data-dir");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      return Status::Io("--data-dir " + dir + ": cannot write " + path);
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

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
  std::string host;
  int port = 0;
  if (Status s = SplitListen(o.listen, &host, &port); !s.ok()) return s;
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
  DataDirLock lock;
  if (Status s = lock.Acquire(o.data_dir); !s.ok()) return s;
  if (Status s = CheckDatabase(o.data_dir); !s.ok()) return s;
  auto sqlite = store::SqliteStore::Open(o.data_dir + "/meridian.db");
  if (!sqlite.ok()) return sqlite.status();

  api::Metrics metrics;
  InstrumentedStore store(sqlite->get(), &metrics);
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
  api::Api api(&store, &clock, &entropy, &controller, &bus, &metrics, api_options);
  // The estate's GPUs, nodes and job outcomes, computed when /metrics is scraped.
  TelemetryMetrics telemetry(&store, &controller, &nodes);
  metrics.AddCollector([&telemetry] { return telemetry.Render(); });
  metrics.Describe("meridian_build_info", "gauge", "1, with the version of this server.");
  metrics.Set("meridian_build_info", {{"version", MERIDIAN_VERSION}}, 1);
  api.ServeAgents(&nodes, &logs);
  api.ServeNodeOperations(&nodes);
  // Alert rules evaluated on the server's clock, sent to the configured receivers.
  HttpAlertNotifier notifier;
  AlertService alerts(&store, &clock, &controller, &nodes, &notifier);
  api.ServeAlerts(&alerts);
  auto token = api.Bootstrap();
  if (!token.ok()) return token.status();
  const std::string token_path = o.data_dir + "/admin.token";
  if (!token->empty()) {
    if (Status s = WriteSecret(token_path, *token); !s.ok()) return s;
    std::fprintf(stderr, "meridian: first start: the admin token is in %s (mode 0600)\n",
                 token_path.c_str());
  }

  std::unique_ptr<httplib::Server> http;
  std::function<void()> raise_backlog;
  if (!o.tls_cert.empty()) {
    auto tls =
        std::make_unique<WideBacklog<httplib::SSLServer>>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!tls->is_valid()) {
      return Status::Invalid("--tls-cert/--tls-key: cannot load " + o.tls_cert + " and " +
                             o.tls_key);
    }
    raise_backlog = [s = tls.get()] { s->RaiseBacklog(1024); };
    http = std::move(tls);
  } else {
    auto plain = std::make_unique<WideBacklog<httplib::Server>>();
    raise_backlog = [s = plain.get()] { s->RaiseBacklog(1024); };
    http = std::move(plain);
  }
  const int threads = o.threads;
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http->set_keep_alive_max_count(100000);
  // Small JSON answers must not wait for Nagle's algorithm and the client's delayed ACK (a 40
  // ms stall per request on Linux).
  http->set_tcp_nodelay(true);
  // httplib answers "Accept-Encoding: br", which every browser sends, with Brotli at its default
  // quality (11): 1.5 s of CPU for an 860 KB node list, against 51 ms with gzip at 30 KB. So the
  // server offers gzip only: Brotli is taken out of what the client accepts before routing.
  http->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    // httplib's own request object, not const in fact; the headers are only read after this.
    auto& headers = const_cast<httplib::Request&>(req).headers;
    auto [first, last] = headers.equal_range("Accept-Encoding");
    for (auto it = first; it != last; ++it) it->second = WithoutBrotli(it->second);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  api.Register(*http);
  api::ServeDashboard(*http, api::DashboardAssets());
  const int bound =
      port == 0 ? http->bind_to_any_port(host) : (http->bind_to_port(host, port) ? port : -1);
  if (bound < 0) return Status::Io("--listen " + o.listen + ": cannot bind (in use?)");
  raise_backlog();
  if (!o.port_file.empty()) {
    std::ofstream(o.port_file) << bound << "\n";
  }
  std::fprintf(stderr, "meridian: server listening on %s://%s:%d (data in %s)\n",
               o.tls_cert.empty() ? "http" : "https", host.c_str(), bound, o.data_dir.c_str());
  if (o.open_metrics) {
    std::fprintf(stderr,
                 "meridian: dev mode: /metrics answers without a token (without --dev it needs "
                 "the token of a user with the metrics role)\n");
  }
  controller.Start();
  alerts.SetGeneratorUrl(std::string(o.tls_cert.empty() ? "http" : "https") + "://" + host + ":" +
                         std::to_string(bound));
  alerts.Start();
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    signalled = true;
    std::fprintf(stderr, "meridian: stopping (signal %d)\n", sig);
    bus.Close();
    http->stop();
  });
  std::thread ready;
  if (o.on_ready) {
    std::string admin = *token;
    if (admin.empty()) {
      std::ifstream in(token_path);
      in >> admin;
    }
    const std::string url = std::string(o.tls_cert.empty() ? "http" : "https") + "://" + host +
                            ":" + std::to_string(bound);
    ready = std::thread([&o, url, admin] { o.on_ready(url, admin); });
  }
  http->listen_after_bind();
  // listen_after_bind also returns on its own failure; then the waiter still waits: wake it.
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (ready.joinable()) ready.join();
  if (o.on_stop) o.on_stop();
  alerts.Stop();
  controller.Stop();
  return Status::Ok();
}

}  // namespace meridian::server
