// MIG through NVML (issue 20): MIG mode, GPU and compute instances at the placements the
// scheduler grants, and the MIG devices' UUIDs that tasks are given. Part of NvmlGpus
// (nvml_gpus.h); its reading of inventory and telemetry is in nvml_gpus.cc.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "agent/nvml_api.h"
#include "base/log.h"
#include "domain/gpu_model.h"

namespace meridian::agent {

using namespace nvml;  // NOLINT: the binding's own names, in its own files

namespace {

std::string GpuWhere(int32_t gpu) { return "GPU " + std::to_string(gpu); }

std::string InstanceWhere(int32_t gpu, const std::string& profile, int32_t start) {
  return GpuWhere(gpu) + ": MIG instance " + profile + " at slice " + std::to_string(start);
}

// `s` with what it was about in front, the GPU named once.
base::Status At(const std::string& where, const base::Status& s) {
  std::string message = s.message();
  if (message.rfind(where, 0) == 0) return s;
  const std::string gpu = where.substr(0, where.find(": ") + 2);  // "GPU 3: "
  if (message.rfind(gpu, 0) == 0) message.erase(0, gpu.size());
  return base::Status(s.code(), where + ": " + message);
}

}  // namespace

bool NvmlGpus::MigOn(int32_t gpu) const {
  unsigned int current = 0, pending = 0;
  return api_->mig_mode &&
         api_->mig_mode(devices_[static_cast<size_t>(gpu)], &current, &pending) == kSuccess &&
         current == 1;
}

base::Result<NvmlGpus::GiProfile> NvmlGpus::FindGiProfile(int32_t gpu, const std::string& profile) {
  if (auto it = gi_profiles_.find({gpu, profile}); it != gi_profiles_.end()) return it->second;
  const Api& a = *api_;
  const domain::GpuModel* model =
      domain::GpuCatalog::Builtin().Find(models_[static_cast<size_t>(gpu)]);
  const domain::MigProfile* p = model ? model->FindMigProfile(profile) : nullptr;
  if (!p) {
    return base::Status::Invalid(GpuWhere(gpu) + ": " + models_[static_cast<size_t>(gpu)] +
                                 " has no MIG profile " + profile);
  }
  if (!a.gi_profile_info) {
    return base::Status::NotFound(GpuWhere(gpu) + ": this driver's NVML has no MIG functions");
  }
  // NVML numbers its profiles (1g, 1g with twice the memory, 2g, ...) and says what each is: the
  // one with the same compute slices and the nearest memory is the catalogue's profile. A tie
  // (a "+me" variant) keeps the lower number, the plain profile.
  std::optional<GiProfile> best;
  long long best_gap = 0;
  for (unsigned int id = 0; id < kGiProfiles; ++id) {
    GiProfileInfo info{};
    if (a.gi_profile_info(devices_[static_cast<size_t>(gpu)], id, &info) != kSuccess) continue;
    if (info.slice_count != static_cast<unsigned int>(p->compute_slices)) continue;
    const long long gap = std::llabs(static_cast<long long>(info.memory_size_mb) - p->memory_mib);
    if (!best || gap < best_gap) {
      best = GiProfile{info.id, info.slice_count, static_cast<unsigned int>(p->memory_slices)};
      best_gap = gap;
    }
  }
  if (!best) {
    return base::Status::NotFound(GpuWhere(gpu) + ": NVML offers no GPU-instance profile for " +
                                  profile);
  }
  gi_profiles_[{gpu, profile}] = *best;
  return *best;
}

std::vector<std::pair<void*, int32_t>> NvmlGpus::GpuInstances(int32_t gpu,
                                                              const GiProfile& p) const {
  std::vector<std::pair<void*, int32_t>> out;
  const Api& a = *api_;
  if (!a.get_gis || !a.gi_info) return out;
  GpuInstance instances[kMaxInstances] = {};
  unsigned int count = kMaxInstances;
  if (a.get_gis(devices_[static_cast<size_t>(gpu)], p.id, instances, &count) != kSuccess) {
    return out;
  }
  for (unsigned int i = 0; i < count && i < kMaxInstances; ++i) {
    GiInfo info{};
    if (a.gi_info(instances[i], &info) == kSuccess) {
      out.emplace_back(instances[i], static_cast<int32_t>(info.placement.start));
    }
  }
  return out;
}

const std::vector<NvmlGpus::NamedProfile>& NvmlGpus::NamedProfiles(int32_t gpu) {
  std::vector<NamedProfile>& out = named_profiles_[gpu];
  const Api& a = *api_;
  if (!out.empty() || !a.gi_profile_info) return out;
  const domain::GpuModel* model =
      domain::GpuCatalog::Builtin().Find(models_[static_cast<size_t>(gpu)]);
  static const std::vector<domain::MigProfile> kNone;
  const std::vector<domain::MigProfile>& catalogue = model ? model->mig_profiles : kNone;
  // NVML's profile ids that are the catalogue's profiles.
  std::map<unsigned int, std::string> catalogued;
  for (const domain::MigProfile& profile : catalogue) {
    if (auto p = FindGiProfile(gpu, profile.name); p.ok()) catalogued.emplace(p->id, profile.name);
  }
  for (unsigned int index = 0; index < kGiProfiles; ++index) {
    GiProfileInfo info{};
    if (a.gi_profile_info(devices_[static_cast<size_t>(gpu)], index, &info) != kSuccess) continue;
    if (auto it = catalogued.find(info.id); it != catalogued.end()) {
      out.push_back({info.id, it->second, true});
      continue;
    }
    // A variant of a catalogue profile (the same slices and memory: "+me", with the media
    // engines), or a profile of its own, named as nvidia-smi names them.
    const domain::MigProfile* like = nullptr;
    for (const domain::MigProfile& p : catalogue) {
      if (p.compute_slices == static_cast<int>(info.slice_count) &&
          std::llabs(p.memory_mib - static_cast<long long>(info.memory_size_mb)) * 20 <=
              p.memory_mib) {
        like = &p;
      }
    }
    out.push_back(
        {info.id,
         like ? like->name + "+me"
              : std::to_string(info.slice_count) + "g." +
                    std::to_string(std::lround(static_cast<double>(info.memory_size_mb) / 1024)) +
                    "gb",
         false});
  }
  return out;
}

std::vector<NvmlGpus::GiSeen> NvmlGpus::AllGpuInstances(int32_t gpu) {
  std::vector<GiSeen> out;
  const Api& a = *api_;
  if (!a.get_gis || !a.gi_info) return out;
  for (const NamedProfile& profile : NamedProfiles(gpu)) {
    GpuInstance instances[kMaxInstances] = {};
    unsigned int count = kMaxInstances;
    if (a.get_gis(devices_[static_cast<size_t>(gpu)], profile.id, instances, &count) != kSuccess) {
      continue;
    }
    for (unsigned int i = 0; i < count && i < kMaxInstances; ++i) {
      GiInfo gi{};
      if (a.gi_info(instances[i], &gi) != kSuccess) continue;
      out.push_back({instances[i], profile.name, static_cast<int32_t>(gi.placement.start),
                     static_cast<int32_t>(gi.placement.size), profile.catalogued});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const GiSeen& x, const GiSeen& y) { return x.start < y.start; });
  return out;
}

void* NvmlGpus::FindGpuInstance(int32_t gpu, const GiProfile& p, int32_t start) const {
  for (const auto& [instance, at] : GpuInstances(gpu, p)) {
    if (at == start) return instance;
  }
  return nullptr;
}

base::Result<std::string> NvmlGpus::MigDeviceUuid(int32_t gpu, unsigned int gi) const {
  const Api& a = *api_;
  unsigned int most = 0;
  if (a.max_mig_devices && a.mig_device_by_index && a.mig_gi_id &&
      a.max_mig_devices(devices_[static_cast<size_t>(gpu)], &most) == kSuccess) {
    for (unsigned int i = 0; i < most; ++i) {
      Device mig = nullptr;
      unsigned int id = 0;
      if (a.mig_device_by_index(devices_[static_cast<size_t>(gpu)], i, &mig) != kSuccess ||
          a.mig_gi_id(mig, &id) != kSuccess || id != gi) {
        continue;
      }
      char buf[kBufferSize] = {0};
      if (base::Status s = Check(a.uuid(mig, buf, kBufferSize), "nvmlDeviceGetUUID"); !s.ok()) {
        return s;
      }
      return std::string(buf);
    }
  }
  return base::Status::NotFound(GpuWhere(gpu) + ": no MIG device for GPU instance " +
                                std::to_string(gi));
}

std::optional<MigInstanceIds> NvmlGpus::MigIds(int32_t gpu, const std::string& mig_uuid) {
  const Api& a = *api_;
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size()) || !a.max_mig_devices ||
      !a.mig_device_by_index || !a.mig_gi_id || !a.mig_ci_id || !a.minor_number) {
    return std::nullopt;
  }
  Device parent = devices_[static_cast<size_t>(gpu)];
  unsigned int minor = 0, most = 0;
  if (a.minor_number(parent, &minor) != kSuccess || a.max_mig_devices(parent, &most) != kSuccess) {
    return std::nullopt;
  }
  for (unsigned int i = 0; i < most; ++i) {
    Device mig = nullptr;
    char buf[kBufferSize] = {0};
    unsigned int gi = 0, ci = 0;
    if (a.mig_device_by_index(parent, i, &mig) != kSuccess ||
        a.uuid(mig, buf, kBufferSize) != kSuccess || mig_uuid != buf ||
        a.mig_gi_id(mig, &gi) != kSuccess || a.mig_ci_id(mig, &ci) != kSuccess) {
      continue;
    }
    return MigInstanceIds{minor, gi, ci};
  }
  return std::nullopt;
}

