#pragma once

// Sessions into this node's tasks (`meridian exec`, `meridian port-forward`; docs/adr/0029-
// sessions-into-tasks.md). The server offers each in a heartbeat answer; the agent runs each on a
// thread of its own, which opens GET /agents/NODE/sessions/ID as a WebSocket and carries the
// session's frames (protocol::Channel) between the server and the command or port.

#include <string>
#include <vector>

#include "cli/client.h"
#include "protocol/agent_protocol.h"

namespace meridian::agent {

// What one session needs, copied out of the agent: a session's thread touches nothing of the
// agent's, and may outlive the task it was opened into (it then ends with the command).
struct SessionWork {
  cli::ClientConfig server;  // with the node's credential
  std::string node;
  protocol::SessionOffer offer;
  std::string refusal;      // not empty: the session cannot run; this is said to the user
  protocol::ShimExec exec;  // exec: the command, in the task's uid, cgroups, namespace, env
  std::string shim;         // the meridian-shim binary, which runs the command (`--exec`)
};

// Runs the session to its end: the WebSocket, then the command (or the connection to the port),
// and the frames between them. When the user goes, the command is ended (SIGHUP and SIGTERM to
// its group, SIGKILL 2 s later). Blocks; any thread.
void RunSession(const SessionWork& work);

}  // namespace meridian::agent
