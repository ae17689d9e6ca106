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
// 1) holding two instances: a task given one may open that instance's GPU- and compute-instance
// capabilities only, never another's, nor mig/config (which makes and destroys instances).
TEST(GpuDevices, ATaskOnAMigInstanceMayOpenItsOwnCapabilitiesOnly) {
  base::testing::TempDir dir;
  const std::string proc = dir.File("capabilities");
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(proc + "/mig/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n");
  write(proc + "/mig/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\n");
  write(proc + "/fabric-mgmt", "DeviceFileMinor: 0\n");
  write(proc + "/gpu1/mig/gi1/access", "DeviceFileMinor: 138\nDeviceFileMode: 292\n");
  write(proc + "/gpu1/mig/gi1/ci0/access", "DeviceFileMinor: 139\nDeviceFileMode: 292\n");
  write(proc + "/gpu1/mig/gi2/access", "DeviceFileMinor: 147\n");
  write(proc + "/gpu1/mig/gi2/ci0/access", "DeviceFileMinor: 148\n");
  write(proc + "/gpu1/mig/gi9/access", "DeviceFileMode: 292\n");  // names no minor: skipped
  EXPECT_EQ(ParseCapabilityFile("DeviceFileMinor: 12\nDeviceFileMode: 292\n").minor, 12);
  EXPECT_EQ(ParseCapabilityFile("DeviceFileMinor: x\n").minor, -1);
  const std::vector<MigCapability> caps = MigCapabilities(proc);
  ASSERT_EQ(caps.size(), 6u);
  EXPECT_EQ(caps[0], (MigCapability{"gpu1/mig/gi1/access", 138, 0444}));
  EXPECT_EQ(caps[4].path, "mig/config");
  EXPECT_EQ(caps[4].mode, 0400u);
  EXPECT_EQ(caps[5].path, "mig/monitor");
  EXPECT_EQ(caps[0].node(), "nvidia-cap138");
  const std::vector<MigCapability> own = OwnMigCapabilities(caps, {{1, 2, 0}});
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0].minor, 147);
  EXPECT_EQ(own[1].minor, 148);
  EXPECT_TRUE(OwnMigCapabilities(caps, {}).empty()) << "whole GPUs and shares open none";
  EXPECT_TRUE(OwnMigCapabilities(caps, {{0, 1, 0}}).empty()) << "another GPU's instance";
  EXPECT_EQ(OwnMigCapabilities(caps, {{1, 9, 0}}).size(), 0u) << "one the driver does not name";
  EXPECT_TRUE(MigCapabilities(dir.File("none")).empty()) << "no driver: nothing";
  // The nodes' major, from /proc/devices.
  write(dir.File("devices"),
        "Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-caps\n\n"
        "Block devices:\n  7 loop\n234 nvidia-caps-not\n");
  EXPECT_EQ(CharDeviceMajor("nvidia-caps", dir.File("devices")), 234);
  EXPECT_EQ(CharDeviceMajor("loop", dir.File("devices")), -1) << "a block device";
  EXPECT_EQ(CharDeviceMajor("nvidia-caps", dir.File("none")), -1);
}

}  // namespace
}  // namespace meridian::agent
