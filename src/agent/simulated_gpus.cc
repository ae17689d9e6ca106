#include "agent/simulated_gpus.h"

#include <algorithm>

#include "base/strings.h"
#include "domain/gpu_model.h"

namespace meridian::agent {

namespace {

// Board power of the simulated models at full load, and what an idle board draws, in watts
// (public specifications: SXM parts at their maximum TDP).
double MaxPower(const std::string& model) {
  if (model.rfind("H200", 0) == 0 || model.rfind("H100", 0) == 0) return 700;
  if (model.rfind("A100", 0) == 0) return 400;
  return 300;
}

// The SM clock at full boost, in MHz (public specifications); an idle board runs at a quarter.
int64_t MaxSmClock(const std::string& model) {
  if (model.rfind("H200", 0) == 0 || model.rfind("H100", 0) == 0) return 1980;
  if (model.rfind("A100", 0) == 0) return 1410;
  return 1530;
}

// GPUs before Ampere retire pages for memory errors; Ampere and later remap rows instead, and
// NVML reads only the one the board does.
bool RemapsRows(const std::string& model) {
  for (const char* old : {"V100", "P100", "T4"}) {
    if (model.rfind(old, 0) == 0) return false;
  }
  return true;
}

}  // namespace

base::Result<std::unique_ptr<SimulatedGpus>> SimulatedGpus::FromSpec(const std::string& spec,
                                                                     const std::string& node,
                                                                     int nvlink_domain_size) {
  auto out = std::unique_ptr<SimulatedGpus>(new SimulatedGpus());
  int32_t domain = 0;
  for (std::string_view group : base::Split(spec, ',')) {
    group = base::Trim(group);
    const size_t x = group.find('x');
    long long count = 0;
    if (x == std::string_view::npos || !base::ParseInt64(group.substr(0, x), &count) || count < 1 ||
        count > 64) {
      return base::Status::Invalid("--simulate-gpus: \"" + std::string(group) +
                                   "\" is not COUNTxMODEL (e.g. 8xH100-80GB), count 1..64");
    }
    const std::string model(group.substr(x + 1));
    const domain::GpuModel* known = domain::GpuCatalog::Builtin().Find(model);
    if (!known) {
      std::string names;
      for (const domain::GpuModel& m : domain::GpuCatalog::Builtin().models()) {
        names += (names.empty() ? "" : ", ") + m.name;
      }
      return base::Status::Invalid("--simulate-gpus: unknown GPU model \"" + model +
                                   "\" (known: " + names + ")");
    }
    for (long long i = 0; i < count; ++i) {
      GpuInfo g;
      g.index = static_cast<int32_t>(out->gpus_.size());
      g.uuid = "GPU-sim-" + node + "-" + std::to_string(g.index);
      g.model = known->name;
      g.memory_mib = known->memory_mib;
      g.nvlink_domain =
          domain + (nvlink_domain_size > 0 ? static_cast<int32_t>(i / nvlink_domain_size) : 0);
      g.mig_capable = known->mig_capable();
      out->gpus_.push_back(g);
    }
    domain = out->gpus_.back().nvlink_domain + 1;
    if (out->gpus_.size() > 64) return base::Status::Invalid("--simulate-gpus: at most 64 GPUs");
  }
  if (out->gpus_.empty()) return base::Status::Invalid("--simulate-gpus: no GPUs given");
  out->load_.assign(out->gpus_.size(), Load{});
  out->faults_.assign(out->gpus_.size(), Faults{});
  return out;
}

base::Result<std::vector<GpuInfo>> SimulatedGpus::Inventory() { return gpus_; }

base::Result<std::vector<GpuTelemetry>> SimulatedGpus::Telemetry() {
  std::vector<GpuTelemetry> out;
  for (const GpuInfo& g : gpus_) {
    const Load& l = load_[static_cast<size_t>(g.index)];
    GpuTelemetry t;
    t.index = g.index;
    t.utilization = l.utilization;
    t.memory_used_mib = l.memory_mib;
    // Idle boards sit near 30 C and a tenth of their power; both rise with the load.
    t.temperature_c = 30 + 45 * l.utilization;
    t.power_w = MaxPower(g.model) * (0.1 + 0.9 * l.utilization);
    t.memory_total_mib = g.memory_mib;
    t.sm_clock_mhz = static_cast<int64_t>(MaxSmClock(g.model) * (0.25 + 0.75 * l.utilization));
    // Every error counter reads, at zero unless a fault was injected.
    const Faults& f = faults_[static_cast<size_t>(g.index)];
    t.ecc_single_bit = f.ecc_corrected;
    t.slowdown_temperature_c = kSlowdownC;
    if (f.hot) t.temperature_c = kWarmC;
    // NVML's throttle reasons: idle (0x1) when nothing runs, the software power cap (0x4).
    t.throttle_reasons = (l.utilization == 0 ? 0x1 : 0x0) | (f.power_capped ? 0x4 : 0x0);
    t.nvlink_crc_errors = f.nvlink_crc;
    t.ecc_double_bit = f.double_bit;
    if (RemapsRows(g.model)) {
      t.remapped_rows_correctable = 0;
      t.remapped_rows_uncorrectable = f.remap_pending || f.remap_failed ? 1 : 0;
      t.row_remap_pending = f.remap_pending;
      t.row_remap_failed = f.remap_failed;
    } else {
      t.retired_pages_single_bit = 0;
      t.retired_pages_double_bit = f.double_bit;
    }
    t.xid_errors = f.xids;
    t.last_xid = f.last_xid;
    if (auto m = mig_.find(g.index); m != mig_.end()) t.mig_instances = m->second;
    out.push_back(t);
  }
  return out;
}

base::Result<std::string> SimulatedGpus::CreateMigInstance(int32_t gpu, const std::string& profile,
                                                           int32_t start) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  GpuInfo& g = gpus_[static_cast<size_t>(gpu)];
  const domain::GpuModel* model = domain::GpuCatalog::Builtin().Find(g.model);
  const domain::MigProfile* p = model ? model->FindMigProfile(profile) : nullptr;
  const std::string where = "GPU " + std::to_string(gpu) + ": MIG instance " + profile +
                            " at slice " + std::to_string(start);
  if (!p) return base::Status::Invalid(where + ": " + g.model + " has no such profile");
  if (std::find(p->starts.begin(), p->starts.end(), start) == p->starts.end()) {
    return base::Status::Invalid(where + ": not a placement of " + profile);
  }
  const std::string instance = profile + "@" + std::to_string(start);
  const std::string name = "MIG-" + g.uuid + "/" + profile + "/" + std::to_string(start);
  std::vector<std::string>& layout = mig_[gpu];
  if (std::find(layout.begin(), layout.end(), instance) != layout.end()) return name;
  // The slices are checked as NVML checks them: an overlap is "insufficient resources".
  const int first = start, last = start + p->memory_slices;
  for (const std::string& other : layout) {
    const MigInstanceName there = ParseMigInstance(other);
    const domain::MigProfile* q = model->FindMigProfile(there.profile);
    const int o = there.start;
    if (q && o < last && first < o + q->memory_slices) {
      return base::Status(base::StatusCode::kFailedPrecondition,
                          where + ": insufficient resources (" + other + " holds its slices)");
    }
  }
  layout.push_back(instance);
  g.mig_enabled = true;
  return name;
}

