#include "bench/agent_estate.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/files.h"

namespace meridian::bench {

using Json = nlohmann::json;

base::Status ExpectStatus(const httplib::Result& r, int status, const std::string& what) {
  if (r && r->status == status) return base::Status::Ok();
  return base::Status::Io(what + " failed: " + (r ? r->body : httplib::to_string(r.error())));
}

base::Result<AgentEstate> StartAgentEstate(const std::string& binary, int agents,
                                           std::string estate, double interval, int per_agent) {
  // Each agent keeps two connections (heartbeats, and its wait for orders) or one (a channel):
  // the benchmark holds one end of each and the server, its child, which inherits the limit, the
  // other.
  constexpr int64_t kOthers = 100;  // the benchmark's own clients, and room
  const int64_t connections = per_agent * static_cast<int64_t>(agents) + kOthers;
  const int64_t kept = base::kFilesKeptBesideConnections;
  const int64_t files = base::RaiseOpenFiles(connections + kept);
  if (files >= 0 && files < connections + kept) {
    const int64_t most = std::max<int64_t>((files - kept - kOthers) / per_agent, 0);
    return base::Status::Invalid(
        std::to_string(agents) + " agents keep " + std::to_string(connections) +
        " connections open, but this host's open-file limit of " + std::to_string(files) +
        " per process leaves the server room for " + std::to_string(files - kept) + ": at most " +
        std::to_string(most) +
        " agents here (raise the hard limit: ulimit -Hn, systemd's LimitNOFILE=)");
  }
  // The server's own caps (30,000 open, 2,000 per client address) let every agent in.
  auto owned = StartServer(binary, {"--write-rate", "0", "--max-connections",
                                    std::to_string(std::max<int64_t>(connections, 30000)),
                                    "--max-connections-per-address", std::to_string(connections)});
  if (!owned.ok()) return owned.status();
  AgentEstate e;
  e.server = std::move(owned.value());
  e.admin = e.server->admin_token();
  httplib::Client http("127.0.0.1", e.server->port);
  http.set_bearer_token_auth(e.admin);
  estate.replace(estate.find("INTERVAL"), 8, std::to_string(interval));
  estate.replace(estate.find("LOST"), 4, std::to_string(std::max(15 * interval, 30.0)));
  Json apply = {{"files", {{{"name", "bench.yaml"}, {"content", estate}}}}};
  if (auto s = ExpectStatus(http.Post("/api/v1/config/apply", apply.dump(), "application/json"),
                            200, "applying the estate");
      !s.ok()) {
    return s;
  }
  Json user = {{"spec", {{"roles", Json::array({{{"role", "agent"}}})}}}};
  if (auto s = ExpectStatus(http.Put("/api/v1/users/agents", user.dump(), "application/json"), 201,
                            "creating the agent user");
      !s.ok()) {
    return s;
  }
  auto t = http.Post("/api/v1/tokens", Json{{"user", "agents"}}.dump(), "application/json");
  if (auto s = ExpectStatus(t, 201, "creating the agent token"); !s.ok()) return s;
  e.agent_token = Json::parse(t->body, nullptr, false).value("token", "");
  return e;
}

base::Result<AsyncAgentsOptions> RegisterAgents(const AgentEstate& estate, int count,
                                                int gpus_per_node,
                                                const std::function<AgentNode(int)>& node) {
  AsyncAgentsOptions agents;
  agents.port = estate.server->port;
  agents.gpus_per_node = gpus_per_node;
  for (int a = 0; a < count; ++a) agents.nodes.push_back("bench-" + std::to_string(a));
  std::vector<std::string>& credentials = agents.credentials;
  credentials.resize(static_cast<size_t>(count));
  std::atomic<int> next{0};
  std::mutex mu;
  base::Status failure = base::Status::Ok();
  std::vector<std::thread> threads;
  for (int th = 0; th < std::min(4, count); ++th) {
    threads.emplace_back([&] {
      httplib::Client c("127.0.0.1", estate.server->port);
      c.set_bearer_token_auth(estate.agent_token);
      for (int a = next++; a < count; a = next++) {
        const AgentNode n = node(a);
        const std::string& name = agents.nodes[static_cast<size_t>(a)];
        Json gpus = Json::array();
        for (int g = 0; g < gpus_per_node; ++g) {
          gpus.push_back({{"index", g},
                          {"uuid", "GPU-bench-" + std::to_string(a) + "-" + std::to_string(g)},
                          {"model", n.model},
                          {"memoryMib", 81920},
                          {"nvlinkDomain", 0}});
        }
        Json body = {{"node", name},       {"cluster", "onprem"},  {"pool", n.pool},
                     {"cpuMilli", 128000}, {"memoryMib", 1048576}, {"simulated", true},
                     {"gpus", gpus}};
        auto r = c.Post("/api/v1/agents/register", body.dump(), "application/json");
        if (auto s = ExpectStatus(r, 200, "registering " + name); !s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = s;
          next = count;  // the others stop too
          return;
        }
        credentials[static_cast<size_t>(a)] =
            Json::parse(r->body, nullptr, false).value("credential", "");
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!failure.ok()) return failure;
  return agents;
}

}  // namespace meridian::bench
