#include "agent/nvml_gpus.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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

// The MIG calls the agent makes through NVML, and their order, as the FAKE libnvidia-ml logs
// them (FAKE_NVML_CALLS): each test reads the calls made since it started.
class NvmlMig : public ::testing::Test {
 protected:
  void SetUp() override {
    calls_ = ::testing::TempDir() + "/nvml-calls-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::remove(calls_.c_str());
    ::setenv("FAKE_NVML_CALLS", calls_.c_str(), 1);
    auto g = NvmlGpus::Open(FAKE_NVML_LIBRARY);
    ASSERT_TRUE(g.ok()) << g.status().message();
    gpus_ = std::move(*g);
  }
  void TearDown() override { ::unsetenv("FAKE_NVML_CALLS"); }
  // The calls logged since the last look.
  std::vector<std::string> Calls() {
    std::vector<std::string> out;
    std::ifstream in(calls_);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    std::remove(calls_.c_str());
    return out;
  }
  std::string calls_;
  std::unique_ptr<NvmlGpus> gpus_;
};

TEST_F(NvmlMig, EnableCreateDestroyDisableInNvmlsOrder) {
  EXPECT_TRUE(gpus_->MigLayout(0).empty());
  // A 3g.40gb at slice 4 on a whole GPU: MIG mode on, the GPU instance of NVML's profile id 9 at
  // placement 4 (four memory slices), one compute instance of the same three slices.
  auto made = gpus_->CreateMigInstance(0, "3g.40gb", 4);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(*made, "MIG-fake-0000-0001");  // the MIG device's UUID, read back from NVML
  EXPECT_EQ(Calls(), (std::vector<std::string>{
                         "nvmlDeviceSetMigMode gpu=0 mode=1",
                         "nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=9 start=4 size=4",
                         "nvmlGpuInstanceCreateComputeInstance gpu=0 gi=1 profile=2",
                     }));
  // The 1g.20gb is NVML's profile id 15 (one compute slice, twice the memory of the 1g.10gb),
  // two slices wide; MIG mode is already on.
  auto small = gpus_->CreateMigInstance(0, "1g.20gb", 2);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_EQ(Calls(), (std::vector<std::string>{
                         "nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=15 start=2 size=2",
                         "nvmlGpuInstanceCreateComputeInstance gpu=0 gi=2 profile=0",
                     }));
  EXPECT_EQ(gpus_->MigLayout(0), (std::vector<std::string>{"1g.20gb@2", "3g.40gb@4"}));
  auto t = gpus_->Telemetry();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].mig_instances, (std::vector<std::string>{"1g.20gb@2", "3g.40gb@4"}));
  // Made again (an agent restarted half-way): the instance there is used, nothing is created.
  auto again = gpus_->CreateMigInstance(0, "3g.40gb", 4);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *made);
  EXPECT_TRUE(Calls().empty());
  // Destroyed: the compute instance first, then the GPU instance.
  ASSERT_TRUE(gpus_->DestroyMigInstance(0, "3g.40gb", 4).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"nvmlComputeInstanceDestroy gpu=0 gi=1",
                                               "nvmlGpuInstanceDestroy gpu=0 gi=1"}));
  ASSERT_TRUE(gpus_->DestroyMigInstance(0, "3g.40gb", 4).ok());  // already gone
  EXPECT_TRUE(Calls().empty());
  // MIG mode off: what instances are left go first.
  ASSERT_TRUE(gpus_->SetMigMode(0, false).ok());
  EXPECT_EQ(Calls(), (std::vector<std::string>{"nvmlComputeInstanceDestroy gpu=0 gi=2",
                                               "nvmlGpuInstanceDestroy gpu=0 gi=2",
                                               "nvmlDeviceSetMigMode gpu=0 mode=0"}));
  auto inventory = gpus_->Inventory();
  ASSERT_TRUE(inventory.ok());
  EXPECT_FALSE((*inventory)[0].mig_enabled);
  ASSERT_TRUE(gpus_->SetMigMode(0, false).ok());  // already off: no call
  EXPECT_TRUE(Calls().empty());
}

// A task's instance as the driver's capabilities name it: the parent's minor (which the fake
// numbers the other way round from NVML's index), the GPU and compute instance ids.
TEST_F(NvmlMig, NamesAnInstanceAsTheDriversCapabilitiesDo) {
  auto made = gpus_->CreateMigInstance(0, "3g.40gb", 4);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const std::optional<MigInstanceIds> ids = gpus_->MigIds(0, *made);
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, (MigInstanceIds{3, 1, 0}));
  EXPECT_FALSE(gpus_->MigIds(0, "MIG-not-here"));
  EXPECT_FALSE(gpus_->MigIds(1, *made)) << "another GPU's";
}

