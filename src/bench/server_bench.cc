#include "bench/server_bench.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/agent_estate.h"
#include "bench/async_agents.h"
#include "bench/owned_server.h"
#include "domain/job_spec.h"

namespace meridian::bench {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// Busy nodes are H100s, spare ones A100s; the probes' project is not the queue's.
const std::string kServerBenchEstate = std::string(kBenchTenancy) + R"(---
kind: Project
metadata: {name: probe}
spec: {team: bench}
---
kind: NodePool
metadata: {name: busy}
spec: {cluster: onprem, gpuModel: H100-80GB}
---
kind: NodePool
metadata: {name: spare}
spec: {cluster: onprem, gpuModel: A100-80GB}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: INTERVAL, nodeLostTimeout: LOST}
)";

constexpr const char* kCycleMetric = "meridian_scheduler_cycle_duration_seconds";

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The heartbeat's own histogram: the time its handler took in the server, from the moment a
// worker took the request whole to its answer (what the benchmark's agents see adds the
// connection, the server's I/O threads and their own event loop).
constexpr const char* kHeartbeatHandler =
    "meridian_api_request_duration_seconds_bucket{route=\"agents.heartbeat\",code=\"200\",le=\"";

std::string ScrapeMetrics(httplib::Client& http) {
  auto r = http.Get("/metrics");
  return r && r->status == 200 ? r->body : "";
}

// A histogram's cumulative buckets (upper bound -> count) from a scrape: the lines that start
// with `prefix`, its name and labels up to `le="`.
std::map<double, int64_t> Buckets(const std::string& scrape, const std::string& prefix) {
  std::map<double, int64_t> buckets;
  for (size_t at = scrape.find(prefix); at != std::string::npos; at = scrape.find(prefix, at + 1)) {
    if (at > 0 && scrape[at - 1] != '\n') continue;
    const size_t eol = std::min(scrape.find('\n', at), scrape.size());
    const std::string line = scrape.substr(at, eol - at);
    const size_t end = line.find('"', prefix.size());
    if (end == std::string::npos) continue;
    const std::string le = line.substr(prefix.size(), end - prefix.size());
    const double bound = le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le);
    buckets[bound] = std::stoll(line.substr(line.rfind(' ') + 1));
  }
  return buckets;
}

// The q-quantile of the observations between two scrapes of a histogram, interpolated within
// its bucket as Prometheus' histogram_quantile does (the highest finite bound past the last).
double BucketQuantile(const std::map<double, int64_t>& before,
                      const std::map<double, int64_t>& after, double q, int64_t* total) {
  auto delta = [&](double bound, int64_t count) {
    auto b = before.find(bound);
    return count - (b == before.end() ? 0 : b->second);
  };
  *total = after.empty() ? 0 : delta(after.rbegin()->first, after.rbegin()->second);
  if (*total <= 0) return 0;
  const double rank = q * static_cast<double>(*total);
  double lower = 0;
  int64_t below = 0;
  for (const auto& [bound, count] : after) {
    const int64_t cumulative = delta(bound, count);
    if (static_cast<double>(cumulative) >= rank) {
      if (std::isinf(bound)) return lower;
      const int64_t in = cumulative - below;
      return in <= 0 ? bound
                     : lower + (bound - lower) * (rank - static_cast<double>(below)) /
                                   static_cast<double>(in);
    }
    lower = bound;
    below = cumulative;
  }
  return lower;
}

// Submits `count` whole-node jobs as arrays of at most the API's limit; returns the arrays' ids.
base::Result<std::vector<int64_t>> SubmitArrays(httplib::Client& http, int count,
                                                const std::string& model, const std::string& name) {
  std::vector<int64_t> ids;
  const int most = static_cast<int>(domain::kMaxArrayElements);
  for (int first = 0; first < count; first += most) {
    const int last = std::min(count, first + most) - 1;
    const Json job = {{"metadata", {{"name", name}, {"project", "bench"}}},
                      {"spec",
                       {{"gpus", 8},
                        {"gpuModels", {model}},
                        {"array", std::to_string(first) + "-" + std::to_string(last)},
                        {"command", {"sleep", "86400"}}}}};
    auto r = http.Post("/api/v1/jobs", job.dump(), "application/json");
    if (auto s = ExpectStatus(r, 201, "submitting " + name); !s.ok()) return s;
    ids.push_back(Json::parse(r->body, nullptr, false).value("id", int64_t{0}));
  }
  return ids;
}

