#pragma once

#include <string>

#include "cli/output.h"

namespace meridian::cli {

// The tables `get` prints, one per kind of resource, from the API's JSON. `now` (seconds since
// the epoch) is for ages; `wide` is `-o wide`.

// A job's GPU request as a column: "8", "2x8", "0.5", "3g.40gb".
std::string GpuRequest(const Json& spec);
// An array's counts by phase, as Slurm users read them: "3 Running, 40 Pending, 957 Succeeded".
std::string ArrayPhases(const Json& array);
// A job's id as listed: an array's element is ID_INDEX; an array (its first element standing
// for it) is its id.
std::string ListedId(const Json& j);
// An array's elements (`--elements`): ID_INDEX, job id, phase and reason.
Table ElementsTable(const Json& elements, const Json& array_id);
Table JobsTable(const Json& items, bool wide, double now);
// Jobs as sacct lists them (`get jobs --all -o wide`): id, name, user, project, phase, start,
// end, elapsed and exit code.
Table JobHistoryTable(const Json& items, double now);
// "Ready", "Ready,Cordoned", "Lost,Drained", "Ready,GPU 2 cordoned", ...
std::string NodeState(const Json& n);
Table NodesTable(const Json& items, bool wide);
Table AlertsTable(const Json& items, double now);
Table IdleTable(const Json& items, double now);
// Budget documents with what their scope spent (docs/adr/0041-budgets.md).
Table BudgetsTable(const Json& items);
Table ObjectsTable(const std::string& resource, const Json& items, bool wide, double now);
Table EventsTable(const Json& items, double now);
Table TokensTable(const Json& items, double now);

}  // namespace meridian::cli
