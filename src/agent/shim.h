#pragma once

#include <string>

namespace meridian::agent {

// The supervisor of one task run: `meridian-shim DIR`, started by the agent in its own
// session so that it outlives the agent. It reads DIR/spec.json, starts the task in a new
// process group (output to a file, cgroups joined before exec), and then:
// - stops it when DIR/stop appears (the agent's request, protocol::ShimStop) or its runtime limit
//   is reached: the notice file and the notice signal first, SIGTERM half the grace period later,
//   SIGKILL at the end of it; the request's `within` shortens that grace (a drain's deadline);
// - stops it when the lease file has not been renewed for `lease` seconds (the agent lost the
//   server, or died): the notice, the notice signal and SIGTERM at once, SIGKILL at most
//   min(grace, fenceGrace) after the lease ran out, even when an ordinary stop was under way.
//   The lease file's contents ({lease, fenceGrace}, written by the agent) override the spec's;
// - SIGKILLs the task's process group and, on cgroup v2, its cgroup (what left the group too);
// - writes DIR/exit.json ({exitCode, signal, reason, finishedAt}) when the task has ended, after
//   killing whatever the task left in its process group and running the spec's `cleanup`
//   command (removing the container of a job with an image).
// The Policy guarantees agentLease + fenceGrace + 2 heartbeats <= nodeLostTimeout
// (domain/agent_timing.h), so a task whose node is given up on is dead before the server runs it
// elsewhere. Returns the process's exit status.
int RunShim(const std::string& dir);

// `meridian-shim --exec`: runs one command inside a running task for a session (`meridian
// exec`; agent/sessions.h). Reads protocol::ShimExec from fd 3; the command gets this process's
// stdin, stdout and stderr (a terminal or pipes), joins the task's cgroups and mount namespace,
// takes the task's uid and folder, in a session and process group of its own. This process
// keeps none of those three open, so that they end with the command; it forwards SIGTERM and
// SIGHUP to the command's group (SIGKILL 2 s later), and once the command has ended writes
// protocol::SessionEnd to fd 4.
int RunExecShim();

}  // namespace meridian::agent
