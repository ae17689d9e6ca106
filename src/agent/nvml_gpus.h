#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace meridian::agent {

// The GPUs of this machine through NVML, the NVIDIA driver's management library, loaded at run
// time with dlopen: Meridian needs no NVIDIA software to build, and a machine without the driver
// gets a clear error instead of a missing-library failure at start.
//
// Inventory: index, UUID, model (NVML's product name mapped to Meridian's catalogue, with the
// memory telling the A100 40 GB from the 80 GB), memory, MIG mode, and NVLink domains (GPUs
// joined by active NVLinks, directly or through NVSwitches). Telemetry: utilisation, memory
// used, temperature, power, volatile uncorrected ECC errors, and critical XID events (drained
// without waiting at each call).
class NvmlGpus final : public GpuDiscovery {
 public:
  // `library`: the file to dlopen ("libnvidia-ml.so.1" from the driver by default).
  static base::Result<std::unique_ptr<NvmlGpus>> Open(const std::string& library);
  ~NvmlGpus() override;

  base::Result<std::vector<GpuInfo>> Inventory() override;
  base::Result<std::vector<GpuTelemetry>> Telemetry() override;
  bool simulated() const override { return false; }
  // MIG through NVML (nvml_mig.cc): MIG mode, GPU instances at the scheduler's placement, one
  // compute instance spanning each, the MIG device's UUID read back. A profile name of the
  // catalogue ("3g.40gb") is matched to NVML's profile by its compute slices and memory.
  base::Result<std::string> CreateMigInstance(int32_t gpu, const std::string& profile,
                                              int32_t start) override;
  base::Status DestroyMigInstance(int32_t gpu, const std::string& profile, int32_t start) override;
  base::Status SetMigMode(int32_t gpu, bool enabled) override;
  std::vector<std::string> MigLayout(int32_t gpu) override;
  std::optional<MigInstanceIds> MigIds(int32_t gpu, const std::string& mig_uuid) override;
  // The device answers NVML (its UUID reads) and no row remap waits for a reset.
  base::Status Probe(int32_t gpu) override;

  // Meridian's name for an NVML product name ("NVIDIA H100 80GB HBM3" -> "H100-80GB"); the
  // product name itself when the catalogue has no such model.
  static std::string CatalogueModel(const std::string& product, int64_t memory_mib);

 private:
  struct Api;
  // One NVML GPU-instance profile of a device: its id and width.
  struct GiProfile {
    unsigned int id = 0;
    unsigned int compute_slices = 0;
    unsigned int memory_slices = 0;
  };
  NvmlGpus() = default;
  base::Status Check(int rc, const char* what) const;
  // NVML's profile for a catalogue profile name on GPU `gpu`, found once and kept.
  base::Result<GiProfile> FindGiProfile(int32_t gpu, const std::string& profile);
  // The GPU instances of a profile (nvmlGpuInstance_t) with their first memory slice.
  std::vector<std::pair<void*, int32_t>> GpuInstances(int32_t gpu, const GiProfile& p) const;
  // The GPU instance of `profile` at `start`, or null.
  void* FindGpuInstance(int32_t gpu, const GiProfile& p, int32_t start) const;
  // One GPU instance on a GPU, of whatever profile: its name (the catalogue's, or one made from
  // what NVML says of a profile the catalogue lacks, such as "1g.10gb+me") and memory slices.
  struct GiSeen {
    void* instance = nullptr;
    std::string name;
    int32_t start = 0;
    int32_t size = 0;
    bool catalogued = false;
  };
  std::vector<GiSeen> AllGpuInstances(int32_t gpu);
  // NVML's GPU-instance profiles of a GPU, each with its name (as GiSeen has it): asked of NVML
  // once per GPU, as they do not change.
  struct NamedProfile {
    unsigned int id = 0;
    std::string name;
    bool catalogued = false;
  };
  const std::vector<NamedProfile>& NamedProfiles(int32_t gpu);
  // The UUID of the MIG device of GPU instance id `gi`.
  base::Result<std::string> MigDeviceUuid(int32_t gpu, unsigned int gi) const;
  base::Status DestroyGpuInstance(int32_t gpu, void* instance, const std::string& what);
  bool MigOn(int32_t gpu) const;
  // CRC errors (flit and data) summed over the device's active NVLinks; absent when it has
  // none or NVML cannot read them.
  std::optional<int64_t> NvLinkCrcErrors(void* device) const;

  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;       // nvmlDevice_t
  std::vector<std::string> models_;  // the catalogue's name of each device
  std::map<std::pair<int32_t, std::string>, GiProfile> gi_profiles_;
  std::map<int32_t, std::vector<NamedProfile>> named_profiles_;
  void* events_ = nullptr;  // nvmlEventSet_t, when XID events can be watched
  std::map<int32_t, std::pair<int64_t, int32_t>> xids_;  // index -> count, last
};

}  // namespace meridian::agent
