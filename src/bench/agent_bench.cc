#include "bench/agent_bench.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/agent_estate.h"
#include "bench/async_agents.h"
#include "bench/owned_server.h"

namespace meridian::bench {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// The pool's nodes are the agents that register.
const std::string kAgentBenchEstate = std::string(kBenchTenancy) + R"(---
kind: NodePool
metadata: {name: gpu}
spec: {cluster: onprem, gpuModel: H100-80GB}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: INTERVAL, nodeLostTimeout: LOST}
)";

// What the dashboard's Estate view reads at each refresh (web/src/views/estate.tsx).
const char* const kDashboardPaths[] = {
    "/api/v1/nodes", "/api/v1/clusters",
    "/api/v1/jobs?phase=Pending,Placed,Running,Stopping&limit=1000", "/api/v1/history"};

}  // namespace

Json AgentBenchResult::ToJson() const {
  return {{"heartbeats", heartbeats},
          {"errors", errors},
          {"seconds", seconds},
          {"heartbeats_per_second", heartbeats_per_second},
          {"waits_answered", waits_answered},
          {"probes", probes},
          {"probes_late", probes_late},
          {"probe_p50_ms", probe_p50_ms},
          {"probe_p99_ms", probe_p99_ms},
          {"probe_max_ms", probe_max_ms},
          {"p50_ms", p50_ms},
          {"p99_ms", p99_ms},
          {"max_ms", max_ms},
          {"register_seconds", register_seconds},
          {"server_cores", server_cores},
          {"server_rss_mib", server_rss_mib},
          {"nodes_lost", nodes_lost},
          {"tasks_running", tasks_running},
          {"dashboard_reads", [this] {
             Json reads = Json::array();
             for (const Read& r : dashboard_reads) {
               reads.push_back({{"path", r.path},
                                {"count", r.count},
                                {"errors", r.errors},
                                {"p50_ms", r.p50_ms},
                                {"p99_ms", r.p99_ms},
                                {"bytes", r.bytes}});
             }
             return reads;
           }()}};
}

