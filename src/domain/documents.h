#pragma once

#include <optional>
#include <string>
#include <vector>

#include "domain/cluster.h"
#include "domain/job_spec.h"
#include "domain/spec.h"

namespace meridian::domain {

// The kinds of the desired state, in the order they are applied (what a document refers to
// comes before it).
const std::vector<std::string>& ConfigKinds();

// A validated document of the desired state, with its spec in canonical form (every field,
// defaults filled in), so that two documents that mean the same compare equal.
struct Document {
  std::string kind;
  std::string name;
  Json spec = Json::object();
  std::string file;  // where it came from, for messages; empty for the live state
  int line = 0;

  Json ToJson() const { return {{"kind", kind}, {"metadata", {{"name", name}}}, {"spec", spec}}; }
};

// Checks the envelope (kind, metadata.name, spec) and the spec of one document; errors go to
// `errors` with file, line and field.
std::optional<Document> ValidateDocument(const SourceDoc& source, ErrorList* errors);

// Checks a whole desired state: names unique per kind, references to organizations, teams,
// projects and clusters that exist in it, at most one Policy (named "default").
void ValidateDesiredState(const std::vector<Document>& docs, ErrorList* errors);

// A Cluster document's spec (canonical form) as the scheduler's cluster named `name`.
Cluster ClusterOfSpec(const std::string& name, const Json& spec);

// A Dataset document's spec (canonical form) as the dataset named `name`.
Dataset DatasetOfSpec(const std::string& name, const Json& spec);

// Node `i` of a NodePool that declares its nodes (`nodes: N`), from the pool's spec in canonical
// form: "<pool>-<i>", racks of rackSize nodes, NVLink domains of nvlinkDomainSize GPUs. The
// pool's labels, taints and purpose are the estate's to give (its nodes and agents' alike).
Node DeclaredPoolNode(const std::string& pool, const Json& spec, int64_t i);

// A job as submitted: {kind: Job (optional), metadata: {name, project}, spec: {...}}. The
// canonical form keeps metadata and spec. References (project, priority class) are checked by
// the server against the live state.
struct JobDocument {
  std::string name;
  std::string project;
  Json spec = Json::object();  // canonical, as stored
  JobSpec typed;               // the same, decoded
};
std::optional<JobDocument> ValidateJobDocument(const SourceDoc& source, ErrorList* errors);

}  // namespace meridian::domain