base::Status SimulatedGpus::DestroyMigInstance(int32_t gpu, const std::string& profile,
                                               int32_t start) {
  auto it = mig_.find(gpu);
  if (it != mig_.end()) std::erase(it->second, profile + "@" + std::to_string(start));
  return base::Status::Ok();
}

base::Status SimulatedGpus::SetMigMode(int32_t gpu, bool enabled) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  GpuInfo& g = gpus_[static_cast<size_t>(gpu)];
  if (enabled && !g.mig_capable) {
    return base::Status::Invalid("GPU " + std::to_string(gpu) + ": " + g.model +
                                 " does not support MIG");
  }
  g.mig_enabled = enabled;
  if (!enabled) mig_.erase(gpu);
  return base::Status::Ok();
}

std::vector<std::string> SimulatedGpus::MigLayout(int32_t gpu) {
  auto it = mig_.find(gpu);
  return it == mig_.end() ? std::vector<std::string>{} : it->second;
}

base::Status SimulatedGpus::InjectXid(int32_t gpu, int32_t xid) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  if (xid < 1 || xid > 999)
    return base::Status::Invalid("xid: " + std::to_string(xid) + " is not 1..999");
  Faults& f = faults_[static_cast<size_t>(gpu)];
  ++f.xids;
  f.last_xid = xid;
  f.faulted = true;
  // What the board's memory says alongside the XID, as NVML would read it.
  const bool remaps = RemapsRows(gpus_[static_cast<size_t>(gpu)].model);
  if (xid == 48 || xid == 95) ++f.double_bit;
  if (remaps && (xid == 63 || xid == 94 || xid == 95)) f.remap_pending = true;
  if (remaps && xid == 64) f.remap_failed = true;
  return base::Status::Ok();
}

