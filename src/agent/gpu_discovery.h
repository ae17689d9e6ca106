#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_devices.h"
#include "base/status.h"
#include "protocol/agent_protocol.h"

namespace meridian::agent {

// One GPU as the agent reports it to the control plane (issue 5): what it is, where it sits.
struct GpuInfo {
  int32_t index = 0;
  std::string uuid;
  std::string model;  // Meridian's catalogue name, e.g. "H100-80GB"
  int64_t memory_mib = 0;
  int32_t nvlink_domain = 0;  // GPUs of one node that share NVLink/NVSwitch
  bool mig_capable = false;
  bool mig_enabled = false;
};

// What a GPU is doing now: the sample as it travels in the heartbeat (protocol::GpuSample),
// so that a new measurement is one field, read here and encoded there, with no copy between.
using GpuTelemetry = protocol::GpuSample;

// The agent's view of its GPUs. Two implementations share this interface: NvmlGpus (NVML
// loaded at run time with dlopen, on machines with NVIDIA GPUs) and SimulatedGpus on machines
// without, which says so (`simulated()`), so that the CLI and the dashboard can too.
// Not thread-safe: the agent's one loop calls it.
class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;
  virtual base::Result<std::vector<GpuInfo>> Inventory() = 0;
  virtual base::Result<std::vector<GpuTelemetry>> Telemetry() = 0;
  virtual bool simulated() const = 0;
  // MIG (issue 20), carried out on the GPU itself: through NVML on real GPUs, in the process's
  // own state on simulated ones. The agent calls these before a task starts and after it ends;
  // each is idempotent, so that an agent restarted half-way through converges.
  //
  // Carries out a MIG grant the scheduler decided: MIG mode on if it is off, then a GPU instance
  // of `profile` at memory slice `start` with one compute instance spanning it, or the instance
  // already there. Returns the name a task is given (CUDA_VISIBLE_DEVICES): the MIG device's
  // UUID. An error names the GPU, the profile and the slice, and what NVML said.
  virtual base::Result<std::string> CreateMigInstance(int32_t gpu, const std::string& profile,
                                                      int32_t start) = 0;
  // Destroys the instance (its compute instances first); Ok when there is none.
  virtual base::Status DestroyMigInstance(int32_t gpu, const std::string& profile,
                                          int32_t start) = 0;
  // MIG mode on or off. Turning it off destroys the instances left (the caller makes sure none
  // is in use). An error says when the change waits for a GPU reset.
  virtual base::Status SetMigMode(int32_t gpu, bool enabled) = 0;
  // The instances on `gpu` now, as "profile@start" ("3g.40gb@4"); empty outside MIG mode.
  virtual std::vector<std::string> MigLayout(int32_t gpu) = 0;
  // How the driver's capabilities name MIG device `mig_uuid` of GPU `gpu` (gpu_devices.h), so
  // that a task opens its own instance only; none where there is no driver (simulated GPUs).
  virtual std::optional<MigInstanceIds> MigIds(int32_t /*gpu*/, const std::string& /*mig_uuid*/) {
    return std::nullopt;
  }

  // Fault injection, for simulated GPUs only (the server refuses it for the others): GPU `gpu`
  // reports `xid` from the next Telemetry on, as NVML reports an XID event, with the state that
  // goes with it (a double-bit error counted, a row remap pending).
  virtual base::Status InjectXid(int32_t gpu, int32_t xid) {
    (void)gpu;
    (void)xid;
    return base::Status(base::StatusCode::kFailedPrecondition,
                        "faults are injected only into simulated GPUs");
  }
  // Fault injection of a warning before failure (domain/gpu_warnings.h), simulated GPUs only:
  // "ecc-corrected" (corrected ECC errors over the Policy's default threshold), "temperature"
  // (near its slowdown), "power-cap" (clocks held by the power cap), "nvlink-crc" (NVLink CRC
  // errors), "clear" (temperature and throttling back to normal; counters stay counted).
  virtual base::Status InjectWarning(int32_t gpu, const std::string& warning) {
    (void)gpu;
    (void)warning;
    return base::Status(base::StatusCode::kFailedPrecondition,
                        "warnings are injected only into simulated GPUs");
  }
  // The remediation of simulated GPUs: the fault is cleared, as a GPU reset clears it. Real GPUs
  // are reset by the Policy's command, which the agent runs; this says so.
  virtual bool ResetsItself() const { return false; }
  virtual base::Status ClearFault(int32_t gpu) {
    (void)gpu;
    return base::Status(base::StatusCode::kFailedPrecondition, "not a simulated GPU");
  }
  // The health probe after a remediation: the GPU answers, and waits for no reset (no row remap
  // pending). Ok when healthy, else why not.
  virtual base::Status Probe(int32_t gpu) = 0;
};

// A MIG instance as MigLayout and telemetry name it, "profile@start", taken apart; a name
// without "@" reads as starting at slice 0.
struct MigInstanceName {
  std::string profile;
  int32_t start = 0;
};
inline MigInstanceName ParseMigInstance(const std::string& name) {
  const size_t at = name.find('@');
  if (at == std::string::npos) return {name, 0};
  return {name.substr(0, at), static_cast<int32_t>(std::atoi(name.c_str() + at + 1))};
}

// A node without GPUs (CPU work only).
class NoGpus final : public GpuDiscovery {
 public:
  base::Result<std::vector<GpuInfo>> Inventory() override { return std::vector<GpuInfo>{}; }
  base::Result<std::vector<GpuTelemetry>> Telemetry() override {
    return std::vector<GpuTelemetry>{};
  }
  bool simulated() const override { return false; }
  base::Result<std::string> CreateMigInstance(int32_t, const std::string&, int32_t) override {
    return base::Status::Invalid("this node has no GPUs");
  }
  base::Status DestroyMigInstance(int32_t, const std::string&, int32_t) override {
    return base::Status::Ok();
  }
  base::Status SetMigMode(int32_t, bool) override {
    return base::Status::Invalid("this node has no GPUs");
  }
  std::vector<std::string> MigLayout(int32_t) override { return {}; }
  base::Status Probe(int32_t) override { return base::Status::Invalid("this node has no GPUs"); }
};

}  // namespace meridian::agent
