#include "domain/node_ops.h"

#include <gtest/gtest.h>

namespace meridian::domain {
namespace {

TEST(NodeOps, RoundTripsThroughTheSpecAndKeepsTheAgentsFields) {
  Json spec = {{"cluster", "onprem"}, {"state", "Ready"}, {"gpus", Json::array()}};
  NodeOps ops;
  ops.drain = NodeDrain{1000, "disk swap", "admin", 900};
  EncodeNodeOps(ops, &spec);
  EXPECT_EQ(spec["cordoned"], true) << "a draining node is cordoned";
  EXPECT_EQ(spec["drain"]["deadline"], 1000);
  EXPECT_EQ(spec["cluster"], "onprem");
  const NodeOps back = DecodeNodeOps(spec);
  EXPECT_TRUE(back.cordoned);
  ASSERT_TRUE(back.drain);
  EXPECT_EQ(back.drain->reason, "disk swap");
  EXPECT_EQ(back.drain->by, "admin");
  EXPECT_EQ(back.drain->at, 900);
  // Uncordoned: the fields go, the agent's stay.
  EncodeNodeOps(NodeOps{}, &spec);
  EXPECT_FALSE(spec.contains("cordoned"));
  EXPECT_FALSE(spec.contains("drain"));
  EXPECT_EQ(spec["state"], "Ready");
}

TEST(NodeOps, FieldsOfTheWrongShapeReadAsAbsent) {
  const struct {
    Json spec;
    bool cordoned;
    bool draining;
  } cases[] = {
      {Json::object(), false, false},
      {nullptr, false, false},
      {{{"cordoned", "yes"}}, false, false},
      {{{"cordoned", true}}, true, false},
      {{{"drain", {{"reason", "no deadline"}}}}, false, false},
      {{{"drain", {{"deadline", 5}}}, {"cordoned", false}}, true, true},
      {{{"drain", 7}}, false, false},
  };
  for (const auto& c : cases) {
    const NodeOps ops = DecodeNodeOps(c.spec);
    EXPECT_EQ(ops.cordoned, c.cordoned) << c.spec.dump();
    EXPECT_EQ(ops.drain.has_value(), c.draining) << c.spec.dump();
  }
}

TEST(NodeOps, SchedulableOnlyWhenReadyAndNotCordoned) {
  NodeOps cordoned;
  cordoned.cordoned = true;
  NodeOps draining;
  draining.drain = NodeDrain{};
  EXPECT_TRUE(NodeSchedulable("Ready", NodeOps{}));
  EXPECT_FALSE(NodeSchedulable("Lost", NodeOps{}));
  EXPECT_FALSE(NodeSchedulable("Ready", cordoned));
  EXPECT_FALSE(NodeSchedulable("Ready", draining));
  EXPECT_EQ(NodeScheduling(NodeOps{}, true), "");
  EXPECT_EQ(NodeScheduling(cordoned, true), "cordoned");
  EXPECT_EQ(NodeScheduling(draining, true), "draining");
  EXPECT_EQ(NodeScheduling(draining, false), "drained");
}

TEST(NodeOps, DrainRequestsAreCheckedFieldByField) {
  auto empty = DecodeDrainRequest(nullptr);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->deadline);
  auto full = DecodeDrainRequest({{"deadline", 60}, {"reason", "kernel update"}});
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(*full->deadline, 60);
  EXPECT_EQ(full->reason, "kernel update");
  const struct {
    Json body;
    std::string error;
  } bad[] = {
      {{{"deadline", -1}}, "deadline: "},
      {{{"deadline", "soon"}}, "deadline: "},
      {{{"reason", 3}}, "reason: "},
      {{{"timeout", 3}}, "timeout: unknown field"},
      {Json::array(), "body: must be a JSON object"},
  };
  for (const auto& c : bad) {
    auto r = DecodeDrainRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u) << r.status().message();
  }
}

}  // namespace
}  // namespace meridian::domain