// The kinds of heartbeat errors seen, most frequent first: "; 12 HTTP 503, ...".
std::string ErrorKinds(const AsyncAgentsStats& stats) {
  std::vector<std::pair<int64_t, std::string>> kinds;
  for (const auto& [kind, n] : stats.error_kinds) kinds.emplace_back(n, kind);
  std::sort(kinds.rbegin(), kinds.rend());
  std::string out;
  for (size_t i = 0; i < kinds.size() && i < 3; ++i) {
    out += (i ? ", " : "; ") + std::to_string(kinds[i].first) + " " + kinds[i].second;
  }
  return out;
}

// The last lines of the server's log.
std::string LogTail(const OwnedServer& server) {
  const std::string log = Slurp(server.dir + "/server.log");
  size_t from = log.size();
  for (int lines = 0; lines < 30 && from > 0; ++lines) from = log.rfind('\n', from - 1);
  return from == std::string::npos ? log : log.substr(from + 1);
}

// Elements of the arrays in `phase`.
// How many elements of the arrays are in `phase`; an error when one array's could not be read
// (counted as none, a failed read looked like an estate that never filled).
base::Result<int64_t> InPhase(httplib::Client& http, const std::vector<int64_t>& arrays,
                              const std::string& phase) {
  int64_t n = 0;
  for (int64_t id : arrays) {
    const std::string path = "/api/v1/jobs/" + std::to_string(id);
    auto r = http.Get(path);
    if (!r || r->status != 200) {
      return base::Status::Io(
          "GET " + path + ": " +
          (r ? "HTTP " + std::to_string(r->status) : httplib::to_string(r.error())));
    }
    const Json j = Json::parse(r->body, nullptr, false);
    if (!j.is_object()) return base::Status::Io("GET " + path + ": not a JSON object");
    n += j["status"]["array"]["phases"].value(phase, int64_t{0});
  }
  return n;
}

}  // namespace

Json ServerBenchResult::ToJson() const {
  return {{"nodes", nodes},
          {"spare_nodes", spare_nodes},
          {"running", running},
          {"pending", pending},
          {"setup_seconds", setup_seconds},
          {"seconds", seconds},
          {"cycles", cycles},
          {"cycle_p50_s", cycle_p50_s},
          {"cycle_p99_s", cycle_p99_s},
          {"heartbeats", heartbeats},
          {"heartbeat_errors", heartbeat_errors},
          {"heartbeats_per_second", heartbeats_per_second},
          {"heartbeat_p50_ms", heartbeat_p50_ms},
          {"heartbeat_p99_ms", heartbeat_p99_ms},
          {"heartbeat_handler_p50_ms", heartbeat_handler_p50_ms},
          {"heartbeat_handler_p99_ms", heartbeat_handler_p99_ms},
          {"probes", probes},
          {"probes_late", probes_late},
          {"probe_p50_ms", probe_p50_ms},
          {"probe_p99_ms", probe_p99_ms},
          {"probe_max_ms", probe_max_ms},
          {"server_cores", server_cores},
          {"server_rss_mib", server_rss_mib}};
}

