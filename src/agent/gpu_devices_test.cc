#include "agent/gpu_devices.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/testing/temp_dir.h"

namespace meridian::agent {
namespace {

TEST(GpuDevices, ATaskSeesTheDeviceNodesOfItsOwnGpusOnly) {
  const std::vector<GpuDeviceNode> nodes = {
      {"/dev/nvidia0", "GPU-a"}, {"/dev/nvidia1", "GPU-b"}, {"/dev/nvidia2", ""}};
  struct Case {
    const char* name;
    std::set<std::string> granted;
    std::vector<std::string> hidden;
  };
  for (const Case& c : std::vector<Case>{
           {"no GPU: every node", {}, {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}},
           {"one GPU", {"GPU-b"}, {"/dev/nvidia0", "/dev/nvidia2"}},
           {"two GPUs; a node the driver names no GPU for stays hidden",
            {"GPU-a", "GPU-b"},
            {"/dev/nvidia2"}},
           {"a simulated GPU on a real machine opens no real one",
            {"GPU-sim-n1-0"},
            {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}},
       }) {
    EXPECT_EQ(DevicesToHide(nodes, c.granted), c.hidden) << c.name;
  }
  EXPECT_TRUE(DevicesToHide({}, {"GPU-a"}).empty()) << "no driver: nothing to hide";
}

TEST(GpuDevices, ReadsTheDriversInformationFile) {
  // In the layout of /proc/driver/nvidia/gpus/0000:3b:00.0/information.
  const DriverGpu gpu = ParseDriverInformation(
      "Model: \t\t NVIDIA H200\nIRQ:   \t\t 160\n"
      "GPU UUID: \t GPU-4a1b2c3d-0000-1111-2222-333344445555\n"
      "Video BIOS: \t 96.00.a5.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
      "Device Minor: \t 3\nGPU Excluded:\t No\n");
  EXPECT_EQ(gpu.minor, 3);
  EXPECT_EQ(gpu.uuid, "GPU-4a1b2c3d-0000-1111-2222-333344445555");
  EXPECT_EQ(ParseDriverInformation("Model: x\nDevice Minor: lots\n").minor, -1);
  // No NVIDIA driver in CI: no node, not an error.
  EXPECT_TRUE(GpuDeviceNodes("/nonexistent", "/nonexistent").empty());
}

// The driver's capabilities as /proc/driver/nvidia/capabilities lays them out, with a GPU (minor
// 1) holding two instances: a task given one opens that instance's GPU- and compute-instance
// capabilities only, never another's, nor mig/config (which makes and destroys instances).
TEST(GpuDevices, ATaskOnAMigInstanceOpensItsOwnCapabilitiesOnly) {
  base::testing::TempDir dir;
  const std::string proc = dir.File("capabilities");
  const std::string dev = dir.File("nvidia-caps");
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(proc + "/mig/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n");
  write(proc + "/mig/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\n");
  write(proc + "/fabric-mgmt", "DeviceFileMinor: 0\n");
  write(proc + "/gpu1/mig/gi1/access", "DeviceFileMinor: 138\n");
  write(proc + "/gpu1/mig/gi1/ci0/access", "DeviceFileMinor: 139\n");
  write(proc + "/gpu1/mig/gi2/access", "DeviceFileMinor: 147\n");
  write(proc + "/gpu1/mig/gi2/ci0/access", "DeviceFileMinor: 148\n");
  write(proc + "/gpu1/mig/gi9/access", "DeviceFileMode: 292\n");  // names no minor: skipped
  for (int minor : {0, 1, 2, 138, 139, 147, 148}) {
    write(dev + "/nvidia-cap" + std::to_string(minor), "");
  }
  EXPECT_EQ(ParseCapabilityMinor("DeviceFileMinor: 12\nDeviceFileMode: 292\n"), 12);
  EXPECT_EQ(ParseCapabilityMinor("DeviceFileMinor: x\n"), -1);
  const std::vector<MigCapability> caps = MigCapabilities(proc);
  ASSERT_EQ(caps.size(), 6u);
  EXPECT_EQ(caps[0].path, "gpu1/mig/gi1/access");
  EXPECT_EQ(caps[0].minor, 138);
  EXPECT_EQ(caps[5].path, "mig/monitor");
  auto node = [&](int minor) { return dev + "/nvidia-cap" + std::to_string(minor); };
  EXPECT_EQ(MigCapsToHide(caps, {{1, 2, 0}}, dev),
            (std::vector<std::string>{node(138), node(139), node(1), node(2)}));
  EXPECT_EQ(MigCapsToHide(caps, {}, dev), (std::vector<std::string>{node(138), node(139), node(147),
                                                                    node(148), node(1), node(2)}))
      << "whole GPUs and shares open no instance";
  // Another GPU's instance of the same ids is not this one.
  EXPECT_EQ(MigCapsToHide(caps, {{0, 1, 0}}, dev).size(), 6u);
  EXPECT_TRUE(MigCapabilities(dir.File("none")).empty()) << "no driver: nothing to hide";
}

}  // namespace
}  // namespace meridian::agent
