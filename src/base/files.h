#pragma once

#include <cstdint>
#include <string>

namespace meridian::base {

// The whole of a file's contents; empty when it cannot be read (for callers to whom a missing
// file and an empty one mean the same).
std::string ReadWholeFile(const std::string& path);

// Descriptors a server keeps for itself beside its clients' connections: the store, logs, the
// listener, event loops. The server admits as many connections as its open-file limit leaves.
inline constexpr int64_t kFilesKeptBesideConnections = 1024;

// Raises this process's open-file (soft) limit to `wanted`: past the hard limit where the
// process may (root, where the host lets it), else as far as the hard limit. Children inherit it.
// Returns the limit now; -1 for none (or none known).
int64_t RaiseOpenFiles(int64_t wanted);

}  // namespace meridian::base
