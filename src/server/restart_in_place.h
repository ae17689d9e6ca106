#pragma once

#include <string>

#include "base/status.h"

namespace meridian::server {

// Replaces this process with a fresh start of the same program, arguments and environment:
// the same process id, so that a supervisor (systemd) sees one process throughout. Every
// descriptor closes at the exec (the listener, the store's connections, the data dir's lock,
// clients' connections), so that clients are refused, and go to another server, while the new
// start waits for its database; `listen` (HOST:PORT, as bound) is what the new start binds
// again, even when the flags said port 0. A deposed leader comes back this way as a follower
// (docs/adr/0028): a start afresh is the one path to a follower's state that every start
// exercises. Returns only when it could not exec, saying why.
base::Status RestartInPlace(const std::string& listen);

// In a process that RestartInPlace started: the HOST:PORT to bind again, once (the variable
// that carries it is cleared); "" otherwise. Call it before any thread starts: it also closes
// every descriptor past stderr that a thread of the old process opened as the exec came.
std::string TakeRestartListen();

}  // namespace meridian::server
