#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meridian::domain {

// A MIG GPU-instance profile of one GPU model, e.g. "3g.40gb" on an H100-80GB. NVIDIA places
// instances on eight memory slices; an instance of `memory_slices` slices may start only at one
// of `starts` (the "placements" that `nvidia-smi mig -lgipp` prints).
struct MigProfile {
  std::string name;        // "3g.40gb"
  int compute_slices = 0;  // the "3" of 3g
  int memory_slices = 0;   // width of the placement, in eighths of the GPU's memory
  int64_t memory_mib = 0;  // memory the instance exposes
  std::vector<int> starts;
  // The memory slices an instance at `start` covers, as bits (slice 0 the lowest).
  uint8_t SliceBits(int start) const {
    return static_cast<uint8_t>(((1u << memory_slices) - 1) << start);
  }
};

inline constexpr int kMigMemorySlices = 8;

// A GPU model: its memory and, when it supports MIG, its profiles. Models that Meridian does not
// know (such as the anonymised G2 and G3 of the Alibaba trace) are accepted as models without MIG
// and with unknown memory (0).
struct GpuModel {
  std::string name;
  int64_t memory_mib = 0;
  std::vector<MigProfile> mig_profiles;  // empty: no MIG

  bool mig_capable() const { return !mig_profiles.empty(); }
  const MigProfile* FindMigProfile(std::string_view profile) const;
};

// The built-in catalogue of GPU models (A100, H100, H200 with their MIG geometry; T4, V100, P100,
// A10, L4, L40S without MIG). Immutable and safe to share between threads.
class GpuCatalog {
 public:
  static const GpuCatalog& Builtin();

  const GpuModel* Find(std::string_view name) const;
  // The known model, or a model without MIG and with unknown memory named `name`.
  GpuModel Resolve(std::string_view name) const;
  const std::vector<GpuModel>& models() const { return models_; }

 private:
  GpuCatalog();
  std::vector<GpuModel> models_;
};

}  // namespace meridian::domain
