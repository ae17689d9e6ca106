#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "domain/documents.h"

namespace meridian::domain {

// Quotas are handed down the tenancy tree (organization > team > project): what a node
// guarantees its children together, and the limit of each child, stay within what the node
// itself has. A child's quota for a GPU model is bounded by its parent's quota for that model,
// or, where the parent has none for it, by the parent's quota for any model; a child's
// any-model quota by the parent's any-model quota. The children's guarantees bounded by one
// parent quota sum to at most its guarantee; each child's limit is at most its limit (a child
// without a limit is held to the parent's by the scheduler).
enum class Unbounded {
  // A quota with no parent quota above it (an organization's; a team's in an organization
  // without one) is bounded by nothing: what admins write.
  kAllowed,
  // A parent without a quota guarantees nothing, so its children may be guaranteed nothing: what
  // a team lead or org-admin writes, who hands out only what its own scope was given.
  kGuaranteesNothing,
};

// The bounds that `docs` (a whole desired state) break, reported only for the quotas named in
// `checked` (kind "Quota" names) and for the children of those: one error per quota over a
// bound, on the document's file and line, naming the parent quota and the figures.
void CheckQuotaBounds(const std::vector<Document>& docs, const std::set<std::string>& checked,
                      Unbounded unbounded, ErrorList* errors);

}  // namespace meridian::domain
