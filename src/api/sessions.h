#pragma once

// Sessions into running tasks (`meridian exec`, `meridian port-forward`): the relay between a
// user's WebSocket and the one the task's agent opens for it (docs/adr/0029-sessions-into-
// tasks.md). Agents make only outbound calls, so a session is offered to its node in the
// heartbeat answer and waits for the agent to take it up. Sessions live in this server's memory:
// a follower sends users to the leader (server::Leadership::Gate), whose agents heartbeat to it.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/entropy.h"
#include "base/status.h"
#include "net/http.h"
#include "protocol/agent_protocol.h"

namespace meridian::api {

// Thread-safe: each side runs on its own request's thread.
class SessionRelay {
 public:
  // `offered` is told the node of each session offered (its agent is rung for it).
  SessionRelay(base::Entropy* entropy, std::function<void(const std::string& node)> offered)
      : entropy_(entropy), offered_(std::move(offered)) {}

  // The user's side, on its request's thread: offers the session to `node` (the offer's id is
  // chosen here), waits up to `attach_timeout` seconds for its agent to take it up, then carries
  // the user's messages to the agent until either side ends. A session no agent took up ends
  // with an error status frame. Returns how it ended, in words.
  std::string RunUserSide(const std::string& node, protocol::SessionOffer offer,
                          std::shared_ptr<net::Tunnel> user, double attach_timeout);
  // The offers that `node`'s agent has yet to take up (its heartbeat answer carries them).
  std::vector<protocol::SessionOffer> Offers(const std::string& node);
  // Whether `node` may take up session `id`: it is offered to that node and not taken yet.
  // NotFound otherwise (whether it exists for another node or not).
  base::Status MayTake(const std::string& node, const std::string& id);
  // The agent's side: takes the session up and carries the agent's messages to the user until
  // either side ends. A session taken meanwhile gets an error frame.
  void RunAgentSide(const std::string& node, const std::string& id,
                    std::shared_ptr<net::Tunnel> agent);
  // Sessions offered or running now.
  int open();

 private:
  struct Session {
    std::string node;
    protocol::SessionOffer offer;
    std::shared_ptr<net::Tunnel> user;
    std::shared_ptr<net::Tunnel> agent;  // set once taken up
  };

  base::Entropy* entropy_;
  std::function<void(const std::string& node)> offered_;
  std::mutex mu_;
  std::condition_variable taken_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;  // by id
};

}  // namespace meridian::api
