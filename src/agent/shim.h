#pragma once

#include <string>

namespace meridian::agent {

// The supervisor of one task run: `meridian-shim DIR`, started by the agent in its own
// session so that it outlives the agent. It reads DIR/spec.json, starts the task in a new
// process group (output to a file, cgroups joined before exec), and then:
// - stops it when DIR/stop appears (the agent's request) or when the lease file has not been
//   renewed for `lease` seconds (the agent lost the server, or died): the notice file and the
//   notice signal first, SIGTERM half the grace period later, SIGKILL at the end of it;
// - writes DIR/exit.json ({exitCode, signal, reason, finishedAt}) when the task has ended, after
//   killing whatever the task left in its process group and running the spec's `cleanup`
//   command (removing the container of a job with an image).
// Because the lease is shorter than the server's node-lost timeout, a task whose node is given
// up on has stopped before the server runs it elsewhere. Returns the process's exit status.
int RunShim(const std::string& dir);

}  // namespace meridian::agent
