#include "agent/gpu_devices.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace meridian::agent
