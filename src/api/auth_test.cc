#include "api/auth.h"

#include <gtest/gtest.h>

namespace meridian::api {
namespace {

// Who may submit with which priority class: a row per (class, caller, project).
TEST(ClassUse, AdminsAlwaysOthersWithinTheClassScopes) {
  Tenancy tenancy;
  tenancy.team_of_project = {{"vision", "product"}, {"language", "product"}, {"research", "lab"}};
  tenancy.org_of_team = {{"product", "acme"}, {"lab", "acme"}};
  const Access admin("root", {{Role::kAdmin, "", "", "", ""}}, &tenancy);
  const Access alice("alice", {{Role::kMember, "", "", "vision", ""}}, &tenancy);
  const Access bob("bob", {{Role::kMember, "", "", "research", ""}}, &tenancy);
  const ClassUse preempting = ClassUseOf("high", Json::parse(R"({"value": 100})"));
  const ClassUse gentle = ClassUseOf("low", Json::parse(R"({"value": 0, "preempting": false})"));
  const ClassUse product =
      ClassUseOf("urgent", Json::parse(R"({"value": 90, "allowedScopes": [{"team": "product"}]})"));
  const ClassUse acme = ClassUseOf(
      "org-wide", Json::parse(R"({"value": 90, "allowedScopes": [{"organization": "acme"}]})"));
  const ClassUse none = ClassUseOf(
      "reserved", Json::parse(R"({"value": 5, "preempting": false, "allowedScopes": []})"));
  const ClassUse research = ClassUseOf(
      "lab-only", Json::parse(R"({"value": 90, "allowedScopes": [{"project": "research"}]})"));
  struct Case {
    const ClassUse* use;
    const Access* who;
    const char* project;
    const char* refusal;  // substring of the refusal; "" when allowed
  };
  const Case cases[] = {
      {&preempting, &admin, "vision", ""},
      {&preempting, &alice, "vision",
       "alice may not use priority class \"high\" in project vision: it preempts other jobs and "
       "names no allowedScopes, so only admins may"},
      {&gentle, &alice, "vision", ""},
      {&gentle, &bob, "research", ""},
      {&product, &alice, "vision", ""},
      {&product, &alice, "language", ""},
      {&product, &bob, "research",
       "bob may not use priority class \"urgent\" in project research: it is allowed only in "
       "team product"},
      {&acme, &bob, "research", ""},
      {&research, &bob, "research", ""},
      {&research, &alice, "vision", "it is allowed only in project research"},
      {&none, &alice, "vision", "names no allowedScopes, so only admins may"},
      {&none, &admin, "vision", ""},
  };
  for (const Case& c : cases) {
    const std::string got = c.who->ClassRefusal(*c.use, c.project);
    if (std::string(c.refusal).empty()) {
      EXPECT_EQ(got, "") << c.use->name << " by " << c.who->user() << " in " << c.project;
    } else {
      EXPECT_NE(got.find(c.refusal), std::string::npos)
          << c.use->name << " by " << c.who->user() << ": " << got;
    }
  }
}

// Who manages and who sees which scope: a row per (caller, scope).
TEST(Access, QuotasAreManagedFromAboveAndScopesSeenFromWithin) {
  Tenancy tenancy;
  tenancy.team_of_project = {{"vision", "product"}, {"language", "product"}, {"research", "lab"}};
  tenancy.org_of_team = {{"product", "acme"}, {"lab", "acme"}, {"empty", "acme"}};
  const Access admin("root", {{Role::kAdmin, "", "", "", ""}}, &tenancy);
  const Access org("olga", {{Role::kOrgAdmin, "acme", "", "", ""}}, &tenancy);
  const Access lead("lena", {{Role::kTeamLead, "", "product", "", ""}}, &tenancy);
  const Access empty_lead("emil", {{Role::kTeamLead, "", "empty", "", ""}}, &tenancy);
  const Access bob("bob", {{Role::kMember, "", "", "research", ""}}, &tenancy);
  const Access scraper("prom", {{Role::kMetrics, "", "", "", ""}}, &tenancy);
  struct Case {
    const Access* who;
    Scope scope;
    bool quota;  // CanManageQuota
    bool sees;   // SeesScope
  };
  const Case cases[] = {
      {&admin, {"acme", "", ""}, true, true},      {&org, {"acme", "", ""}, false, true},
      {&org, {"", "lab", ""}, true, true},         {&org, {"", "", "vision"}, true, true},
      {&lead, {"acme", "", ""}, false, true},      {&lead, {"", "product", ""}, false, true},
      {&lead, {"", "lab", ""}, false, false},      {&lead, {"", "", "vision"}, true, true},
      {&lead, {"", "", "research"}, false, false}, {&empty_lead, {"", "empty", ""}, false, true},
      {&bob, {"", "", "research"}, false, true},   {&bob, {"", "lab", ""}, false, true},
      {&bob, {"", "product", ""}, false, false},   {&bob, {"", "", "vision"}, false, false},
      {&scraper, {"acme", "", ""}, false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.who->CanManageQuota(c.scope), c.quota)
        << c.who->user() << " " << c.scope.ToString();
    EXPECT_EQ(c.who->SeesScope(c.scope), c.sees) << c.who->user() << " " << c.scope.ToString();
  }
  EXPECT_TRUE(lead.ManagesWithin({"", "product", ""}));
  EXPECT_FALSE(lead.ManagesWithin({"acme", "", ""}));
  EXPECT_TRUE(org.ManagesWithin({"acme", "", ""}));
  EXPECT_TRUE(scraper.ScrapesMetrics());
  EXPECT_TRUE(admin.ScrapesMetrics());
  EXPECT_FALSE(org.ScrapesMetrics());
  EXPECT_FALSE(scraper.CanRead("vision"));
}

TEST(ParseRoles, MetricsIsGlobal) {
  auto ok = ParseRoles(Json::parse(R"({"roles": [{"role": "metrics"}]})"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->at(0).role, Role::kMetrics);
  EXPECT_FALSE(ParseRoles(Json::parse(R"({"roles": [{"role": "metrics", "team": "x"}]})")).ok());
}

}  // namespace
}  // namespace meridian::api
