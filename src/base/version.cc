#include "base/version.h"

// CMakeLists.txt defines it for this file alone, so a new version rebuilds one file.
#ifndef MERIDIAN_VERSION
#error "MERIDIAN_VERSION must be defined (CMakeLists.txt sets it for src/base/version.cc)"
#endif

namespace meridian::base {

const char* Version() { return MERIDIAN_VERSION; }

}  // namespace meridian::base
