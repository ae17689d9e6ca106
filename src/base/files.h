#pragma once

#include <string>

namespace meridian::base {

// The whole of a file's contents; empty when it cannot be read (for callers to whom a missing
// file and an empty one mean the same).
std::string ReadWholeFile(const std::string& path);

}  // namespace meridian::base
