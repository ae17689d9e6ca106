#include "domain/label_selector.h"

#include <gtest/gtest.h>

namespace meridian::domain {
namespace {

TEST(LabelSelector, SelectsAsKubectlDoes) {
  const std::map<std::string, std::string> nlp_batch = {{"team", "nlp"}, {"tier", "batch"}};
  const std::map<std::string, std::string> nlp_serve = {{"team", "nlp"}, {"tier", "serve"}};
  const std::map<std::string, std::string> vision = {{"team", "vision"}, {"gpu", ""}};
  const std::map<std::string, std::string> none;
  const struct {
    const char* selector;
    bool nlp_batch, nlp_serve, vision, none;
  } kCases[] = {
      {"", true, true, true, true},
      {"team=nlp", true, true, false, false},
      {"team==nlp", true, true, false, false},
      {"team=nlp,tier!=batch", false, true, false, false},
      {"tier!=batch", false, true, true, true},  // absent counts as "not batch"
      {"tier", true, true, false, false},
      {"!tier", false, false, true, true},
      {"gpu=", false, false, true, false},
      {" team = vision , gpu ", false, false, true, false},
      {"example.com/owner", false, false, false, false},
  };
  for (const auto& c : kCases) {
    auto s = LabelSelector::Parse(c.selector);
    ASSERT_TRUE(s.ok()) << c.selector << ": " << s.status().message();
    EXPECT_EQ(s->Matches(nlp_batch), c.nlp_batch) << c.selector;
    EXPECT_EQ(s->Matches(nlp_serve), c.nlp_serve) << c.selector;
    EXPECT_EQ(s->Matches(vision), c.vision) << c.selector;
    EXPECT_EQ(s->Matches(none), c.none) << c.selector;
  }
}

TEST(LabelSelector, AMalformedRequirementIsNamed) {
  const struct {
    const char* selector;
    const char* part;
  } kCases[] = {
      {"team=nlp,", "\"\" is empty"},        {"=nlp", "\"=nlp\" has no valid key"},
      {"!", "\"!\" has no valid key"},       {"team=a b", "\"team=a b\" has an invalid value"},
      {"team in (a,b)", "has no valid key"}, {"a=b=c", "has an invalid value"},
  };
  for (const auto& c : kCases) {
    auto s = LabelSelector::Parse(c.selector);
    ASSERT_FALSE(s.ok()) << c.selector;
    EXPECT_NE(s.status().message().find(c.part), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find("use key=value, key!=value, key or !key"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace meridian::domain
