#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace meridian::agent {

// GPUs that exist only in this process, for machines without NVIDIA GPUs (development, CI,
// the dev estate). Their telemetry follows the load the agent says runs on them: a task may
// declare the utilisation it simulates.
class SimulatedGpus final : public GpuDiscovery {
 public:
  // "8xH100-80GB", or several groups: "4xH100-80GB,2xA100-80GB". Models come from the GPU
  // catalogue (memory, MIG); a group's GPUs share NVLink domains of `nvlink_domain_size`
  // (0: one domain per group). `node` makes the UUIDs unique across simulated nodes.
  static base::Result<std::unique_ptr<SimulatedGpus>> FromSpec(const std::string& spec,
                                                               const std::string& node,
                                                               int nvlink_domain_size = 0);

  base::Result<std::vector<GpuInfo>> Inventory() override;
  base::Result<std::vector<GpuTelemetry>> Telemetry() override;
  bool simulated() const override { return true; }
  base::Result<std::string> CreateMigInstance(int32_t gpu, const std::string& profile,
                                              int32_t start) override;
  base::Status DestroyMigInstance(int32_t gpu, const std::string& profile, int32_t start) override;
  base::Status SetMigMode(int32_t gpu, bool enabled) override;
  std::vector<std::string> MigLayout(int32_t gpu) override;
  base::Status InjectXid(int32_t gpu, int32_t xid) override;
  base::Status InjectWarning(int32_t gpu, const std::string& warning) override;
  // The slowdown temperature simulated GPUs report (a made-up figure, in the range of
  // data-centre boards), and what an injected temperature warning makes them read.
  static constexpr double kSlowdownC = 90;
  static constexpr double kWarmC = 88;
  bool ResetsItself() const override { return true; }
  base::Status ClearFault(int32_t gpu) override;
  base::Status Probe(int32_t gpu) override;

  // What runs on GPU `index` now: the share of compute it uses and the memory it holds.
  base::Status SetLoad(int32_t index, double utilization, int64_t memory_mib);

 private:
  struct Load {
    double utilization = 0;
    int64_t memory_mib = 0;
  };
  // What injected faults left on a GPU: the XID events so far (kept across resets, as NVML's
  // count is), and what a reset clears.
  struct Faults {
    int64_t xids = 0;
    int32_t last_xid = 0;
    int64_t double_bit = 0;
    bool faulted = false;        // until a reset: the probe fails
    bool remap_pending = false;  // a row remap waits for the reset
    bool remap_failed = false;
    // Injected warnings: counters only grow; a hot or power-capped board until "clear".
    int64_t ecc_corrected = 0;
    int64_t nvlink_crc = 0;
    bool hot = false;
    bool power_capped = false;
  };
  std::vector<GpuInfo> gpus_;
  std::vector<Load> load_;
  std::vector<Faults> faults_;
  std::map<int32_t, std::vector<std::string>> mig_;  // gpu -> "profile@start"
};

}  // namespace meridian::agent
