#pragma once

// Orders reach an agent at once (docs/adr/0030-orders-pushed-to-agents.md). Each agent keeps a
// long poll open on GET /api/v1/agents/{node}/wait?seen=V, which holds no thread on the server
// (net::Later). When what a node should run changes (a task placed on it or told to stop, a
// session offered into one of its tasks, a rebuild that moved its work), the server rings the
// node's bell: its version moves on, the poll is answered with it, and the agent heartbeats at
// once. The heartbeat's answer stays the only carrier of orders: a ring that is lost costs at
// most one heartbeat interval, as before.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/http.h"

namespace meridian::api {

class Doorbells {
 public:
  // Versions start at `epoch` (the server's start, in milliseconds), so that a version an agent
  // saw from an earlier server does not match by chance: its first wait is answered at once.
  explicit Doorbells(uint64_t epoch) : next_(epoch) {}

  // The node's version now.
  uint64_t Version(const std::string& node);
  // Something for `node`'s agent changed: its version moves on, and its waits are answered.
  void Ring(const std::string& node);
  // Answers `later` with {"version": V} at once when the node's version differs from `seen`;
  // otherwise when the node next rings (or, at the Later's timeout, with `seen`).
  void Wait(const std::string& node, uint64_t seen, std::shared_ptr<net::Later> later);
  // Nodes that have a wait open (for tests and metrics).
  size_t waiting();

 private:
  struct Bell {
    uint64_t version = 0;
    std::vector<std::shared_ptr<net::Later>> waits;
  };
  Bell& BellLocked(const std::string& node);

  std::mutex mu_;
  uint64_t next_;
  std::unordered_map<std::string, Bell> bells_;
};

// The answer to a wait: {"version": V}.
net::Response VersionAnswer(uint64_t version);

// The bell of a whole cluster, rung with each of its nodes' (GET
// /api/v1/agents/{node}/wait?scope=cluster): a back end that speaks for many nodes (the Slurm
// connector) waits on one bell rather than one per node. No node is named so: names come in
// URL paths, which a '/' would break.
inline std::string ClusterBell(const std::string& cluster) { return "cluster/" + cluster; }

}  // namespace meridian::api
