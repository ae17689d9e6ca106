#pragma once

// Simulated node agents for the benchmarks, all on one event loop (Asio): each heartbeats every
// interval over a connection it keeps open and keeps a wait for orders open on another, as
// `meridian agent` does, so that 10,000 of them cost one client thread instead of 10,000.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace meridian::bench {

struct AsyncAgentsOptions {
  int port = 0;                          // the server's, on 127.0.0.1
  std::vector<std::string> nodes;        // registered node names
  std::vector<std::string> credentials;  // each node's, from its registration
  int gpus_per_node = 8;
  double interval = 2.0;  // heartbeat interval; agent a's first comes a / agents of it in
  // Each agent keeps GET /api/v1/agents/NODE/wait open and heartbeats at once when rung, and
  // again at once after a heartbeat that brought new tasks (to report them running).
  bool waits = true;
  // Each agent keeps one WebSocket instead (GET /api/v1/agents/NODE/channel, ADR 0047) carrying
  // its heartbeats, their answers and its doorbell: one connection per agent, not two.
  bool channel = false;
};

// What the agents saw, read after Stop.
struct AsyncAgentsStats {
  int64_t heartbeats = 0;                      // answered 200
  int64_t errors = 0;                          // refused, or the connection failed
  std::map<std::string, int64_t> error_kinds;  // "HTTP 503", or what the connection said
  int64_t waits_answered = 0;                  // with `channel`, the rings
  std::vector<double> latency_ms;              // of each answered heartbeat, connection included
  int64_t tasks_reported = 0;  // tasks the agents last reported running, all together
};

class AsyncAgents {
 public:
  explicit AsyncAgents(AsyncAgentsOptions options);
  ~AsyncAgents();  // stops them
  AsyncAgents(const AsyncAgents&) = delete;
  AsyncAgents& operator=(const AsyncAgents&) = delete;

  // Starts the loop on a thread of its own.
  void Start();
  // Ends every agent where it is (a heartbeat in flight is not counted) and joins the thread.
  void Stop();
  // After Stop: what they saw.
  const AsyncAgentsStats& stats() const;
  // While they run: a copy of what they saw so far, taken on their loop.
  AsyncAgentsStats Snapshot() const;

  struct Loop;  // the event loop and the agents (async_agents.cc)

 private:
  std::unique_ptr<Loop> loop_;
};

}  // namespace meridian::bench
