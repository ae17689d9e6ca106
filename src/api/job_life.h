#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "domain/lifecycle.h"
#include "store/store.h"

// The lifecycle applied to stored jobs: the one place where a job record's phase is written.
// Every caller that moves a job (the API, the controller, the node service) reads the record's
// life, asks domain::lifecycle for a transition, and commits it here with its events.
namespace meridian::api {

base::Result<domain::JobLife> LifeOf(const store::JobRecord& job);

// The job's spec, decoded from its stored (canonical) form; an error names the job and field.
base::Result<domain::JobSpec> SpecOf(const store::JobRecord& job);

// Writes the transition into `job` (phase, reason, generation, status; the allocation is
// dropped when the job goes back to the queue) and returns its events, not yet appended.
std::vector<store::Event> ApplyTransition(const domain::Transition& t, double now,
                                          store::JobRecord* job);

// When the transition ends a run (it releases the job's devices), the run's usage records
// (api/usage.h), appended in `tx`: read from `job` as it was before the transition (a requeue
// drops the allocation and the start). Whoever writes a transition calls it first.
base::Status AccountForRun(store::Tx& tx, const domain::Transition& t, double now,
                           const store::JobRecord& job);

// AccountForRun and ApplyTransition, then the job's update (checked against the version read) and
// its events in `tx`. Returns the last event's sequence number (0 when the transition said
// nothing), and sets the job's new version.
base::Result<int64_t> CommitTransition(store::Tx& tx, const domain::Transition& t, double now,
                                       store::JobRecord* job);

}  // namespace meridian::api
