#include "api/auth.h"

#include <gtest/gtest.h>

namespace meridian::api {
namespace {

// Who may submit with which priority class: a row per (class, caller, project).
TEST(ClassUse, AdminsAlwaysOthersWithinTheClassScopes) {
  Tenancy tenancy;
  tenancy.team_of_project = {{"vision", "product"}, {"language", "product"}, {"research", "lab"}};
  tenancy.org_of_team = {{"product", "acme"}, {"lab", "acme"}};
  const Access admin("root", {{Role::kAdmin, "", "", ""}}, &tenancy);
  const Access alice("alice", {{Role::kMember, "", "", "vision"}}, &tenancy);
  const Access bob("bob", {{Role::kMember, "", "", "research"}}, &tenancy);
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

}  // namespace
}  // namespace meridian::api
