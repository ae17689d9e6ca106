#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/estate.h"
#include "store/store.h"

namespace meridian::server {

// The one seam between the control plane and whatever runs tasks (DESIGN.md, "Back ends"):
// Meridian's own agents (NodeService) now; the Slurm connector and the cloud provisioners of
// later issues plug in here.
//
// The controller tells a back end, level-triggered, what should be on its nodes: every job that
// holds resources there, with its generation, its devices and, for a job in Stopping, that it
// must stop by `status.stop.deadline` (Reset with every such job after a rebuild; Track with one
// job after each change the controller follows). The back end starts what it is told, stops
// what it is told to stop or is no longer told (a run of another generation is never told:
// fencing), and says what its runners observed (a task started, exited with a code, or its
// node could not be reached past the fencing deadline) as lifecycle transitions
// (domain::lifecycle::Report, NodeLost) committed through api::CommitTransition. It never
// decides placement and never writes a phase. Nodes that no back end runs (declared by a pool)
// have no runner to wait for: the controller observes their stops itself.
//
// Calls come from the controller's thread, under its lock; implementations are thread-safe
// against their own report paths (heartbeats, syncs). Every call is idempotent: telling the same
// thing twice changes nothing.
class Backend {
 public:
  virtual ~Backend() = default;

  // Whether this back end's runners run `node` (so stops there wait for their reports).
  virtual bool Runs(const Estate& estate, const std::string& node) const = 0;
  // Everything that should be on this back end's nodes, replacing what it was told before.
  virtual void Reset(const Estate& estate, const std::vector<store::JobRecord>& jobs) = 0;
  // One job as stored now: placed, stopping, or over (then nothing of it should run).
  virtual void Track(const store::JobRecord& job) = 0;
  // Declares lost the nodes whose runners have been silent past the lost timeout, and ends
  // their jobs' runs, in one transaction. Returns whether anything changed.
  virtual base::Result<bool> ExpireNodes() = 0;
  // The nodes it runs whose runners have been silent for a few heartbeats but are not lost yet:
  // no new work is placed there meanwhile.
  virtual std::set<std::string> Unreachable() const = 0;
};

}  // namespace meridian::server
