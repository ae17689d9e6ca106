// Where a task finds its datasets and its checkpoint folder, by the site it runs in
// (docs/adr/0044-datasets.md).
#include "server/data_mounts.h"

#include <gtest/gtest.h>

namespace meridian::server {
namespace {

std::map<std::string, domain::Cluster> Sites() {
  std::map<std::string, domain::Cluster> sites;
  for (const char* name : {"fra", "ams", "cloud"}) sites[name].name = name;
  sites["fra"].storage.checkpoints = "/fra/checkpoints";
  sites["ams"].storage.cache = "/ams/cache";
  sites["ams"].storage.staging_command = {"rsync", "-a", "{source}/", "{target}/"};
  sites["cloud"].storage.cache = "/cloud/cache";
  sites["fra"].bandwidth_gbps = {{"ams", 40}};
  sites["cloud"].egress_per_gib = 0.09;
  return sites;
}

std::map<std::string, domain::Dataset> Datasets() {
  domain::Dataset d;
  d.name = "imagenet";
  d.size_gib = 150;
  d.locations = {{"fra", "/fra/datasets/imagenet", ""}, {"cloud", "", "s3://b/imagenet"}};
  return {{d.name, d}};
}

TEST(DataMounts, ALocationAtTheSiteIsMountedWhereItIs) {
  auto m = DataMounts(Datasets(), Sites(), {"imagenet"}, "fra");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].path, "/fra/datasets/imagenet");
  EXPECT_TRUE(m[0].stage_from.empty());
  EXPECT_DOUBLE_EQ(m[0].size_gib, 150);
}

TEST(DataMounts, ElsewhereItIsStagedIntoTheCacheFromTheFastestSite) {
  auto m = DataMounts(Datasets(), Sites(), {"imagenet"}, "ams");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].path, "/ams/cache/imagenet");
  EXPECT_EQ(m[0].stage_from, "/fra/datasets/imagenet") << "40 Gbit/s from fra, declared by fra";
  EXPECT_EQ(m[0].staging_command.size(), 4u);
  // The cloud has an object-store copy in its own region: that, whatever the links.
  m = DataMounts(Datasets(), Sites(), {"imagenet"}, "cloud");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].path, "/cloud/cache/imagenet");
  EXPECT_EQ(m[0].stage_from, "s3://b/imagenet");
  EXPECT_TRUE(m[0].staging_command.empty()) << "the default copy";
}

TEST(DataMounts, NoCacheOrNoDatasetDocumentGivesNoPath) {
  auto sites = Sites();
  sites["ams"].storage.cache.clear();
  auto m = DataMounts(Datasets(), sites, {"imagenet", "laion"}, "ams");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(m[0].path.empty()) << "the agent refuses it, saying why";
  EXPECT_EQ(m[1].name, "laion");
  EXPECT_TRUE(m[1].path.empty()) << "no Dataset document: the same";
}

TEST(DataMounts, CheckpointFoldersAreByProjectAndJobWhereTheSiteKeepsThem) {
  EXPECT_EQ(CheckpointDir(Sites(), "fra", "vision", 42), "/fra/checkpoints/vision/42");
  EXPECT_EQ(CheckpointDir(Sites(), "ams", "vision", 42), "");
  EXPECT_EQ(CheckpointDir(Sites(), "mars", "vision", 42), "");
}

}  // namespace
}  // namespace meridian::server
