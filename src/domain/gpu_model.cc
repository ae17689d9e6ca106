#include "domain/gpu_model.h"

namespace meridian::domain {
namespace {

constexpr int64_t kGiB = 1024;

// The MIG placements are the same on A100, H100 and H200: only the memory per slice differs.
// `slice_gib` is the memory of the smallest (1g) instance and `full_gib` of the 7g one.
std::vector<MigProfile> MigGeometry(int64_t slice_gib, int64_t double_gib, int64_t half_gib,
                                    int64_t full_gib, bool has_1g_double) {
  std::vector<MigProfile> p;
  auto name = [](int g, int64_t gib) {
    return std::to_string(g) + "g." + std::to_string(gib) + "gb";
  };
  p.push_back({name(1, slice_gib), 1, 1, slice_gib * kGiB, {0, 1, 2, 3, 4, 5, 6}});
  if (has_1g_double) p.push_back({name(1, double_gib), 1, 2, double_gib * kGiB, {0, 2, 4, 6}});
  p.push_back({name(2, double_gib), 2, 2, double_gib * kGiB, {0, 2, 4}});
  p.push_back({name(3, half_gib), 3, 4, half_gib * kGiB, {0, 4}});
  p.push_back({name(4, half_gib), 4, 4, half_gib * kGiB, {0}});
  p.push_back({name(7, full_gib), 7, 8, full_gib * kGiB, {0}});
  return p;
}

}  // namespace

const MigProfile* GpuModel::FindMigProfile(std::string_view profile) const {
  for (const MigProfile& p : mig_profiles) {
    if (p.name == profile) return &p;
  }
  return nullptr;
}

GpuCatalog::GpuCatalog() {
  models_.push_back({"A100-40GB", 40 * kGiB, MigGeometry(5, 10, 20, 40, true)});
  models_.push_back({"A100-80GB", 80 * kGiB, MigGeometry(10, 20, 40, 80, true)});
  models_.push_back({"H100-80GB", 80 * kGiB, MigGeometry(10, 20, 40, 80, true)});
  models_.push_back({"H200-141GB", 141 * kGiB, MigGeometry(18, 35, 71, 141, true)});
  models_.push_back({"T4", 16 * kGiB, {}});
  models_.push_back({"V100", 16 * kGiB, {}});
  models_.push_back({"V100M16", 16 * kGiB, {}});
  models_.push_back({"V100M32", 32 * kGiB, {}});
  models_.push_back({"P100", 16 * kGiB, {}});
  models_.push_back({"A10", 24 * kGiB, {}});
  models_.push_back({"L4", 24 * kGiB, {}});
  models_.push_back({"L40S", 48 * kGiB, {}});
}

const GpuCatalog& GpuCatalog::Builtin() {
  static const GpuCatalog catalog;
  return catalog;
}

const GpuModel* GpuCatalog::Find(std::string_view name) const {
  for (const GpuModel& m : models_) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

GpuModel GpuCatalog::Resolve(std::string_view name) const {
  if (const GpuModel* m = Find(name)) return *m;
  return GpuModel{std::string(name), 0, {}};
}

}  // namespace meridian::domain
