#pragma once

// The agent's side of orders pushed by the server (docs/adr/0030-orders-pushed-to-agents.md,
// docs/adr/0047-one-connection-per-agent.md). A thread keeps the node's channel open, one
// WebSocket (GET /api/v1/agents/{node}/channel) on which `Heartbeat` sends the agent's
// heartbeats and hears their answers, and on which the server rings when the node's orders
// change: `TakeRung` says so and the agent heartbeats at once. Where the server offers no
// channel (an older one answers 404), the thread keeps a long poll open on
// GET /api/v1/agents/{node}/wait instead, and heartbeats go as POSTs on the agent's own
// connection. Heartbeats still carry every order: without either (a refusal, the server away)
// the agent hears of new work at its next heartbeat, as before.

#include <memory>
#include <string>

#include "base/status.h"
#include "cli/client.h"

namespace meridian::agent {

class OrdersWaiter {
 public:
  // With `whole_cluster`, it waits on the bell of the node's whole cluster (GET
  // .../wait?scope=cluster), which rings whenever any of its nodes' orders change, and never opens
  // a channel: what a back end that speaks for many nodes (the Slurm connector) keeps, one for all.
  explicit OrdersWaiter(std::string node, bool whole_cluster = false);
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

  // A heartbeat's body sent over the channel, and the answer: its status and body, as a POST
  // would have them. kUnavailable, at once, when no channel is open (the caller POSTs it);
  // also when the channel gave no answer within `timeout` seconds, or its server answered that
  // another leads (307): it is closed and opened again.
  struct Answer {
    int status = 0;
    std::string body;
  };
  base::Result<Answer> Heartbeat(std::string body, double timeout);
  // Whether the channel is open now.
  bool channel_open() const;

  // Seconds the server may hold one wait before answering "nothing new".
  static constexpr int kWaitSeconds = 25;

  struct Shared;  // what the thread and this object share (orders_waiter.cc)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace meridian::agent
