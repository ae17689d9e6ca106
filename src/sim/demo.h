#pragma once

#include <ostream>

#include "base/status.h"

namespace meridian::sim {

// What `make run` shows until the control plane exists: a synthetic hybrid estate (an on-prem
// cluster and a cloud region), a queue of example jobs, and where Meridian's placement engine
// puts each of them, with the estate's allocation and cost per hour afterwards.
base::Status RunDemo(std::ostream& out);

}  // namespace meridian::sim
