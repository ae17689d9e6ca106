#include "agent/nvml_gpus.h"

#include <gtest/gtest.h>

namespace meridian::agent {
namespace {

TEST(NvmlGpus, WithoutTheDriverSaysWhatToDo) {
  auto g = NvmlGpus::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("NVML is not available"), std::string::npos);
  EXPECT_NE(g.status().message().find("--simulate-gpus"), std::string::npos);
}

// Through dlopen of a FAKE libnvidia-ml (tests/fake_nvml): the real code path, made-up GPUs.
TEST(NvmlGpus, ReadsInventoryTopologyAndTelemetryThroughDlopen) {
  auto g = NvmlGpus::Open(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_FALSE((*g)->simulated());
  auto inventory = (*g)->Inventory();
  ASSERT_TRUE(inventory.ok()) << inventory.status().message();
  ASSERT_EQ(inventory->size(), 4u);
  const std::vector<GpuInfo>& gpus = *inventory;
  EXPECT_EQ(gpus[0].uuid, "GPU-fake-0000-0000");
  EXPECT_EQ(gpus[0].model, "H100-80GB");
  EXPECT_EQ(gpus[0].memory_mib, 81559);
  // 0-1 directly, 2-3 through a switch: two domains.
  EXPECT_EQ(gpus[0].nvlink_domain, gpus[1].nvlink_domain);
  EXPECT_EQ(gpus[2].nvlink_domain, gpus[3].nvlink_domain);
  EXPECT_NE(gpus[0].nvlink_domain, gpus[2].nvlink_domain);
  EXPECT_TRUE(gpus[3].mig_enabled);
  EXPECT_FALSE(gpus[0].mig_enabled);
  EXPECT_TRUE(gpus[0].mig_capable);
  auto t = (*g)->Telemetry();
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 4u);
  EXPECT_DOUBLE_EQ((*t)[1].utilization, 0.2);
  EXPECT_EQ((*t)[1].memory_used_mib, 2000);
  EXPECT_DOUBLE_EQ((*t)[2].temperature_c, 42);
  EXPECT_DOUBLE_EQ((*t)[0].power_w, 300);
  EXPECT_EQ((*t)[1].memory_total_mib, 81559);
  EXPECT_EQ((*t)[0].sm_clock_mhz, 1980);
  EXPECT_EQ((*t)[2].sm_clock_mhz, 1960);
  EXPECT_EQ((*t)[1].ecc_single_bit, 5);
  EXPECT_EQ((*t)[1].ecc_double_bit, 2);
  EXPECT_EQ((*t)[0].ecc_double_bit, 0);
  EXPECT_EQ((*t)[0].remapped_rows_correctable, 1);
  EXPECT_EQ((*t)[1].remapped_rows_uncorrectable, 1);
  EXPECT_EQ((*t)[1].row_remap_pending, true);
  EXPECT_EQ((*t)[0].row_remap_failed, false);
  // NOT_SUPPORTED reads as absent, not as zero.
  EXPECT_FALSE((*t)[0].retired_pages_single_bit);
  EXPECT_FALSE((*t)[0].retired_pages_double_bit);
  EXPECT_EQ((*t)[2].xid_errors, 1);
  EXPECT_EQ((*t)[2].last_xid, 79);
  EXPECT_EQ((*t)[0].xid_errors, 0);
  // Warnings before failures: the slowdown threshold (absent where NVML has none), the clock
  // throttle reasons, and NVLink CRC errors summed over the active links.
  EXPECT_EQ((*t)[0].slowdown_temperature_c, 87);
  EXPECT_FALSE((*t)[3].slowdown_temperature_c);
  EXPECT_EQ((*t)[2].throttle_reasons, 0x4);
  EXPECT_EQ((*t)[0].throttle_reasons, 0x1);
  EXPECT_EQ((*t)[1].nvlink_crc_errors, 14);
  EXPECT_EQ((*t)[0].nvlink_crc_errors, 0);
}

TEST(NvmlGpus, ProductNamesMapToTheCatalogue) {
  EXPECT_EQ(NvmlGpus::CatalogueModel("NVIDIA H200", 143771), "H200-141GB");
  EXPECT_EQ(NvmlGpus::CatalogueModel("NVIDIA A100-SXM4-80GB", 81920), "A100-80GB");
  EXPECT_EQ(NvmlGpus::CatalogueModel("NVIDIA A100-SXM4-40GB", 40960), "A100-40GB");
  EXPECT_EQ(NvmlGpus::CatalogueModel("Tesla T4", 15360), "T4");
  EXPECT_EQ(NvmlGpus::CatalogueModel("NVIDIA L4", 23034), "L4");
  EXPECT_EQ(NvmlGpus::CatalogueModel("NVIDIA B200", 183359), "NVIDIA B200");
}

}  // namespace
}  // namespace meridian::agent