base::Status NvmlGpus::SetMigMode(int32_t gpu, bool enabled) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size())) {
    return base::Status::Invalid("no GPU " + std::to_string(gpu));
  }
  const Api& a = *api_;
  if (!a.set_mig_mode || !a.mig_mode) {
    return base::Status::NotFound(GpuWhere(gpu) + ": this driver's NVML has no MIG functions");
  }
  unsigned int current = 0, pending = 0;
  if (a.mig_mode(devices_[static_cast<size_t>(gpu)], &current, &pending) == kSuccess &&
      (current == 1) == enabled && (pending == 1) == enabled) {
    return base::Status::Ok();
  }
  // (In effect already but the other mode pending, from an earlier grant: set again, which takes
  // the pending change back, so that the next reset does not undo this grant's mode.)
  if (!enabled) {
    // Instances left behind keep MIG mode from being left: they go first.
    for (const std::string& instance : MigLayout(gpu)) {
      const MigInstanceName left = ParseMigInstance(instance);
      if (base::Status s = DestroyMigInstance(gpu, left.profile, left.start); !s.ok()) {
        return s;
      }
    }
  }
  const std::string what = GpuWhere(gpu) + ": MIG mode " + (enabled ? "on" : "off");
  int activation = kSuccess;
  const int rc = a.set_mig_mode(devices_[static_cast<size_t>(gpu)], enabled ? 1 : 0, &activation);
  if (rc != kSuccess) return At(what, Check(rc, "nvmlDeviceSetMigMode"));
  // The mode is set but not in effect: on some boards (A100) and while a process holds the GPU,
  // it takes a GPU reset. The grant cannot be carried out until then, and the error says so.
  if (activation != kSuccess || MigOn(gpu) != enabled) {
    const char* text = a.error_string ? a.error_string(activation) : nullptr;
    return base::Status(base::StatusCode::kFailedPrecondition,
                        what + " is pending: it takes effect after a GPU reset (NVML: " +
                            (text ? text : "error " + std::to_string(activation)) + ")");
  }
  return base::Status::Ok();
}

