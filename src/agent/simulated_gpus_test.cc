#include "agent/simulated_gpus.h"

#include <gtest/gtest.h>

#include <set>

namespace meridian::agent {
namespace {

TEST(SimulatedGpus, BuildsTheInventoryFromASpec) {
  auto gpus = SimulatedGpus::FromSpec("8xH100-80GB, 2xA100-80GB", "n1", 4);
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  EXPECT_TRUE((*gpus)->simulated());
  auto inv = (*gpus)->Inventory();
  ASSERT_TRUE(inv.ok());
  ASSERT_EQ(inv->size(), 10u);
  std::set<std::string> uuids;
  for (const GpuInfo& g : *inv) uuids.insert(g.uuid);
  EXPECT_EQ(uuids.size(), 10u);
  EXPECT_EQ((*inv)[0].model, "H100-80GB");
  EXPECT_EQ((*inv)[0].memory_mib, 81920);
  EXPECT_TRUE((*inv)[0].mig_capable);
  // Domains of four within each group, and groups never share one.
  EXPECT_EQ((*inv)[3].nvlink_domain, 0);
  EXPECT_EQ((*inv)[4].nvlink_domain, 1);
  EXPECT_EQ((*inv)[8].nvlink_domain, 2);
  EXPECT_EQ((*inv)[8].model, "A100-80GB");
}

TEST(SimulatedGpus, RefusesBadSpecsWithAReason) {
  for (const auto& [spec, want] : std::vector<std::pair<std::string, std::string>>{
           {"8H100-80GB", "is not COUNTxMODEL"},
           {"0xH100-80GB", "count 1..64"},
           {"8xB300", "unknown GPU model \"B300\""},
           {"", "is not COUNTxMODEL"},
           {"40xH100-80GB,40xH100-80GB", "at most 64"}}) {
    auto gpus = SimulatedGpus::FromSpec(spec, "n", 0);
    ASSERT_FALSE(gpus.ok()) << spec;
    EXPECT_NE(gpus.status().message().find(want), std::string::npos)
        << spec << ": " << gpus.status().message();
  }
}

// The same MIG operations as on real GPUs, with NVML's rules: placements, overlaps, and a reset
// that takes the instances (not the mode) away.
TEST(SimulatedGpus, MigInstancesFollowNvmlsRules) {
  auto g = SimulatedGpus::FromSpec("2xH100-80GB", "n1");
  ASSERT_TRUE(g.ok());
  SimulatedGpus& gpus = **g;
  auto made = gpus.CreateMigInstance(0, "3g.40gb", 4);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(*made, "MIG-GPU-sim-n1-0/3g.40gb/4");
  EXPECT_TRUE((*gpus.Inventory())[0].mig_enabled);
  ASSERT_TRUE(gpus.CreateMigInstance(0, "3g.40gb", 4).ok());  // there already: used again
  EXPECT_EQ(gpus.MigLayout(0), (std::vector<std::string>{"3g.40gb@4"}));
  auto overlap = gpus.CreateMigInstance(0, "1g.10gb", 5);
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().message(),
            "GPU 0: MIG instance 1g.10gb at slice 5: insufficient resources (3g.40gb@4 holds its "
            "slices)");
  auto misplaced = gpus.CreateMigInstance(0, "3g.40gb", 2);
  ASSERT_FALSE(misplaced.ok());
  EXPECT_EQ(misplaced.status().message(),
            "GPU 0: MIG instance 3g.40gb at slice 2: not a placement of 3g.40gb");
  ASSERT_TRUE(gpus.CreateMigInstance(0, "1g.10gb", 0).ok());
  ASSERT_TRUE(gpus.ClearFault(0).ok());  // a reset: MIG mode stays, the instances are gone
  EXPECT_TRUE(gpus.MigLayout(0).empty());
  EXPECT_TRUE((*gpus.Inventory())[0].mig_enabled);
  ASSERT_TRUE(gpus.CreateMigInstance(0, "1g.10gb", 0).ok());
  ASSERT_TRUE(gpus.DestroyMigInstance(0, "1g.10gb", 0).ok());
  ASSERT_TRUE(gpus.CreateMigInstance(0, "7g.80gb", 0).ok());
  ASSERT_TRUE(gpus.SetMigMode(0, false).ok());  // off: the instances left go with it
  EXPECT_TRUE(gpus.MigLayout(0).empty());
  EXPECT_FALSE((*gpus.Inventory())[0].mig_enabled);
}

TEST(SimulatedGpus, TelemetryFollowsTheLoad) {
  auto gpus = SimulatedGpus::FromSpec("2xH100-80GB", "n1", 0);
  ASSERT_TRUE(gpus.ok());
  auto idle = (*gpus)->Telemetry();
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ((*idle)[1].utilization, 0);
  ASSERT_TRUE((*gpus)->SetLoad(1, 0.8, 40000).ok());
  auto busy = (*gpus)->Telemetry();
  ASSERT_TRUE(busy.ok());
  EXPECT_DOUBLE_EQ((*busy)[1].utilization, 0.8);
  EXPECT_EQ((*busy)[1].memory_used_mib, 40000);
  EXPECT_GT((*busy)[1].temperature_c, (*idle)[1].temperature_c);
  EXPECT_GT((*busy)[1].power_w, (*idle)[1].power_w);
  EXPECT_GT(*(*busy)[1].sm_clock_mhz, *(*idle)[1].sm_clock_mhz);
  EXPECT_EQ((*busy)[1].memory_total_mib, 81920);
  EXPECT_EQ((*busy)[0].utilization, 0);  // the other GPU is untouched
  // A healthy Hopper: every error counter it has reads zero; it remaps rows, retires no pages.
  EXPECT_EQ((*idle)[0].ecc_single_bit, 0);
  EXPECT_EQ((*idle)[0].ecc_double_bit, 0);
  EXPECT_EQ((*idle)[0].remapped_rows_uncorrectable, 0);
  EXPECT_EQ((*idle)[0].row_remap_pending, false);
  EXPECT_FALSE((*idle)[0].retired_pages_double_bit);
  EXPECT_FALSE((*gpus)->SetLoad(2, 0.5, 0).ok());
  EXPECT_FALSE((*gpus)->SetLoad(0, 1.5, 0).ok());
  EXPECT_FALSE((*gpus)->SetLoad(0, 0.5, 100000).ok());
}

// Fault injection: the XID is counted as NVML counts XID events, with what goes with it on the
// board (a double-bit error and a remap pending for 95); the probe fails until the simulated
// reset clears the fault, and the XID count stays, as NVML's does.
TEST(SimulatedGpus, InjectedFaultsReadAsNvmlReadsThemUntilAReset) {
  auto gpus = SimulatedGpus::FromSpec("2xH100-80GB", "n1");
  ASSERT_TRUE(gpus.ok());
  SimulatedGpus& g = **gpus;
  ASSERT_TRUE(g.Probe(1).ok());
  ASSERT_TRUE(g.InjectXid(1, 95).ok());
  auto t = g.Telemetry();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[1].xid_errors, 1);
  EXPECT_EQ((*t)[1].last_xid, 95);
  EXPECT_EQ((*t)[1].ecc_double_bit, 1);
  EXPECT_EQ((*t)[1].row_remap_pending, true);
  EXPECT_EQ((*t)[0].xid_errors, 0) << "only the GPU it was injected into";
  EXPECT_FALSE(g.Probe(1).ok());
  ASSERT_TRUE(g.ResetsItself());
  ASSERT_TRUE(g.ClearFault(1).ok());
  EXPECT_TRUE(g.Probe(1).ok()) << g.Probe(1).message();
  EXPECT_EQ((*g.Telemetry())[1].xid_errors, 1);
  EXPECT_EQ((*g.Telemetry())[1].row_remap_pending, false);
  // A failed remap does not heal with a reset.
  ASSERT_TRUE(g.InjectXid(0, 64).ok());
  ASSERT_TRUE(g.ClearFault(0).ok());
  EXPECT_NE(g.Probe(0).message().find("row remap failed"), std::string::npos);
  EXPECT_FALSE(g.InjectXid(2, 48).ok());
  EXPECT_FALSE(g.InjectXid(0, 0).ok());
}

