#include "domain/agent_timing.h"

#include <algorithm>
#include <cstdio>

namespace meridian::domain {

namespace {

// Sums of decimal figures are not exact in binary: 1.4 + 0.2 + 0.4 is a hair above 2.
constexpr double kEpsilon = 1e-9;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

double DefaultFenceGrace(double node_lost_timeout) {
  return std::min(kMaxFenceGraceDefault, node_lost_timeout / 10);
}

double DefaultAgentLease(double node_lost_timeout, double fence_grace, double heartbeat_interval) {
  return node_lost_timeout - fence_grace - FenceMargin(heartbeat_interval);
}

std::vector<TimingProblem> CheckAgentTiming(const AgentTiming& t, TimingGiven given) {
  std::vector<TimingProblem> out;
  const double margin = FenceMargin(t.heartbeat_interval);
  const double fenced = t.agent_lease + t.fence_grace + margin;
  if (fenced > t.node_lost_timeout + kEpsilon) {
    out.push_back({given.agent_lease ? "agentLease" : "fenceGrace",
                   "agentLease (" + Seconds(t.agent_lease) + ") + fenceGrace (" +
                       Seconds(t.fence_grace) + ") + 2 × heartbeatInterval (" + Seconds(margin) +
                       ") = " + Seconds(fenced) + " exceeds nodeLostTimeout (" +
                       Seconds(t.node_lost_timeout) +
                       "): a lost node's tasks could still run when the server runs them "
                       "elsewhere; raise nodeLostTimeout to at least " +
                       Seconds(fenced) + " or shorten agentLease or fenceGrace"});
  }
  const double shortest = 3 * t.heartbeat_interval;
  if (t.agent_lease + kEpsilon < shortest) {
    if (given.agent_lease) {
      out.push_back(
          {"agentLease", Seconds(t.agent_lease) + " is shorter than three heartbeatIntervals (" +
                             Seconds(shortest) + "): one late heartbeat would stop every task"});
    } else {
      out.push_back({"nodeLostTimeout",
                     Seconds(t.node_lost_timeout) + " leaves an agentLease of " +
                         Seconds(t.agent_lease) + " (nodeLostTimeout − fenceGrace (" +
                         Seconds(t.fence_grace) + ") − 2 × heartbeatInterval (" + Seconds(margin) +
                         ")), shorter than three heartbeatIntervals (" + Seconds(shortest) +
                         "); raise nodeLostTimeout or shorten fenceGrace or heartbeatInterval"});
    }
  }
  return out;
}

AgentTiming AgentTimingOf(const nlohmann::json& s) {
  AgentTiming t;
  auto number = [&](const char* key, double fallback) {
    return s.is_object() && s.contains(key) && s.at(key).is_number() ? s.at(key).get<double>()
                                                                     : fallback;
  };
  t.heartbeat_interval = number("heartbeatInterval", kDefaultHeartbeatInterval);
  t.node_lost_timeout = number("nodeLostTimeout", kDefaultNodeLostTimeout);
  t.fence_grace = number("fenceGrace", DefaultFenceGrace(t.node_lost_timeout));
  t.agent_lease = number(
      "agentLease", DefaultAgentLease(t.node_lost_timeout, t.fence_grace, t.heartbeat_interval));
  return t;
}

}  // namespace meridian::domain