base::Result<std::string> NvmlGpus::CreateMigInstance(int32_t gpu, const std::string& profile,
                                                      int32_t start) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size())) {
    return base::Status::Invalid("no GPU " + std::to_string(gpu));
  }
  const Api& a = *api_;
  const std::string where = InstanceWhere(gpu, profile, start);
  auto p = FindGiProfile(gpu, profile);
  if (!p.ok()) return p.status();
  if (!a.create_gi || !a.ci_profile_info || !a.create_ci || !a.get_cis || !a.gi_info ||
      !a.gi_destroy || !a.ci_destroy) {
    return base::Status::NotFound(where + ": this driver's NVML has no MIG functions");
  }
  if (base::Status s = SetMigMode(gpu, true); !s.ok()) return At(where, s);
  // Instances of profiles the catalogue lacks are never Meridian's (made by hand: a "+me"
  // variant), and the scheduler counts none of them: those in the grant's slices go first.
  for (const GiSeen& other : AllGpuInstances(gpu)) {
    if (other.catalogued || other.start >= start + static_cast<int32_t>(p->memory_slices) ||
        start >= other.start + other.size) {
      continue;
    }
    const std::string what = InstanceWhere(gpu, other.name, other.start);
    if (base::Status s = DestroyGpuInstance(gpu, other.instance, what); !s.ok()) return s;
    base::log::Info("{}: destroyed (not made by Meridian), for {} at slice {}", what, profile,
                    start);
  }
  GpuInstance gi = FindGpuInstance(gpu, *p, start);
  if (!gi) {
    const GiPlacement placement{static_cast<unsigned int>(start), p->memory_slices};
    const int rc = a.create_gi(devices_[static_cast<size_t>(gpu)], p->id, &placement, &gi);
    if (rc != kSuccess) {
      return At(where, Check(rc, "nvmlDeviceCreateGpuInstanceWithPlacement"));
    }
  }
  // One compute instance spanning the GPU instance: the profile whose slices are all of it.
  ComputeInstance existing[kMaxInstances] = {};
  bool has_compute = false;
  std::optional<unsigned int> ci_profile;
  for (unsigned int id = 0; id < kCiProfiles; ++id) {
    CiProfileInfo info{};
    if (a.ci_profile_info(gi, id, kCiEngineShared, &info) != kSuccess) continue;
    if (info.slice_count == p->compute_slices && !ci_profile) ci_profile = info.id;
    unsigned int count = kMaxInstances;
    if (a.get_cis(gi, info.id, existing, &count) == kSuccess && count > 0) has_compute = true;
  }
  if (!has_compute) {
    if (!ci_profile) return base::Status::NotFound(where + ": NVML offers no compute instance");
    ComputeInstance ci = nullptr;
    if (int rc = a.create_ci(gi, *ci_profile, &ci); rc != kSuccess) {
      base::Status s = At(where, Check(rc, "nvmlGpuInstanceCreateComputeInstance"));
      (void)DestroyGpuInstance(gpu, gi, where);  // nothing half-made is left behind
      return s;
    }
  }
  GiInfo info{};
  if (base::Status s = Check(a.gi_info(gi, &info), "nvmlGpuInstanceGetInfo"); !s.ok()) {
    return At(where, s);
  }
  return MigDeviceUuid(gpu, info.id);
}

