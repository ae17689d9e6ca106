#include "bench/api_bench.h"

#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench/owned_server.h"

namespace meridian::bench {

namespace {

using Clock = std::chrono::steady_clock;

// 64 nodes of 8 GPUs, declared by the pool.
const std::string kApiBenchEstate = std::string(kBenchTenancy) + R"(---
kind: NodePool
metadata: {name: gpu}
spec: {cluster: onprem, nodes: 64, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
)";

}  // namespace

nlohmann::json ApiBenchResult::ToJson() const {
  return {{"submissions", submissions},
          {"errors", errors},
          {"seconds", seconds},
          {"submissions_per_second", submissions_per_second},
          {"p50_ms", p50_ms},
          {"p99_ms", p99_ms},
          {"max_ms", max_ms},
          {"server_cpu_seconds", server_cpu_seconds},
          {"server_rss_mib", server_rss_mib},
          {"jobs_placed", jobs_placed}};
}

base::Result<ApiBenchResult> RunApiBench(const ApiBenchOptions& o,
                                         const std::function<void(double)>& progress) {
  if (o.clients < 1 || o.clients > 1024) return base::Status::Invalid("--clients: 1 to 1024");
  if (o.seconds <= 0 || o.seconds > 3600) return base::Status::Invalid("--seconds: (0, 3600]");
  std::unique_ptr<OwnedServer> owned;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token = o.token;
  std::string project = o.project;
  if (o.server.empty()) {
    // One token drives every client: the per-token write limit would be what is measured.
    std::vector<std::string> flags = {"--write-rate", "0"};
    if (!o.store.empty()) flags.insert(flags.end(), {"--store", o.store});
    auto s = StartServer(o.binary, flags);
    if (!s.ok()) return s.status();
    owned = std::move(s.value());
    port = owned->port;
    token = Slurp(owned->dir + "/data/admin.token");
    httplib::Client admin(host, port);
    admin.set_bearer_token_auth(token);
    nlohmann::json body = {{"files", {{{"name", "bench.yaml"}, {"content", kApiBenchEstate}}}}};
    auto r = admin.Post("/api/v1/config/apply", body.dump(), "application/json");
    if (!r || r->status != 200) {
      return base::Status::Io("applying the bench estate failed: " +
                              (r ? r->body : httplib::to_string(r.error())));
    }
    project = "bench";
  } else {
    httplib::Client probe(o.server);
    if (!probe.is_valid()) return base::Status::Invalid("--server: not a URL: " + o.server);
    if (token.empty()) return base::Status::Invalid("--server needs --token or MERIDIAN_TOKEN");
  }
  const nlohmann::json job = {
      {"metadata", {{"name", "bench"}, {"project", project}}},
      {"spec", {{"gpus", 1}, {"runtimeEstimate", 3600}, {"command", {"sleep", "3600"}}}}};
  const std::string payload = job.dump();
  std::atomic<int64_t> ok{0}, errors{0};
  std::mutex mu;
  std::vector<double> latencies;
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) {
    clients.emplace_back([&] {
      std::unique_ptr<httplib::Client> http = o.server.empty()
                                                  ? std::make_unique<httplib::Client>(host, port)
                                                  : std::make_unique<httplib::Client>(o.server);
      http->set_bearer_token_auth(token);
      http->set_keep_alive(true);
      http->set_tcp_nodelay(true);
      std::vector<double> mine;
      while (Clock::now() < end) {
        const auto t0 = Clock::now();
        auto r = http->Post("/api/v1/jobs", payload, "application/json");
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (r && r->status == 201) {
          ++ok;
          mine.push_back(ms);
        } else {
          ++errors;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  while (progress && Clock::now() < end) {
    progress(std::chrono::duration<double>(Clock::now() - start).count() / o.seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : clients) t.join();
  if (progress) progress(1.0);
  ApiBenchResult res;
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  res.submissions = ok;
  res.errors = errors;
  res.submissions_per_second = static_cast<double>(res.submissions) / res.seconds;
  res.p50_ms = Percentile(latencies, 0.50);
  res.p99_ms = Percentile(latencies, 0.99);
  res.max_ms = latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  if (owned) {
    owned->Usage(&res.server_cpu_seconds, &res.server_rss_mib);
    httplib::Client admin(host, port);
    admin.set_bearer_token_auth(token);
    auto r = admin.Get("/api/v1/jobs?phase=Placed&limit=1000");
    if (r && r->status == 200) {
      res.jobs_placed = static_cast<int64_t>(nlohmann::json::parse(r->body, nullptr, false)
                                                 .value("items", nlohmann::json::array())
                                                 .size());
    }
  }
  return res;
}

}  // namespace meridian::bench
