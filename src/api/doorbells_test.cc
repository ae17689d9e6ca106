#include "api/doorbells.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>

namespace meridian::api {
namespace {

// Stands in for a waiting connection: records the answer it is given.
class RecordedLater : public net::Later {
 public:
  bool Answer(net::Response response) override {
    if (answer) return false;
    answer = nlohmann::json::parse(response.body);
    return true;
  }
  bool waiting() const override { return !answer && !gone; }
  std::optional<nlohmann::json> answer;
  bool gone = false;
};

TEST(Doorbells, AWaitIsAnsweredWhenItsNodeRingsAndNotForAnotherNode) {
  Doorbells bells(1000);
  EXPECT_EQ(bells.Version("n1"), 1000u);
  auto n1 = std::make_shared<RecordedLater>();
  auto n2 = std::make_shared<RecordedLater>();
  bells.Wait("n1", 1000, n1);
  bells.Wait("n2", 1000, n2);
  EXPECT_FALSE(n1->answer);
  EXPECT_EQ(bells.waiting(), 2u);
  bells.Ring("n1");
  ASSERT_TRUE(n1->answer);
  EXPECT_EQ((*n1->answer)["version"], bells.Version("n1"));
  EXPECT_GT(bells.Version("n1"), 1000u);
  EXPECT_FALSE(n2->answer) << "n2's orders did not change";
  EXPECT_EQ(bells.waiting(), 1u);
}

TEST(Doorbells, ARingBetweenTwoWaitsIsNotMissed) {
  Doorbells bells(5);
  const uint64_t seen = bells.Version("n1");
  bells.Ring("n1");  // while the agent was between waits (heartbeating)
  auto later = std::make_shared<RecordedLater>();
  bells.Wait("n1", seen, later);
  ASSERT_TRUE(later->answer) << "answered at once: the node rang since `seen`";
  EXPECT_EQ((*later->answer)["version"], bells.Version("n1"));
  // A version from an earlier server (another epoch) is answered at once too.
  auto stale = std::make_shared<RecordedLater>();
  bells.Wait("n1", 0, stale);
  EXPECT_TRUE(stale->answer);
}

TEST(Doorbells, WaitsThatEndedAreForgottenAsNewOnesCome) {
  Doorbells bells(1);
  auto first = std::make_shared<RecordedLater>();
  bells.Wait("n1", 1, first);
  first->gone = true;  // its timeout answered it, or its agent went away
  EXPECT_EQ(bells.waiting(), 0u);
  auto second = std::make_shared<RecordedLater>();
  bells.Wait("n1", 1, second);
  EXPECT_EQ(first.use_count(), 1) << "the ended wait is no longer held";
  bells.Ring("n1");
  EXPECT_TRUE(second->answer);
  EXPECT_FALSE(first->answer);
}

}  // namespace
}  // namespace meridian::api