// An instance of a profile the catalogue lacks (a "+me" variant, made by hand) is listed under
// the name nvidia-smi gives it, and destroyed when a grant needs its slices or MIG mode goes.
TEST_F(NvmlMig, InstancesOfProfilesTheCatalogueLacksAreSeenAndMakeRoom) {
  ::setenv("FAKE_NVML_ME_AT", "0", 1);
  auto reopened = NvmlGpus::Open(FAKE_NVML_LIBRARY);
  ::unsetenv("FAKE_NVML_ME_AT");
  ASSERT_TRUE(reopened.ok()) << reopened.status().message();
  gpus_ = std::move(*reopened);
  EXPECT_EQ(gpus_->MigLayout(3), (std::vector<std::string>{"1g.10gb+me@0", "1g.10gb@6"}));
  auto made = gpus_->CreateMigInstance(3, "2g.20gb", 0);
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(gpus_->MigLayout(3), (std::vector<std::string>{"2g.20gb@0", "1g.10gb@6"}));
  EXPECT_EQ(Calls(), (std::vector<std::string>{
                         "nvmlComputeInstanceDestroy gpu=3 gi=2",
                         "nvmlGpuInstanceDestroy gpu=3 gi=2",
                         "nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=14 start=0 size=2",
                         "nvmlGpuInstanceCreateComputeInstance gpu=3 gi=3 profile=1",
                     }));
  ASSERT_TRUE(gpus_->DestroyMigInstance(3, "1g.10gb+me", 0).ok()) << "none left there: fine";
  // MIG mode off takes what is left, whatever its profile.
  ::setenv("FAKE_NVML_ME_AT", "2", 1);
  reopened = NvmlGpus::Open(FAKE_NVML_LIBRARY);
  ::unsetenv("FAKE_NVML_ME_AT");
  ASSERT_TRUE(reopened.ok());
  gpus_ = std::move(*reopened);
  ASSERT_TRUE(gpus_->SetMigMode(3, false).ok());
  EXPECT_TRUE(gpus_->MigLayout(3).empty());
}

TEST_F(NvmlMig, ReadsBackTheLayoutItFinds) {
  // GPU 3 was put in MIG mode by hand, with a 1g.10gb at slice 6.
  EXPECT_EQ(gpus_->MigLayout(3), (std::vector<std::string>{"1g.10gb@6"}));
  ASSERT_TRUE(gpus_->DestroyMigInstance(3, "1g.10gb", 6).ok());
  EXPECT_TRUE(gpus_->MigLayout(3).empty());
}

TEST_F(NvmlMig, ErrorsNameTheGpuTheProfileAndWhatNvmlSaid) {
  // Slices taken by an instance there: NVML's "insufficient resources", with GPU and profile.
  auto overlap = gpus_->CreateMigInstance(3, "3g.40gb", 4);
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().message(),
            "GPU 3: MIG instance 3g.40gb at slice 4: NVML "
            "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources");
  // MIG mode that waits for a GPU reset (an A100 with work on it): the grant cannot be carried
  // out, and the error says what it waits for.
  auto pending = gpus_->CreateMigInstance(1, "1g.10gb", 0);
  ASSERT_FALSE(pending.ok());
  EXPECT_EQ(pending.status().message(),
            "GPU 1: MIG instance 1g.10gb at slice 0: MIG mode on is pending: it takes "
            "effect after a GPU reset (NVML: Reset Required)");
  EXPECT_EQ(Calls(), (std::vector<std::string>{
                         "nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=9 start=4 size=4",
                         "nvmlDeviceSetMigMode gpu=1 mode=1",
                     }));
  // A profile the model does not have.
  auto unknown = gpus_->CreateMigInstance(0, "5g.50gb", 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "GPU 0: H100-80GB has no MIG profile 5g.50gb");
}

// A mode change pending a reset is what the GPU's samples say (the server cordons it for that)
// and what its health probe refuses, until a reset puts it in effect (the fake's stand-in for
// nvidia-smi --gpu-reset: a file named after the GPU in FAKE_NVML_RESETS).
TEST_F(NvmlMig, AModeChangePendingAResetIsReportedAndProbedUntilTheReset) {
  const std::string resets = ::testing::TempDir() + "/nvml-resets";
  std::filesystem::create_directories(resets);
  ::setenv("FAKE_NVML_RESETS", resets.c_str(), 1);
  ::setenv("FAKE_NVML_RESET_REQUIRED", "0", 1);  // GPU 0 behaves like GPU 1 by default
  auto sampled = gpus_->Telemetry();
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ((*sampled)[0].mig_mode_pending, false);
  EXPECT_FALSE(gpus_->SetMigMode(0, true).ok());
  sampled = gpus_->Telemetry();
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ((*sampled)[0].mig_mode_pending, true);
  EXPECT_EQ((*sampled)[2].mig_mode_pending, false);
  EXPECT_EQ(gpus_->Probe(0).message(), "MIG mode on still waits for a GPU reset");
  std::ofstream{resets + "/0"};
  EXPECT_TRUE(gpus_->Probe(0).ok()) << gpus_->Probe(0).message();
  sampled = gpus_->Telemetry();
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ((*sampled)[0].mig_mode_pending, false);
  ASSERT_TRUE(gpus_->SetMigMode(0, true).ok());  // in effect: nothing to ask
  EXPECT_EQ(Calls(),
            (std::vector<std::string>{"nvmlDeviceSetMigMode gpu=0 mode=1", "reset gpu=0"}));
  // A change asked for, then its opposite before any reset (the next grant wants the GPU as it
  // is): the pending change is taken back, so that a reset does not undo the grant's mode.
  EXPECT_FALSE(gpus_->SetMigMode(0, false).ok());  // pending
  ASSERT_TRUE(gpus_->SetMigMode(0, true).ok()) << "MIG mode on is in effect";
  sampled = gpus_->Telemetry();
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ((*sampled)[0].mig_mode_pending, false);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"nvmlDeviceSetMigMode gpu=0 mode=0",
                                               "nvmlDeviceSetMigMode gpu=0 mode=1"}));
  ::unsetenv("FAKE_NVML_RESET_REQUIRED");
  ::unsetenv("FAKE_NVML_RESETS");
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
