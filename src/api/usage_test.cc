#include "api/usage.h"

#include <gtest/gtest.h>

namespace meridian::api {
namespace {

store::JobRecord RunningJob() {
  store::JobRecord job;
  job.id = 7;
  job.project = "research";
  job.user = "alice";
  job.generation = 3;
  job.spec = {{"command", {"sleep", "1"}}, {"cpuMilli", 2000}, {"memoryMib", 2048}};
  job.status = {{"startedAt", 100.0}};
  job.allocation = {{{"task", 0},
                     {"cluster", "cloud"},
                     {"node", "h200-a"},
                     {"pool", "h200"},
                     {"gpuModel", "H200-141GB"},
                     {"pricePerGpuHour", 6.0},
                     {"devices",
                      {{{"gpu", 0}, {"uuid", "GPU-0"}, {"milli", 1000}},
                       {{"gpu", 1}, {"uuid", "GPU-1"}, {"milli", 1000}}}}},
                    {{"task", 1},
                     {"cluster", "onprem"},
                     {"node", "a100-b"},
                     {"devices", {{{"gpu", 3}, {"uuid", "GPU-3"}, {"milli", 500}}}}}};
  return job;
}

// A run's records: one per task, its GPUs from the allocation (a half GPU as 0.5), the pool,
// model and price the placement took, CPU and memory from the spec, from the run's start.
TEST(Usage, ARunIsOneRecordPerTaskFromItsAllocation) {
  const std::vector<store::UsageRecord> r = UsageOfRun(RunningJob(), 400, "Succeeded");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].job, 7);
  EXPECT_EQ(r[0].generation, 3);
  EXPECT_EQ(r[0].user, "alice");
  EXPECT_EQ(r[0].pool, "h200");
  EXPECT_EQ(r[0].gpu_model, "H200-141GB");
  EXPECT_DOUBLE_EQ(r[0].gpus, 2);
  EXPECT_DOUBLE_EQ(r[0].price_per_gpu_hour, 6);
  EXPECT_EQ(r[0].cpu_milli, 2000);
  EXPECT_EQ(r[0].memory_mib, 2048);
  EXPECT_DOUBLE_EQ(r[0].started_at, 100);
  EXPECT_DOUBLE_EQ(r[0].ended_at, 400);
  EXPECT_EQ(r[0].outcome, "Succeeded");
  EXPECT_EQ(r[1].task, 1);
  EXPECT_EQ(r[1].cluster, "onprem");
  EXPECT_DOUBLE_EQ(r[1].gpus, 0.5);
  EXPECT_DOUBLE_EQ(r[1].price_per_gpu_hour, 0) << "unpriced";
  // A run never reported running counts from its placement; without one, it has no record.
  store::JobRecord placed = RunningJob();
  placed.status = store::Json::object();
  EXPECT_TRUE(UsageOfRun(placed, 400, "Cancelled").empty());
  placed.allocation[0]["placedAt"] = 90.0;
  placed.allocation[1]["placedAt"] = 90.0;
  const std::vector<store::UsageRecord> quick = UsageOfRun(placed, 400, "Succeeded");
  ASSERT_EQ(quick.size(), 2u);
  EXPECT_DOUBLE_EQ(quick[1].started_at, 90);
  // The share the placement wrote wins over the devices' milli (a MIG slice's milli is 0).
  placed.allocation[1]["devices"][0]["milli"] = 0;
  placed.allocation[1]["gpus"] = 0.375;
  EXPECT_DOUBLE_EQ(UsageOfRun(placed, 400, "Succeeded")[1].gpus, 0.375);
}

// Sums clip every record to the window, count jobs and runs once, and price GPU-hours at each
// record's own price.
TEST(Usage, SumsClipToTheWindowAndCountJobsAndRunsOnce) {
  std::vector<store::UsageRecord> records = UsageOfRun(RunningJob(), 3700, "Succeeded");
  store::JobRecord again = RunningJob();
  again.generation = 4;
  again.status = {{"startedAt", 5000.0}};
  for (store::UsageRecord& u : UsageOfRun(again, 9000, "Failed")) records.push_back(u);
  UsageTotals total;
  auto by_cluster = SumUsage(
      records, 1900, 5900, [](const store::UsageRecord& u) { return u.cluster; }, &total);
  // The first run counts from 1900 to 3700 (1800 s), the second from 5000 to 5900 (900 s).
  ASSERT_EQ(by_cluster.size(), 2u);
  const UsageTotals& cloud = by_cluster.at("cloud");
  EXPECT_DOUBLE_EQ(cloud.gpu_seconds, 2 * 1800 + 2 * 900);
  EXPECT_DOUBLE_EQ(cloud.cost, 2 * 2700 / 3600.0 * 6);
  EXPECT_DOUBLE_EQ(cloud.cpu_seconds, 2 * 2700);
  EXPECT_DOUBLE_EQ(cloud.memory_gib_seconds, 2 * 2700);
  EXPECT_EQ(cloud.jobs, 1);
  EXPECT_EQ(cloud.runs, 2);
  EXPECT_DOUBLE_EQ(by_cluster.at("onprem").gpu_seconds, 0.5 * 2700);
  EXPECT_DOUBLE_EQ(total.gpu_seconds, 2.5 * 2700);
  EXPECT_EQ(total.jobs, 1);
  EXPECT_EQ(total.runs, 2);
  // Records without a key are a row of their own, and the total is the same whatever the key.
  UsageTotals by_pool_total;
  auto by_pool = SumUsage(
      records, 1900, 5900, [](const store::UsageRecord& u) { return u.pool; }, &by_pool_total);
  EXPECT_DOUBLE_EQ(by_pool.at(kNoKey).gpu_seconds, 0.5 * 2700);
  EXPECT_DOUBLE_EQ(by_pool_total.gpu_seconds, total.gpu_seconds);
  // A window that no run overlaps: nothing.
  EXPECT_TRUE(
      SumUsage(
          records, 4000, 4500, [](const store::UsageRecord& u) { return u.cluster; }, &total)
          .empty());
  EXPECT_DOUBLE_EQ(total.gpu_seconds, 0);
}

}  // namespace
}  // namespace meridian::api