base::Result<ServerBenchResult> RunServerBench(const ServerBenchOptions& o,
                                               const std::function<void(const std::string&)>& say) {
  if (o.nodes < 2 || o.nodes > 100000) return base::Status::Invalid("--nodes: 2 to 100000");
  if (o.pending < 0 || o.pending > 10000000) {
    return base::Status::Invalid("--pending: 0 to 10000000");
  }
  if (o.spare_nodes < 0 || o.spare_nodes >= o.nodes) {
    return base::Status::Invalid("--spare-nodes: 0 (a hundredth) to one less than --nodes");
  }
  if (o.interval < 0.05 || o.interval > 600) {
    return base::Status::Invalid("--interval: 0.05 to 600");
  }
  if (o.seconds <= 0 || o.seconds > 3600) return base::Status::Invalid("--seconds: (0, 3600]");
  ServerBenchResult res;
  res.nodes = o.nodes;
  res.spare_nodes = o.spare_nodes > 0 ? o.spare_nodes : std::max(1, o.nodes / 100);
  if (o.probes < 0 || o.probes > res.spare_nodes * o.gpus_per_node) {
    return base::Status::Invalid("--probes: 0 to the spare nodes' GPUs (" +
                                 std::to_string(res.spare_nodes * o.gpus_per_node) + ")");
  }
  const int busy = o.nodes - res.spare_nodes;
  const auto setup = Clock::now();

  auto estate =
      StartAgentEstate(o.binary, o.nodes, kServerBenchEstate, o.interval, o.channel ? 1 : 2);
  if (!estate.ok()) return estate.status();
  OwnedServer& server = *estate->server;
  const int port = server.port;
  httplib::Client http("127.0.0.1", port);
  http.set_bearer_token_auth(estate->admin);
  http.set_read_timeout(300);
  http.set_write_timeout(300);
  say("registering " + std::to_string(o.nodes) + " agents (" + std::to_string(busy) +
      " H100 nodes, " + std::to_string(res.spare_nodes) + " spare A100 nodes)");
  auto registered = RegisterAgents(*estate, o.nodes, o.gpus_per_node, [busy](int a) {
    return a < busy ? AgentNode{"busy", "H100-80GB"} : AgentNode{"spare", "A100-80GB"};
  });
  if (!registered.ok()) return registered.status();
  say("registered in " + std::to_string(static_cast<int>(Since(setup))) + " s");
  AsyncAgentsOptions agents_options = std::move(registered.value());
  agents_options.interval = o.interval;
  agents_options.channel = o.channel;

  // Every H100 node gets a whole-node job; the agents start them, as agents would.
  AsyncAgents agents(agents_options);
  agents.Start();
  auto fill = SubmitArrays(http, busy, "H100-80GB", "fill");
  if (!fill.ok()) return fill.status();
  const auto filling = Clock::now();
  int64_t running = 0;
  while (running < busy) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const base::Result<int64_t> now_running = InPhase(http, *fill, "Running");
    if (now_running.ok()) running = *now_running;
    const AsyncAgentsStats beats = agents.Snapshot();
    say("filling: " +
        (now_running.ok() ? std::to_string(running)
                          : "? (" + now_running.status().message() + ")") +
        " of " + std::to_string(busy) + " running; " + std::to_string(beats.heartbeats) +
        " heartbeats (" + std::to_string(beats.errors) + " errors), " +
        std::to_string(beats.tasks_reported) + " tasks reported" + ErrorKinds(beats));
    if (Since(filling) > 120 + busy / 50.0) {
      return base::Status::Io("the estate did not fill: " + std::to_string(running) + " of " +
                              std::to_string(busy) + " jobs running after " +
                              std::to_string(static_cast<int>(Since(filling))) +
                              " s; the server's log ends:\n" + LogTail(server));
    }
  }
  // The queue: whole-node jobs that need H100s, all taken.
  say("queueing " + std::to_string(o.pending) + " jobs");
  auto queued = SubmitArrays(http, o.pending, "H100-80GB", "queued");
  if (!queued.ok()) return queued.status();
  res.setup_seconds = Since(setup);
  say("set up in " + std::to_string(static_cast<int>(res.setup_seconds)) + " s; measuring for " +
      std::to_string(static_cast<int>(o.seconds)) + " s");

  // The window: cycles, heartbeats, probes, server CPU.
  const std::string scrape0 = ScrapeMetrics(http);
  const std::string cycle_prefix = std::string(kCycleMetric) + "_bucket{le=\"";
  const AsyncAgentsStats beats0 = agents.Snapshot();
  double cpu0 = 0, cpu1 = 0, rss = 0;
  server.Usage(&cpu0, &rss);
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<double> probe_ms;
  {
    httplib::Client c("127.0.0.1", port);
    c.set_bearer_token_auth(estate->admin);
    const Json probe = {{"metadata", {{"name", "probe"}, {"project", "probe"}}},
                        {"spec", {{"gpus", 1}, {"command", {"sleep", "86400"}}}}};
    // Every probe runs, past the window if need be (each waits at most 30 s): a slow start is
    // what the figure is for, not a reason to leave it out.
    for (int p = 0; p < o.probes; ++p) {
      const auto t0 = Clock::now();
      auto r = c.Post("/api/v1/jobs", probe.dump(), "application/json");
      if (!r || r->status != 201) continue;
      const int64_t id = Json::parse(r->body, nullptr, false).value("id", int64_t{0});
      bool up = false;
      while (!up && Clock::now() - t0 < std::chrono::seconds(30)) {
        auto j = c.Get("/api/v1/jobs/" + std::to_string(id));
        up = j && j->status == 200 &&
             Json::parse(j->body, nullptr, false)["status"].value("phase", "") == "Running";
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (up) {
        probe_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      } else {
        ++res.probes_late;
      }
      say("probe " + std::to_string(p + 1) + ": " +
          (up ? std::to_string(static_cast<int>(probe_ms.back())) + " ms" : "late"));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::this_thread::sleep_until(end);
  res.seconds = Since(start);
  server.Usage(&cpu1, &res.server_rss_mib);
  const AsyncAgentsStats beats1 = agents.Snapshot();
  const std::string scrape1 = ScrapeMetrics(http);
  agents.Stop();

  res.server_cores = (cpu1 - cpu0) / res.seconds;
  const auto cycles0 = Buckets(scrape0, cycle_prefix), cycles1 = Buckets(scrape1, cycle_prefix);
  res.cycle_p50_s = BucketQuantile(cycles0, cycles1, 0.50, &res.cycles);
  res.cycle_p99_s = BucketQuantile(cycles0, cycles1, 0.99, &res.cycles);
  const auto handled0 = Buckets(scrape0, kHeartbeatHandler);
  const auto handled1 = Buckets(scrape1, kHeartbeatHandler);
  int64_t handled = 0;
  res.heartbeat_handler_p50_ms = 1000 * BucketQuantile(handled0, handled1, 0.50, &handled);
  res.heartbeat_handler_p99_ms = 1000 * BucketQuantile(handled0, handled1, 0.99, &handled);
  res.heartbeats = beats1.heartbeats - beats0.heartbeats;
  res.heartbeat_errors = beats1.errors - beats0.errors;
  res.heartbeats_per_second = static_cast<double>(res.heartbeats) / res.seconds;
  std::vector<double> window(
      beats1.latency_ms.begin() + static_cast<std::ptrdiff_t>(beats0.latency_ms.size()),
      beats1.latency_ms.end());
  res.heartbeat_p50_ms = Percentile(window, 0.50);
  res.heartbeat_p99_ms = Percentile(window, 0.99);
  res.probes = static_cast<int64_t>(probe_ms.size());
  res.probe_max_ms = probe_ms.empty() ? 0 : *std::max_element(probe_ms.begin(), probe_ms.end());
  res.probe_p50_ms = Percentile(probe_ms, 0.50);
  res.probe_p99_ms = Percentile(probe_ms, 0.99);
  const base::Result<int64_t> running_at_end = InPhase(http, *fill, "Running");
  if (!running_at_end.ok()) return running_at_end.status();
  const base::Result<int64_t> pending_at_end = InPhase(http, *queued, "Pending");
  if (!pending_at_end.ok()) return pending_at_end.status();
  res.running = *running_at_end;
  res.pending = *pending_at_end;
  return res;
}

}  // namespace meridian::bench
