#include "domain/quota_bounds.h"

#include <gtest/gtest.h>

namespace meridian::domain {
namespace {

Document Quota(const std::string& name, const std::string& scope_field, const std::string& scope,
               double guaranteed, double limit = -1, const std::string& model = "") {
  Json spec = {{scope_field, scope}, {"guaranteedGpus", guaranteed}, {"limitGpus", limit}};
  if (!model.empty()) spec["gpuModel"] = model;
  return {"Quota", name, spec, "q.yaml", 1};
}

std::vector<Document> Tree() {
  return {{"Organization", "acme", Json::object(), "", 0},
          {"Team", "product", {{"organization", "acme"}}, "", 0},
          {"Team", "lab", {{"organization", "acme"}}, "", 0},
          {"Project", "vision", {{"team", "product"}}, "", 0},
          {"Project", "language", {{"team", "product"}}, "", 0},
          {"Project", "research", {{"team", "lab"}}, "", 0}};
}

// A row per desired state: which quota is checked, by whom, and the error expected ("" none).
TEST(QuotaBounds, GuaranteesSumWithinTheParentsAndLimitsStayUnderIt) {
  struct Case {
    const char* what;
    std::vector<Document> quotas;
    std::string checked;
    Unbounded unbounded;
    std::string error;  // substring of the one error; "" when none
  };
  const Case cases[] = {
      {"within",
       {Quota("product", "team", "product", 16, 24), Quota("vision", "project", "vision", 8, 24),
        Quota("language", "project", "language", 8)},
       "vision",
       Unbounded::kGuaranteesNothing,
       ""},
      {"the guarantees sum beyond the team's",
       {Quota("product", "team", "product", 16, 24), Quota("vision", "project", "vision", 10),
        Quota("language", "project", "language", 8)},
       "vision",
       Unbounded::kGuaranteesNothing,
       "the guarantees within team product would sum to 18 GPUs (vision 10 GPUs, language 8 "
       "GPUs), beyond its own guarantee of 16 GPUs"},
      {"a limit beyond the team's",
       {Quota("product", "team", "product", 16, 24), Quota("vision", "project", "vision", 0, 100)},
       "vision",
       Unbounded::kAllowed,
       "a limit of 100 GPUs exceeds the limit of team product"},
      {"a team's guarantee beyond its organization's, an admin's write",
       {Quota("acme", "organization", "acme", 16, 16), Quota("product", "team", "product", 100000)},
       "product",
       Unbounded::kAllowed,
       "would sum to 100000 GPUs (product 100000 GPUs), beyond its own guarantee of 16 GPUs"},
      {"lowering a parent below its children",
       {Quota("product", "team", "product", 4), Quota("vision", "project", "vision", 8)},
       "product",
       Unbounded::kAllowed,
       "Quota \"product\" (team product, any model)"},
      {"no parent quota: admins may",
       {Quota("research", "project", "research", 8)},
       "research",
       Unbounded::kAllowed,
       ""},
      {"no parent quota: a team lead hands out nothing",
       {Quota("research", "project", "research", 8)},
       "research",
       Unbounded::kGuaranteesNothing,
       "is not within any quota of team lab for any model"},
      {"a model's quota is bounded by the parent's any-model quota",
       {Quota("product", "team", "product", 8),
        Quota("vision", "project", "vision", 9, -1, "H100")},
       "vision",
       Unbounded::kGuaranteesNothing,
       "beyond its own guarantee of 8 GPUs"},
      {"and by the parent's quota for that model first",
       {Quota("product", "team", "product", 8), Quota("p-h100", "team", "product", 2, -1, "H100"),
        Quota("vision", "project", "vision", 4, -1, "H100")},
       "vision",
       Unbounded::kGuaranteesNothing,
       "beyond its own guarantee of 2 GPUs"},
      {"an unchecked quota's old problem is not reported",
       {Quota("product", "team", "product", 1), Quota("vision", "project", "vision", 8),
        Quota("lab", "team", "lab", 4)},
       "lab",
       Unbounded::kAllowed,
       ""},
  };
  for (const Case& c : cases) {
    std::vector<Document> docs = Tree();
    docs.insert(docs.end(), c.quotas.begin(), c.quotas.end());
    ErrorList errors;
    CheckQuotaBounds(docs, {c.checked}, c.unbounded, &errors);
    if (c.error.empty()) {
      EXPECT_TRUE(errors.empty()) << c.what << ": " << errors.errors().front().ToString();
      continue;
    }
    ASSERT_EQ(errors.size(), 1u) << c.what;
    EXPECT_NE(errors.errors()[0].message.find(c.error), std::string::npos)
        << c.what << ": " << errors.errors()[0].message;
  }
}

}  // namespace
}  // namespace meridian::domain