base::Status SimulatedGpus::InjectWarning(int32_t gpu, const std::string& warning) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  Faults& f = faults_[static_cast<size_t>(gpu)];
  // Enough of each counter to pass the Policy's default threshold in one heartbeat.
  if (warning == "ecc-corrected") {
    f.ecc_corrected += 1000;
  } else if (warning == "nvlink-crc") {
    f.nvlink_crc += 100;
  } else if (warning == "temperature") {
    f.hot = true;
  } else if (warning == "power-cap") {
    f.power_capped = true;
  } else if (warning == "clear") {
    f.hot = false;
    f.power_capped = false;
  } else {
    return base::Status::Invalid("warning: unknown \"" + warning +
                                 "\" (ecc-corrected, temperature, power-cap, nvlink-crc, clear)");
  }
  return base::Status::Ok();
}

base::Status SimulatedGpus::ClearFault(int32_t gpu) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  Faults& f = faults_[static_cast<size_t>(gpu)];
  // As a reset does: MIG mode stays, its instances are gone (the agent makes them again).
  mig_.erase(gpu);
  f.faulted = false;
  f.remap_pending = false;  // the reset carries the remap out; a failed one stays failed
  f.double_bit = 0;         // volatile counters start again with the reset
  return base::Status::Ok();
}

base::Status SimulatedGpus::Probe(int32_t gpu) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(gpu));
  }
  const Faults& f = faults_[static_cast<size_t>(gpu)];
  if (f.remap_failed) return base::Status::Io("a row remap failed: the GPU needs replacing");
  if (f.faulted) return base::Status::Io("XID " + std::to_string(f.last_xid) + " not cleared");
  return base::Status::Ok();
}

base::Status SimulatedGpus::SetLoad(int32_t index, double utilization, int64_t memory_mib) {
  if (index < 0 || index >= static_cast<int32_t>(gpus_.size())) {
    return base::Status::Invalid("no simulated GPU " + std::to_string(index));
  }
  if (!(utilization >= 0 && utilization <= 1)) {
    return base::Status::Invalid("utilization must be within 0..1");
  }
  const GpuInfo& g = gpus_[static_cast<size_t>(index)];
  if (memory_mib < 0 || (g.memory_mib > 0 && memory_mib > g.memory_mib)) {
    return base::Status::Invalid("memory " + std::to_string(memory_mib) + " MiB does not fit GPU " +
                                 std::to_string(index) + " (" + std::to_string(g.memory_mib) +
                                 " MiB)");
  }
  load_[static_cast<size_t>(index)] = {utilization, memory_mib};
  return base::Status::Ok();
}

}  // namespace meridian::agent