base::Status NvmlGpus::DestroyGpuInstance(int32_t gpu, void* instance, const std::string& what) {
  (void)gpu;
  const Api& a = *api_;
  for (unsigned int index = 0; index < kCiProfiles; ++index) {
    // Listed by the profile's id, as NVML numbers it, not by its index.
    CiProfileInfo info{};
    if (a.ci_profile_info(instance, index, kCiEngineShared, &info) != kSuccess) continue;
    ComputeInstance cis[kMaxInstances] = {};
    unsigned int count = kMaxInstances;
    if (a.get_cis(instance, info.id, cis, &count) != kSuccess) continue;
    for (unsigned int i = 0; i < count && i < kMaxInstances; ++i) {
      if (int rc = a.ci_destroy(cis[i]); rc != kSuccess) {
        return At(what, Check(rc, "nvmlComputeInstanceDestroy"));
      }
    }
  }
  if (int rc = a.gi_destroy(instance); rc != kSuccess) {
    return At(what, Check(rc, "nvmlGpuInstanceDestroy"));
  }
  return base::Status::Ok();
}

base::Status NvmlGpus::DestroyMigInstance(int32_t gpu, const std::string& profile, int32_t start) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size())) {
    return base::Status::Invalid("no GPU " + std::to_string(gpu));
  }
  const Api& a = *api_;
  if (!a.gi_destroy || !a.ci_destroy || !a.get_cis || !a.ci_profile_info) {
    return base::Status::Ok();  // no MIG functions: no instance to destroy
  }
  for (const GiSeen& seen : AllGpuInstances(gpu)) {
    if (seen.name == profile && seen.start == start) {
      return DestroyGpuInstance(gpu, seen.instance, InstanceWhere(gpu, profile, start));
    }
  }
  return base::Status::Ok();  // none there
}

std::vector<std::string> NvmlGpus::MigLayout(int32_t gpu) {
  std::vector<std::string> out;
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size()) || !MigOn(gpu)) return out;
  for (const GiSeen& seen : AllGpuInstances(gpu)) {
    out.push_back(seen.name + "@" + std::to_string(seen.start));
  }
  return out;
}

}  // namespace meridian::agent