// Injected warnings read as NVML would show them: corrected ECC and NVLink CRC counters that
// grow, a temperature near the slowdown the GPU reports, the power cap's throttle reason; a
// "clear" brings temperature and clocks back, and counters stay counted. The GPU stays healthy.
TEST(SimulatedGpus, InjectedWarningsReadAsNvmlReadsThem) {
  auto gpus = SimulatedGpus::FromSpec("2xH100-80GB", "n1");
  ASSERT_TRUE(gpus.ok());
  SimulatedGpus& g = **gpus;
  auto t = g.Telemetry();
  EXPECT_EQ((*t)[0].slowdown_temperature_c, SimulatedGpus::kSlowdownC);
  EXPECT_EQ((*t)[0].throttle_reasons, 0x1);  // idle
  EXPECT_EQ((*t)[0].ecc_single_bit, 0);
  EXPECT_EQ((*t)[0].nvlink_crc_errors, 0);
  for (const char* w : {"ecc-corrected", "nvlink-crc", "temperature", "power-cap"}) {
    ASSERT_TRUE(g.InjectWarning(1, w).ok()) << w;
  }
  t = g.Telemetry();
  EXPECT_EQ((*t)[1].ecc_single_bit, 1000);
  EXPECT_EQ((*t)[1].nvlink_crc_errors, 100);
  EXPECT_DOUBLE_EQ((*t)[1].temperature_c, SimulatedGpus::kWarmC);
  EXPECT_EQ((*t)[1].throttle_reasons, 0x1 | 0x4);
  EXPECT_DOUBLE_EQ((*t)[0].temperature_c, 30) << "only the GPU it was injected into";
  EXPECT_TRUE(g.Probe(1).ok());
  ASSERT_TRUE(g.InjectWarning(1, "clear").ok());
  t = g.Telemetry();
  EXPECT_DOUBLE_EQ((*t)[1].temperature_c, 30);
  EXPECT_EQ((*t)[1].throttle_reasons, 0x1);
  EXPECT_EQ((*t)[1].ecc_single_bit, 1000);
  EXPECT_NE(g.InjectWarning(1, "smoke").message().find("unknown \"smoke\""), std::string::npos);
  EXPECT_FALSE(g.InjectWarning(5, "temperature").ok());
}

}  // namespace
}  // namespace meridian::agent
