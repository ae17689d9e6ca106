#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace meridian::agent {

// An NVIDIA GPU's device node (/dev/nvidiaN) and the GPU it opens, as the driver lists them in
// /proc/driver/nvidia/gpus/*/information ("Device Minor", "GPU UUID"). The uuid is empty when
// the driver does not say.
struct GpuDeviceNode {
  std::string path;
  std::string uuid;
};

// One GPU's minor number and uuid from the driver's information file; a minor of -1 when the
// text names none.
struct DriverGpu {
  int64_t minor = -1;
  std::string uuid;
};
DriverGpu ParseDriverInformation(const std::string& text);

// The machine's GPU device nodes; none without the NVIDIA driver (simulated GPUs, CI).
std::vector<GpuDeviceNode> GpuDeviceNodes(const std::string& dev = "/dev",
                                          const std::string& driver = "/proc/driver/nvidia/gpus");

// Pure: the device nodes a task given `granted` GPUs (their uuids; a MIG instance's parent
// GPU) must not open. A node whose GPU the driver does not name is hidden too. The control
// nodes (nvidiactl, nvidia-uvm, nvidia-modeset) are not GPUs and stay.
std::vector<std::string> DevicesToHide(const std::vector<GpuDeviceNode>& nodes,
                                       const std::set<std::string>& granted);

}  // namespace meridian::agent
