#include "domain/idle_policy.h"

#include <gtest/gtest.h>

#include "domain/documents.h"
#include "domain/testing/parse_documents.h"

namespace meridian::domain {
namespace {

std::vector<Document> ParseIdlePolicies(const std::string& text, ErrorList* errors) {
  return testing::ParseDocuments(text, "idle.yaml", errors);
}

TEST(IdlePolicies, ADocumentReadsIntoItsTypeWithTheDefaults) {
  ErrorList errors;
  auto docs = ParseIdlePolicies(
      "kind: IdlePolicy\nmetadata: {name: notebooks}\n"
      "spec: {project: research, jobTypes: [interactive], exemptLabel: idle-exempt}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].spec["idleFor"], 1800.0) << "the canonical form holds every default";
  const IdlePolicy p = IdlePolicyFromSpec("notebooks", docs[0].spec);
  EXPECT_EQ(p.project, "research");
  ASSERT_EQ(p.job_types.size(), 1u);
  EXPECT_EQ(p.job_types[0], JobKind::kInteractive);
  EXPECT_EQ(p.action, IdleAction::kReclaim);
  EXPECT_EQ(p.threshold, 0.05);
  EXPECT_EQ(p.grace, 600);
  EXPECT_FALSE(p.dry_run);
  EXPECT_TRUE(IdleExempt(p, {{"idle-exempt", "true"}}));
  EXPECT_FALSE(IdleExempt(p, {{"idle-exempt", "false"}}));
  EXPECT_FALSE(IdleExempt(p, {}));
}

TEST(IdlePolicies, EveryErrorNamesFileLineAndField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec: {action: alert}\n",
       "idle.yaml:3:1: spec.jobTypes: is required"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [interactive, notebook]\n",
       "idle.yaml:4:3: spec.jobTypes: \"notebook\" is not a job type"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: []\n",
       "idle.yaml:4:3: spec.jobTypes: must name at least one job type"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [training]\n  action: kill\n",
       "idle.yaml:5:3: spec.action: \"kill\" is not one of reclaim, alert, none"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [training]\n  action: alert\n"
       "  grace: 60\n",
       "idle.yaml:6:3: spec.grace: is not used by action alert (only by reclaim)"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [inference]\n  action: none\n"
       "  threshold: 0.1\n",
       "idle.yaml:6:3: spec.threshold: is not used by action none"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [interactive]\n"
       "  threshold: 5\n",
       "idle.yaml:5:3: spec.threshold: must be between 0.001 and 1"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [interactive]\n  idleFor: 0\n",
       "idle.yaml:5:3: spec.idleFor: must be between 1"},
      {"kind: IdlePolicy\nmetadata: {name: p}\nspec:\n  jobTypes: [interactive]\n  dryrun: true\n",
       "idle.yaml:5:3: spec.dryrun: unknown field"},
  };
  for (const Case& c : cases) {
    ErrorList errors;
    ParseIdlePolicies(c.yaml, &errors);
    ASSERT_FALSE(errors.empty()) << c.yaml;
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos)
        << "want: " << c.want << "\ngot:  " << errors.ToString();
  }
}

TEST(IdlePolicies, OneProjectAndJobTypeHasOnePolicyAndProjectsExist) {
  ErrorList errors;
  auto docs = ParseIdlePolicies(
      "kind: Organization\nmetadata: {name: acme}\n---\n"
      "kind: Team\nmetadata: {name: lab}\nspec: {organization: acme}\n---\n"
      "kind: Project\nmetadata: {name: research}\nspec: {team: lab}\n---\n"
      "kind: IdlePolicy\nmetadata: {name: everyone}\nspec: {jobTypes: [interactive, training]}\n"
      "---\n"
      "kind: IdlePolicy\nmetadata: {name: research}\n"
      "spec: {project: research, jobTypes: [interactive]}\n---\n"
      "kind: IdlePolicy\nmetadata: {name: again}\n"
      "spec: {jobTypes: [training], action: alert}\n---\n"
      "kind: IdlePolicy\nmetadata: {name: ghost}\n"
      "spec: {project: ghost, jobTypes: [batch]}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  const std::string text = errors.ToString();
  EXPECT_NE(text.find("spec.jobTypes: training jobs of every project are covered by IdlePolicy "
                      "\"everyone\" already"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("spec.project: Project \"ghost\" does not exist"), std::string::npos) << text;
  // A project's own policy beside the one for every project is no conflict: it wins.
  EXPECT_EQ(text.find("IdlePolicy \"research\""), std::string::npos) << text;
  std::vector<IdlePolicy> policies;
  for (const Document& d : docs) {
    if (d.kind == "IdlePolicy") policies.push_back(IdlePolicyFromSpec(d.name, d.spec));
  }
  EXPECT_EQ(IdlePolicyFor(policies, "research", JobKind::kInteractive)->name, "research");
  EXPECT_EQ(IdlePolicyFor(policies, "vision", JobKind::kInteractive)->name, "everyone");
  EXPECT_EQ(IdlePolicyFor(policies, "research", JobKind::kTraining)->name, "everyone");
  EXPECT_EQ(IdlePolicyFor(policies, "research", JobKind::kInference), nullptr);
}

TEST(IdlePolicies, AJobsLabelsAreInItsSpecNotItsMetadata) {
  ErrorList errors;
  auto job = ValidateJobDocument({Json::parse(R"({"metadata": {"name": "nb", "project": "p"},
                       "spec": {"command": ["jupyter"], "labels": {"idle-exempt": "true"}}})"),
                                  "job.json",
                                  {}},
                                 &errors);
  ASSERT_TRUE(job) << errors.ToString();
  EXPECT_EQ(job->typed.labels.at("idle-exempt"), "true");
  errors = ErrorList();
  auto refused = ValidateJobDocument(
      {Json::parse(R"({"metadata": {"name": "nb", "project": "p", "labels": {"a": "b"}},
                       "spec": {"command": ["jupyter"]}})"),
       "job.json",
       {}},
      &errors);
  EXPECT_FALSE(refused);
  EXPECT_NE(errors.ToString().find("metadata.labels: a job's labels go in spec.labels"),
            std::string::npos)
      << errors.ToString();
}

}  // namespace
}  // namespace meridian::domain
