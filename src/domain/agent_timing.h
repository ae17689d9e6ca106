#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meridian::domain {

// How long the server and its agents wait for each other (the Policy's heartbeatInterval,
// agentLease, fenceGrace and nodeLostTimeout), and the rule that makes "never two copies at
// once" hold when an agent cannot reach the server:
//
//   agentLease + fenceGrace + 2 × heartbeatInterval ≤ nodeLostTimeout
//
// An agent's lease starts when it sends a heartbeat that the server then answers, so it starts
// before the server's own record of the heartbeat. A task whose agent has not renewed the lease
// for agentLease seconds gets SIGTERM at once and SIGKILL fenceGrace seconds later at the
// latest; the server runs the task elsewhere only after nodeLostTimeout seconds of silence. The
// two heartbeat intervals are slack for the supervisor's polling, timers and clock steps.
// agentLease is also the longest server outage that stops no task.
struct AgentTiming {
  double heartbeat_interval = 2;
  double agent_lease = 266;
  double fence_grace = 30;
  double node_lost_timeout = 300;
};

inline constexpr double kDefaultHeartbeatInterval = 2;
inline constexpr double kDefaultNodeLostTimeout = 300;  // Slurm's SlurmdTimeout, 5 minutes
inline constexpr double kMaxFenceGraceDefault = 30;

// The slack between the moment a lost node's tasks are dead and the moment the server gives up
// on the node.
inline double FenceMargin(double heartbeat_interval) { return 2 * heartbeat_interval; }

// fenceGrace when the Policy gives none: 30 s, or a tenth of the lost timeout when that is
// shorter (old policies with short timeouts stay valid).
double DefaultFenceGrace(double node_lost_timeout);

// agentLease when the Policy gives none: the longest lease the rule allows.
double DefaultAgentLease(double node_lost_timeout, double fence_grace, double heartbeat_interval);

// A broken rule: the Policy field to blame and a message that names the fields and figures.
struct TimingProblem {
  std::string field;
  std::string message;
};

// Which fields the Policy gave; the rest were derived, and a problem is blamed on what was given.
struct TimingGiven {
  bool agent_lease = false;
  bool fence_grace = false;
};

// The rule above, and a lease of at least three heartbeats (so that one late heartbeat stops no
// task). Empty when `t` is safe.
std::vector<TimingProblem> CheckAgentTiming(const AgentTiming& t, TimingGiven given);

// The timing of a stored Policy spec (its canonical form, or one stored before agentLease and
// fenceGrace existed: those are derived as the validator derives them).
AgentTiming AgentTimingOf(const nlohmann::json& policy_spec);

}  // namespace meridian::domain
