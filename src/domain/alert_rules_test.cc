#include "domain/alert_rules.h"

#include <gtest/gtest.h>

#include "domain/documents.h"
#include "domain/testing/parse_documents.h"

namespace meridian::domain {
namespace {

std::vector<Document> ParseAlertRules(const std::string& text, ErrorList* errors) {
  return testing::ParseDocuments(text, "alerts.yaml", errors);
}

TEST(AlertRules, AnOverrideOfABuiltinWritesOnlyWhatChanges) {
  ErrorList errors;
  auto docs =
      ParseAlertRules("kind: AlertRule\nmetadata: {name: node-lost}\nspec: {for: 120}\n", &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  // The built-in's values are the defaults of the canonical form.
  EXPECT_EQ(docs[0].spec["condition"], "node-lost");
  EXPECT_EQ(docs[0].spec["severity"], "critical");
  EXPECT_EQ(docs[0].spec["for"], 120.0);
  const AlertRule r = AlertRuleFromSpec("node-lost", docs[0].spec);
  EXPECT_EQ(r.condition, AlertCondition::kNodeLost);
  EXPECT_EQ(r.for_seconds, 120);
  EXPECT_EQ(r.AlertName(), "MeridianNodeLost");
}

TEST(AlertRules, EffectiveRulesAreTheBuiltinsOverriddenAndDisabled) {
  std::map<std::string, Json> docs = {
      {"gpu-held-idle", {{"condition", "gpu-idle"}, {"enabled", false}}},
      {"pending-job-too-old", {{"condition", "pending-job-age"}, {"threshold", 60.0}}},
      {"vision-queue",
       {{"condition", "pending-job-age"}, {"threshold", 30.0}, {"project", "vision"}}},
  };
  const std::vector<AlertRule> rules = EffectiveAlertRules(docs);
  ASSERT_EQ(rules.size(), BuiltinAlertRules().size());  // one disabled, one added
  std::map<std::string, AlertRule> by_name;
  for (const AlertRule& r : rules) by_name[r.name] = r;
  EXPECT_EQ(by_name.count("gpu-held-idle"), 0u);
  EXPECT_EQ(by_name["pending-job-too-old"].threshold, 60);
  EXPECT_EQ(by_name["pending-job-too-old"].severity, "warning");  // the built-in's, kept
  EXPECT_EQ(by_name["vision-queue"].project, "vision");
  EXPECT_EQ(by_name["node-lost"].severity, "critical");
}

TEST(AlertRules, EveryErrorNamesFileLineAndField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"kind: AlertRule\nmetadata: {name: my-rule}\nspec: {severity: critical}\n",
       "alerts.yaml:3:1: spec.condition: is required"},
      {"kind: AlertRule\nmetadata: {name: r}\nspec:\n  condition: disk-full\n",
       "alerts.yaml:4:3: spec.condition: unknown condition \"disk-full\""},
      {"kind: AlertRule\nmetadata: {name: node-lost}\nspec:\n  condition: gpu-idle\n  "
       "threshold: 0.1\n",
       "spec.condition: the built-in rule node-lost watches node-lost"},
      {"kind: AlertRule\nmetadata: {name: r}\nspec:\n  condition: quota-near-limit\n  "
       "threshold: 1.5\n",
       "alerts.yaml:5:3: spec.threshold: must be between 0.01 and 1"},
      {"kind: AlertRule\nmetadata: {name: r}\nspec:\n  condition: node-lost\n  window: 60\n",
       "alerts.yaml:5:3: spec.window: is not used by condition node-lost"},
      {"kind: AlertRule\nmetadata: {name: r}\nspec:\n  condition: gpu-idle\n",
       "spec.threshold: is required by condition gpu-idle"},
      {"kind: AlertRule\nmetadata: {name: node-lost}\nspec:\n  severity: page\n",
       "alerts.yaml:4:3: spec.severity: \"page\" is not one of critical, warning, info"},
      {"kind: AlertRule\nmetadata: {name: node-lost}\nspec:\n  for: -1\n",
       "alerts.yaml:4:3: spec.for: must be between 0 and 2592000 seconds"},
      {"kind: AlertRule\nmetadata: {name: node-lost}\nspec:\n  labels: {severity: low}\n",
       "spec.labels: \"severity\" is set by the rule itself"},
      {"kind: AlertRule\nmetadata: {name: node-lost}\nspec:\n  colour: red\n",
       "alerts.yaml:4:3: spec.colour: unknown field"},
      {"kind: AlertReceiver\nmetadata: {name: am}\nspec: {type: alertmanager, url: "
       "\"localhost:9093\"}\n",
       "spec.url: must start with http:// or https://"},
      {"kind: AlertReceiver\nmetadata: {name: hook}\nspec:\n  type: webhook\n  url: "
       "http://x\n  resendInterval: 10\n",
       "alerts.yaml:6:3: spec.resendInterval: is used by alertmanager receivers only"},
      {"kind: AlertReceiver\nmetadata: {name: hook}\nspec: {url: \"http://x\"}\n",
       "spec.type: is required"},
  };
  for (const Case& c : cases) {
    ErrorList errors;
    ParseAlertRules(c.yaml, &errors);
    ASSERT_FALSE(errors.empty()) << c.yaml;
    EXPECT_EQ(errors.ToString().find("unknown field") != std::string::npos,
              std::string(c.want).find("unknown field") != std::string::npos)
        << errors.ToString();
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos)
        << "want: " << c.want << "\ngot:  " << errors.ToString();
  }
}

TEST(AlertRules, ARuleNamesAProjectThatExists) {
  ErrorList errors;
  auto docs = ParseAlertRules(
      "kind: AlertRule\nmetadata: {name: q}\nspec: {condition: pending-job-age, threshold: 60, "
      "project: ghost}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  EXPECT_NE(
      errors.ToString().find("alerts.yaml:1:0: spec.project: Project \"ghost\" does not exist"),
      std::string::npos)
      << errors.ToString();
}

}  // namespace
}  // namespace meridian::domain
