#pragma once

namespace meridian::base {

// This build's version (the CMake project's), e.g. "0.1.0": `meridian version` prints it for the
// client, and GET /api/v1/version answers it for the server.
const char* Version();

}  // namespace meridian::base
