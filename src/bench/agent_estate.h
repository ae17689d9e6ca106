#pragma once

// What bench agents and bench server share: a server of their own with an estate applied and an
// agent token, and nodes registered into it as agents register them.

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/async_agents.h"
#include "bench/owned_server.h"

namespace meridian::bench {

// An answer with `status`, or an error that says what failed and the server's answer.
base::Status ExpectStatus(const httplib::Result& r, int status, const std::string& what);

struct AgentEstate {
  std::unique_ptr<OwnedServer> server;
  std::string admin;        // the admin token
  std::string agent_token;  // of the user "agents", for registrations
};

// Starts `binary server` for `agents` agents, all from 127.0.0.1 (the limit per address would
// refuse their waits and heartbeats) and with the write limit off (one admin token submits every
// job), and applies `estate` (YAML) with its INTERVAL and LOST replaced by the heartbeat
// interval and a lost timeout of 15 of them (at least 30 s).
// `connections`: what each agent keeps open (2: heartbeats and a wait; 1: a channel).
base::Result<AgentEstate> StartAgentEstate(const std::string& binary, int agents,
                                           std::string estate, double interval,
                                           int connections = 2);

// A node to register: its pool and its GPUs' model.
struct AgentNode {
  std::string pool;
  std::string model;
};

// Registers nodes "bench-0" .. "bench-(count-1)" of `gpus_per_node` GPUs each, as `node(i)`
// says, from a few threads; returns the agents to run for them (each node's credential, which
// its heartbeats carry), the heartbeat interval and waits left to the caller.
base::Result<AsyncAgentsOptions> RegisterAgents(const AgentEstate& estate, int count,
                                                int gpus_per_node,
                                                const std::function<AgentNode(int)>& node);

}  // namespace meridian::bench
