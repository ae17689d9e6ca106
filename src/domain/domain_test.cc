#include <gtest/gtest.h>

#include "domain/gpu_model.h"
#include "domain/job.h"
#include "domain/workload.h"

namespace meridian::domain {
namespace {

TEST(GpuCatalog, KnowsMigGeometryOfDatacenterModels) {
  const GpuCatalog& c = GpuCatalog::Builtin();
  struct Case {
    const char* model;
    const char* profile;
    int slices;
    std::vector<int> starts;
  };
  const Case cases[] = {
      {"A100-40GB", "1g.5gb", 1, {0, 1, 2, 3, 4, 5, 6}},
      {"A100-40GB", "3g.20gb", 4, {0, 4}},
      {"A100-80GB", "2g.20gb", 2, {0, 2, 4}},
      {"H100-80GB", "3g.40gb", 4, {0, 4}},
      {"H100-80GB", "7g.80gb", 8, {0}},
      {"H200-141GB", "1g.35gb", 2, {0, 2, 4, 6}},
      {"H200-141GB", "4g.71gb", 4, {0}},
  };
  for (const Case& k : cases) {
    const GpuModel* m = c.Find(k.model);
    ASSERT_NE(m, nullptr) << k.model;
    const MigProfile* p = m->FindMigProfile(k.profile);
    ASSERT_NE(p, nullptr) << k.model << " " << k.profile;
    EXPECT_EQ(p->memory_slices, k.slices) << k.profile;
    EXPECT_EQ(p->starts, k.starts) << k.profile;
    for (int s : p->starts) EXPECT_LE(s + p->memory_slices, kMigMemorySlices);
  }
  EXPECT_FALSE(c.Find("T4")->mig_capable());
  EXPECT_EQ(c.Find("H100-80GB")->FindMigProfile("3g.20gb"), nullptr);
}

TEST(GpuCatalog, UnknownModelsAreAcceptedWithoutMig) {
  GpuModel g2 = GpuCatalog::Builtin().Resolve("G2");
  EXPECT_EQ(g2.name, "G2");
  EXPECT_FALSE(g2.mig_capable());
  EXPECT_EQ(g2.memory_mib, 0);
}

Job OneTaskJob(GpuRequest gpu) {
  Job j;
  j.name = "j";
  j.task_groups.push_back({"main", 1, {1000, 1024, gpu}});
  return j;
}

TEST(ValidateJob, NamesTheBadField) {
  const GpuCatalog& c = GpuCatalog::Builtin();
  EXPECT_TRUE(ValidateJob(OneTaskJob(GpuRequest::Whole(8)), c).ok());
  EXPECT_TRUE(ValidateJob(OneTaskJob(GpuRequest::Fraction(500)), c).ok());
  EXPECT_TRUE(ValidateJob(OneTaskJob(GpuRequest::Mig("3g.40gb")), c).ok());

  auto bad = ValidateJob(OneTaskJob(GpuRequest::Fraction(1500)), c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("task_groups[0].request.gpu.milli"), std::string::npos)
      << bad.message();

  bad = ValidateJob(OneTaskJob(GpuRequest::Mig("5g.13gb")), c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("mig_profile"), std::string::npos);

  Job j = OneTaskJob(GpuRequest::Whole(0));
  bad = ValidateJob(j, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("count"), std::string::npos);
  j.task_groups.clear();
  EXPECT_FALSE(ValidateJob(j, c).ok());
}

// The names documents use read back as the values they name, and nothing else reads.
TEST(Workload, NamesOfTypesAndPurposesRoundTrip) {
  for (JobKind k :
       {JobKind::kTraining, JobKind::kInference, JobKind::kInteractive, JobKind::kBatch}) {
    EXPECT_EQ(ParseJobKind(JobKindName(k)), k) << JobKindName(k);
  }
  for (PoolPurpose p : {PoolPurpose::kAny, PoolPurpose::kTraining, PoolPurpose::kInference,
                        PoolPurpose::kInteractive}) {
    EXPECT_EQ(ParsePoolPurpose(PoolPurposeName(p)), p) << PoolPurposeName(p);
  }
  EXPECT_FALSE(ParseJobKind("serving"));
  EXPECT_FALSE(ParsePoolPurpose("Training"));
}

// Which pools each type of job may use: a row per type, a column per purpose.
TEST(Workload, EachTypeRunsInPoolsOfItsPurposeOrAny) {
  struct Case {
    JobKind kind;
    bool any, training, inference, interactive;
  };
  const Case cases[] = {
      {JobKind::kTraining, true, true, false, false},
      {JobKind::kInference, true, false, true, false},
      {JobKind::kInteractive, true, false, false, true},
      {JobKind::kBatch, true, true, false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PoolServes(PoolPurpose::kAny, c.kind), c.any) << JobKindName(c.kind);
    EXPECT_EQ(PoolServes(PoolPurpose::kTraining, c.kind), c.training) << JobKindName(c.kind);
    EXPECT_EQ(PoolServes(PoolPurpose::kInference, c.kind), c.inference) << JobKindName(c.kind);
    EXPECT_EQ(PoolServes(PoolPurpose::kInteractive, c.kind), c.interactive) << JobKindName(c.kind);
  }
}

}  // namespace
}  // namespace meridian::domain
