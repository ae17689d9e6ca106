#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "domain/gpu_health.h"

// What an operator wants of a registered node, apart from what its agent reports: cordoned
// (it takes no new job), draining (its jobs are being stopped and requeued by a deadline). The
// intent lives in the Node object's spec (`cordoned`, `drain`), so that it survives server
// restarts and the agent's re-registration, which rewrites the rest of the spec. Liveness
// (`state`: Ready or Lost) stays the node service's; neither side overwrites the other's
// fields, as a job's desired and observed parts are kept apart.
namespace meridian::domain {

using Json = nlohmann::json;

struct NodeDrain {
  double deadline = 0;  // Unix seconds: the node's jobs are stopped by then
  std::string reason;   // the operator's word, may be empty
  std::string by;       // who asked
  double at = 0;        // when
};

struct NodeOps {
  bool cordoned = false;
  std::optional<NodeDrain> drain;  // a draining node is cordoned too
  // GPUs that faulted: cordoned ones take no new work until remediated (gpu_health.h). Kept
  // here, with the node's own cordon, because it is the same kind of state: the control plane's
  // intent, which the agent's registration must not overwrite.
  std::vector<GpuHealth> gpus;
};

// Reads the operator fields of a Node spec. Fields of the wrong shape (a store written by hand)
// read as absent: an operator can always set them again.
NodeOps DecodeNodeOps(const Json& spec);
// Writes `ops` over the operator fields of `spec`, removing those it does not hold; the rest of
// the spec is left as it is.
void EncodeNodeOps(const NodeOps& ops, Json* spec);

// Whether the scheduler may place new work on a node: it is Ready (heartbeating) and nobody
// cordoned it.
bool NodeSchedulable(std::string_view state, const NodeOps& ops);

// How the operator's intent stands, as /api/v1/nodes shows it: "" (none), "cordoned",
// "draining" (jobs still hold resources on it), "drained" (none does any more).
std::string_view NodeScheduling(const NodeOps& ops, bool jobs_hold_it);

// The body of POST /api/v1/nodes/{name}/drain: {deadline: seconds from now, reason}. Both are
// optional; without a deadline the longest grace period of the node's jobs applies.
struct DrainRequest {
  std::optional<double> deadline;
  std::string reason;
};
base::Result<DrainRequest> DecodeDrainRequest(const Json& body);

}  // namespace meridian::domain
