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

// --- MIG capabilities ---
inline constexpr const char* kNvidiaCaps = "/dev/nvidia-caps";
// With MIG, what a process may open is a capability each: a GPU instance and a compute instance
// of it are opened through device nodes /dev/nvidia-caps/nvidia-cap<minor>, whose minors the
// driver lists under /proc/driver/nvidia/capabilities (gpu<gpu minor>/mig/gi<id>/access,
// .../gi<id>/ci<id>/access; mig/config, which creates and destroys instances, and mig/monitor).
// A task given one instance must open its own two only. Hiding the others is not enough (the
// setuid nvidia-modprobe makes a node when CUDA first asks for it, and instances made after the
// task started have nodes it would see): the task gets a /dev/nvidia-caps of its own, made anew
// with its own nodes only and read-only (IsolateMounts).

// A MIG instance as the driver's capabilities name it: the parent GPU's minor, the GPU
// instance's id and its compute instance's.
struct MigInstanceIds {
  int64_t gpu_minor = -1;
  int64_t gi = -1;
  int64_t ci = -1;
  bool operator==(const MigInstanceIds&) const = default;
};

// One capability the driver lists: where (relative to the capabilities folder, as
// "gpu0/mig/gi1/ci0/access" or "mig/config"), the minor of its device node and the node's mode.
struct MigCapability {
  std::string path;
  int64_t minor = -1;
  uint32_t mode = 0444;
  std::string node() const { return "nvidia-cap" + std::to_string(minor); }  // in nvidia-caps
  bool operator==(const MigCapability&) const = default;
};

// What an access file says ("DeviceFileMinor: 12", "DeviceFileMode: 292"), without its path;
// a minor of -1 when it names none.
MigCapability ParseCapabilityFile(const std::string& text);
// The MIG capabilities the driver lists; none without the driver (or without MIG).
std::vector<MigCapability> MigCapabilities(
    const std::string& root = "/proc/driver/nvidia/capabilities");
// Pure: the capabilities a task given `granted` instances may open: the access of its own GPU
// and compute instances, in the order granted (none for whole GPUs or shares: never mig/config
// or mig/monitor). A granted instance the driver lists no capability of has fewer than two.
std::vector<MigCapability> OwnMigCapabilities(const std::vector<MigCapability>& caps,
                                              const std::vector<MigInstanceIds>& granted);
// The major number of the character devices `name` in /proc/devices ("nvidia-caps"); -1 when
// the kernel has none.
int64_t CharDeviceMajor(const std::string& name, const std::string& devices = "/proc/devices");

}  // namespace meridian::agent