base::Result<AgentBenchResult> RunAgentBench(const AgentBenchOptions& o,
                                             const std::function<void(double)>& progress) {
  if (o.agents < 1 || o.agents > 100000) return base::Status::Invalid("--agents: 1 to 100000");
  if (o.interval < 0.05 || o.interval > 600)
    return base::Status::Invalid("--interval: 0.05 to 600");
  if (o.seconds <= 0 || o.seconds > 3600) return base::Status::Invalid("--seconds: (0, 3600]");
  if (o.dashboards < 0 || o.dashboards > 100)
    return base::Status::Invalid("--dashboards: 0 to 100");
  if (o.probes < 0 || o.probes > 100000) return base::Status::Invalid("--probes: 0 to 100000");
  if (o.probes > 0 && o.jobs >= o.agents * o.gpus_per_node) {
    return base::Status::Invalid("--probes: need free GPUs: --jobs below agents x GPUs");
  }
  auto estate = StartAgentEstate(o.binary, o.agents, kAgentBenchEstate, o.interval,
                                 o.channel ? 1 : (o.waits ? 2 : 1));
  if (!estate.ok()) return estate.status();
  OwnedServer& server = *estate->server;
  const int port = server.port;
  httplib::Client http("127.0.0.1", port);
  http.set_bearer_token_auth(estate->admin);

  AgentBenchResult res;
  const auto registering = Clock::now();
  auto registered = RegisterAgents(*estate, o.agents, o.gpus_per_node, [](int) {
    return AgentNode{"gpu", "H100-80GB"};
  });
  if (!registered.ok()) return registered.status();
  res.register_seconds = std::chrono::duration<double>(Clock::now() - registering).count();
  const Json job = {{"metadata", {{"name", "bench"}, {"project", "bench"}}},
                    {"spec", {{"gpus", 1}, {"command", {"sleep", "3600"}}}}};
  for (int j = 0; j < o.jobs; ++j) {
    if (auto s =
            ExpectStatus(http.Post("/api/v1/jobs", job.dump(), "application/json"), 201, "a job");
        !s.ok()) {
      return s;
    }
  }

  // The agents heartbeat, and wait for orders, on one event loop (bench/async_agents.h).
  AsyncAgentsOptions agents_options = std::move(registered.value());
  agents_options.interval = o.interval;
  agents_options.waits = o.waits;
  agents_options.channel = o.channel;
  std::mutex mu;
  double cpu0 = 0, cpu1 = 0, rss = 0;
  server.Usage(&cpu0, &rss);
  AsyncAgents agents(agents_options);
  agents.Start();
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  // Open dashboards: each reads the Estate view's paths every 5 s, starting at once.
  const size_t paths = std::size(kDashboardPaths);
  std::vector<std::vector<double>> read_ms(paths);
  res.dashboard_reads.resize(paths);
  for (int d = 0; d < o.dashboards; ++d) {
    threads.emplace_back([&, d] {
      httplib::Client c("127.0.0.1", port);
      c.set_bearer_token_auth(estate->admin);
      c.set_read_timeout(30);
      c.set_decompress(false);  // the size on the wire, as a browser gets it
      const httplib::Headers browser = {{"Accept-Encoding", "gzip, deflate, br, zstd"}};
      for (auto due = start + std::chrono::milliseconds(5000 * d / std::max(1, o.dashboards));
           due < end; due += std::chrono::seconds(5)) {
        std::this_thread::sleep_until(due);
        for (size_t p = 0; p < paths; ++p) {
          const auto t0 = Clock::now();
          auto r = c.Get(kDashboardPaths[p], browser);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          std::lock_guard<std::mutex> lock(mu);
          AgentBenchResult::Read& read = res.dashboard_reads[p];
          if (r && r->status == 200) {
            ++read.count;
            read.bytes = static_cast<int64_t>(r->body.size());
            read_ms[p].push_back(ms);
          } else {
            ++read.errors;
          }
        }
      }
    });
  }
  // Probe jobs, one at a time from 2 s in: submission to Running.
  std::vector<double> probe_ms;
  int64_t probes_late = 0;
  if (o.probes > 0) {
    threads.emplace_back([&] {
      httplib::Client c("127.0.0.1", port);
      c.set_bearer_token_auth(estate->admin);
      const Json probe = {{"metadata", {{"name", "probe"}, {"project", "bench"}}},
                          {"spec", {{"gpus", 1}, {"command", {"sleep", "3600"}}}}};
      std::this_thread::sleep_until(start + std::chrono::seconds(2));
      for (int p = 0; p < o.probes && Clock::now() < end; ++p) {
        const auto t0 = Clock::now();
        auto r = c.Post("/api/v1/jobs", probe.dump(), "application/json");
        if (!r || r->status != 201) continue;
        const int64_t id = Json::parse(r->body, nullptr, false).value("id", int64_t{0});
        bool running = false;
        while (!running && Clock::now() - t0 < std::chrono::seconds(30) && Clock::now() < end) {
          auto j = c.Get("/api/v1/jobs/" + std::to_string(id));
          running = j && j->status == 200 &&
                    Json::parse(j->body, nullptr, false)["status"].value("phase", "") == "Running";
          if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(mu);
        if (running) {
          probe_ms.push_back(ms);
        } else {
          ++probes_late;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  while (progress && Clock::now() < end) {
    progress(std::chrono::duration<double>(Clock::now() - start).count() / o.seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& th : threads) th.join();
  agents.Stop();
  if (progress) progress(1.0);
  std::vector<double> latencies = agents.stats().latency_ms;
  res.waits_answered = agents.stats().waits_answered;
  res.probes = static_cast<int64_t>(probe_ms.size());
  res.probes_late = probes_late;
  res.probe_p50_ms = Percentile(probe_ms, 0.50);
  res.probe_p99_ms = Percentile(probe_ms, 0.99);
  res.probe_max_ms = probe_ms.empty() ? 0 : *std::max_element(probe_ms.begin(), probe_ms.end());
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  server.Usage(&cpu1, &res.server_rss_mib);
  res.server_cores = (cpu1 - cpu0) / res.seconds;
  res.heartbeats = agents.stats().heartbeats;
  res.errors = agents.stats().errors;
  res.heartbeats_per_second = static_cast<double>(res.heartbeats) / res.seconds;
  res.p50_ms = Percentile(latencies, 0.50);
  res.p99_ms = Percentile(latencies, 0.99);
  res.max_ms = latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  for (size_t p = 0; p < paths; ++p) {
    res.dashboard_reads[p].path = kDashboardPaths[p];
    res.dashboard_reads[p].p50_ms = Percentile(read_ms[p], 0.50);
    res.dashboard_reads[p].p99_ms = Percentile(read_ms[p], 0.99);
  }
  auto nodes = http.Get("/api/v1/nodes");
  if (nodes && nodes->status == 200) {
    for (const Json& n : Json::parse(nodes->body).value("items", Json::array())) {
      res.nodes_lost += n.value("state", "") == "Lost";
    }
  }
  for (Json after = 0; !after.is_null();) {
    auto page = http.Get("/api/v1/jobs?phase=Running&limit=1000&continue=" + after.dump());
    if (!page || page->status != 200) break;
    const Json body = Json::parse(page->body);
    res.tasks_running += static_cast<int64_t>(body.value("items", Json::array()).size());
    after = body.value("continue", Json());
  }
  return res;
}

}  // namespace meridian::bench
