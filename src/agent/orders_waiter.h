#pragma once

// The agent's side of orders pushed by the server (docs/adr/0030-orders-pushed-to-agents.md):
// a thread keeps a long poll open on GET /api/v1/agents/{node}/wait, and when the server
// answers with a new version (the node's orders changed), `TakeRung` says so and the agent
// heartbeats at once. Heartbeats still carry every order: without this (an older server, a
// refusal, the server away) the agent hears of new work at its next heartbeat, as before.

#include <memory>
#include <string>

#include "cli/client.h"

namespace meridian::agent {

class OrdersWaiter {
 public:
  explicit OrdersWaiter(std::string node);
  // Ends the thread. It may still be in its last call for up to the wait's timeout: it holds
  // only what it shares with this object, never the agent.
  ~OrdersWaiter();
  OrdersWaiter(const OrdersWaiter&) = delete;
  OrdersWaiter& operator=(const OrdersWaiter&) = delete;

  // Waits as `config` says (the server, and the node's credential once it has one); the first
  // call starts the thread.
  void Use(const cli::ClientConfig& config);
  // Whether the server rang since the last call; clears it.
  bool TakeRung();
  // Whether the server rang since the last TakeRung.
  bool rung() const;

  // Seconds the server may hold one wait before answering "nothing new".
  static constexpr int kWaitSeconds = 25;

  struct Shared;  // what the thread and this object share (orders_waiter.cc)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace meridian::agent
