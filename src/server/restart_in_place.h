#pragma once

#include "base/status.h"

namespace meridian::server {

// Replaces this process with a fresh start of the same program and arguments: the same process
// id, so that a supervisor (systemd) sees one process throughout, and the same listening socket,
// handed to the new start at descriptor 3 through systemd's socket-activation variables
// (LISTEN_PID, LISTEN_FDS; net::HttpServer::Bind takes it), so that clients that connect
// meanwhile wait in its queue instead of being refused. Every other descriptor is closed by the
// exec. A deposed leader comes back this way as a follower (docs/adr/0028): a start afresh is
// the one path to a follower's state that every start exercises. Returns only when it could not
// exec, saying why.
base::Status RestartInPlace(int listener);

}  // namespace meridian::server
