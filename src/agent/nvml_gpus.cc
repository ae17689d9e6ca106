#include "agent/nvml_gpus.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "agent/nvml_api.h"

namespace meridian::agent {

using namespace nvml;  // NOLINT: the binding's own names, in its own files

base::Result<std::unique_ptr<NvmlGpus>> NvmlGpus::Open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return base::Status::NotFound("NVML is not available (" + std::string(why ? why : library) +
                                  "): install the NVIDIA driver, or run the agent with "
                                  "--simulate-gpus on a machine without NVIDIA GPUs");
  }
  std::unique_ptr<NvmlGpus> g(new NvmlGpus());
  g->handle_ = handle;
  g->api_ = std::make_unique<Api>();
  Api& a = *g->api_;
  std::string missing;
  auto need = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
  auto want = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
  };
  need(a.init, "nvmlInit_v2");
  need(a.shutdown, "nvmlShutdown");
  need(a.error_string, "nvmlErrorString");
  need(a.count, "nvmlDeviceGetCount_v2");
  need(a.handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  need(a.uuid, "nvmlDeviceGetUUID");
  need(a.name, "nvmlDeviceGetName");
  need(a.memory, "nvmlDeviceGetMemoryInfo");
  need(a.utilization, "nvmlDeviceGetUtilizationRates");
  need(a.temperature, "nvmlDeviceGetTemperature");
  want(a.power, "nvmlDeviceGetPowerUsage");
  want(a.mig_mode, "nvmlDeviceGetMigMode");
  want(a.ecc, "nvmlDeviceGetTotalEccErrors");
  want(a.clock, "nvmlDeviceGetClockInfo");
  want(a.retired_pages, "nvmlDeviceGetRetiredPages");
  want(a.remapped_rows, "nvmlDeviceGetRemappedRows");
  want(a.pci_info, "nvmlDeviceGetPciInfo_v3");
  want(a.nvlink_state, "nvmlDeviceGetNvLinkState");
  want(a.nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  // Warnings before failures: the slowdown temperature, why clocks are held back (R535 renamed
  // "throttle reasons" to "clocks event reasons"; the bits are the same), NVLink CRC counters.
  want(a.temperature_threshold, "nvmlDeviceGetTemperatureThreshold");
  want(a.throttle_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!a.throttle_reasons) want(a.throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  want(a.nvlink_errors, "nvmlDeviceGetNvLinkErrorCounter");
  want(a.event_set_create, "nvmlEventSetCreate");
  want(a.register_events, "nvmlDeviceRegisterEvents");
  want(a.event_wait, "nvmlEventSetWait_v2");
  want(a.event_set_free, "nvmlEventSetFree");
  // MIG: drivers from R450 on; a GPU without MIG answers NOT_SUPPORTED.
  want(a.set_mig_mode, "nvmlDeviceSetMigMode");
  want(a.gi_profile_info, "nvmlDeviceGetGpuInstanceProfileInfo");
  want(a.create_gi, "nvmlDeviceCreateGpuInstanceWithPlacement");
  want(a.get_gis, "nvmlDeviceGetGpuInstances");
  want(a.gi_info, "nvmlGpuInstanceGetInfo");
  want(a.gi_destroy, "nvmlGpuInstanceDestroy");
  want(a.ci_profile_info, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  want(a.create_ci, "nvmlGpuInstanceCreateComputeInstance");
  want(a.get_cis, "nvmlGpuInstanceGetComputeInstances");
  want(a.ci_destroy, "nvmlComputeInstanceDestroy");
  want(a.max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount");
  want(a.mig_device_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
  want(a.mig_gi_id, "nvmlDeviceGetGpuInstanceId");
  want(a.mig_ci_id, "nvmlDeviceGetComputeInstanceId");
  want(a.minor_number, "nvmlDeviceGetMinorNumber");
  if (!missing.empty()) {
    return base::Status::NotFound(library + " lacks " + missing + " (a driver too old?)");
  }
  if (base::Status s = g->Check(a.init(), "nvmlInit"); !s.ok()) {
    a.shutdown = nullptr;  // nothing to shut down
    return s;
  }
  unsigned int count = 0;
  if (base::Status s = g->Check(a.count(&count), "nvmlDeviceGetCount"); !s.ok()) return s;
  for (unsigned int i = 0; i < count; ++i) {
    Device d = nullptr;
    if (base::Status s = g->Check(a.handle_by_index(i, &d), "nvmlDeviceGetHandleByIndex");
        !s.ok()) {
      return s;
    }
    g->devices_.push_back(d);
    char name[kBufferSize] = {0};
    Memory mem{};
    const bool named = a.name(d, name, kBufferSize) == kSuccess && a.memory(d, &mem) == kSuccess;
    g->models_.push_back(named ? CatalogueModel(name, static_cast<int64_t>(mem.total >> 20)) : "");
  }
  // XID events: some GPUs (and unprivileged users) cannot watch them; telemetry goes on without.
  if (a.event_set_create && a.register_events && a.event_wait &&
      a.event_set_create(&g->events_) == kSuccess) {
    for (Device d : g->devices_) (void)a.register_events(d, kEventXidCritical, g->events_);
  }
  return g;
}

NvmlGpus::~NvmlGpus() {
  if (api_) {
    if (events_ && api_->event_set_free) api_->event_set_free(events_);
    if (api_->shutdown) api_->shutdown();
  }
  if (handle_) dlclose(handle_);
}

base::Status NvmlGpus::Check(int rc, const char* what) const {
  if (rc == kSuccess) return base::Status::Ok();
  const char* text = api_ && api_->error_string ? api_->error_string(rc) : nullptr;
  return base::Status::Io(std::string("NVML ") + what + ": " +
                          (text ? text : "error " + std::to_string(rc)));
}

std::string NvmlGpus::CatalogueModel(const std::string& product, int64_t memory_mib) {
  auto has = [&](const char* part) { return product.find(part) != std::string::npos; };
  const int64_t gib = (memory_mib + 512) / 1024;
  if (has("H200")) return "H200-141GB";
  if (has("H100")) return "H100-80GB";
  if (has("A100")) return gib > 48 ? "A100-80GB" : "A100-40GB";
  if (has("L40S")) return "L40S";
  if (has("A10") && !has("A100")) return "A10";
  if (has("L4")) return "L4";
  if (has("T4")) return "T4";
  if (has("V100")) return gib > 20 ? "V100M32" : "V100";
  if (has("P100")) return "P100";
  return product;
}

base::Result<std::vector<GpuInfo>> NvmlGpus::Inventory() {
  const Api& a = *api_;
  std::vector<GpuInfo> out;
  std::vector<std::string> bus_ids;
  for (size_t i = 0; i < devices_.size(); ++i) {
    Device d = devices_[i];
    GpuInfo g;
    g.index = static_cast<int32_t>(i);
    char buf[kBufferSize] = {0};
    if (base::Status s = Check(a.uuid(d, buf, kBufferSize), "nvmlDeviceGetUUID"); !s.ok()) return s;
    g.uuid = buf;
    std::memset(buf, 0, sizeof(buf));
    if (base::Status s = Check(a.name(d, buf, kBufferSize), "nvmlDeviceGetName"); !s.ok()) return s;
    const std::string product = buf;
    Memory mem{};
    if (base::Status s = Check(a.memory(d, &mem), "nvmlDeviceGetMemoryInfo"); !s.ok()) return s;
    g.memory_mib = static_cast<int64_t>(mem.total >> 20);
    g.model = CatalogueModel(product, g.memory_mib);
    unsigned int current = 0, pending = 0;
    if (a.mig_mode && a.mig_mode(d, &current, &pending) == kSuccess) {
      g.mig_capable = true;
      g.mig_enabled = current == 1;
    }
    PciInfo pci{};
    bus_ids.push_back(a.pci_info && a.pci_info(d, &pci) == kSuccess ? pci.bus_id : "");
    out.push_back(g);
  }
  // NVLink domains: GPUs joined by active links, directly or through the same NVSwitch.
  std::map<std::string, std::string> parent;
  std::function<std::string(const std::string&)> find = [&](const std::string& x) {
    auto it = parent.find(x);
    if (it == parent.end() || it->second == x) return x;
    return it->second = find(it->second);
  };
  auto join = [&](const std::string& x, const std::string& y) { parent[find(x)] = find(y); };
  for (size_t i = 0; i < devices_.size(); ++i) {
    const std::string self = "gpu:" + std::to_string(i);
    parent.emplace(self, self);
    if (!a.nvlink_state || !a.nvlink_remote_pci) continue;
    for (unsigned int link = 0; link < kMaxNvLinks; ++link) {
      int active = 0;
      if (a.nvlink_state(devices_[i], link, &active) != kSuccess || !active) continue;
      PciInfo remote{};
      if (a.nvlink_remote_pci(devices_[i], link, &remote) != kSuccess) continue;
      const std::string peer = remote.bus_id;
      auto gpu = std::find(bus_ids.begin(), bus_ids.end(), peer);
      const std::string key = gpu != bus_ids.end() && !peer.empty()
                                  ? "gpu:" + std::to_string(gpu - bus_ids.begin())
                                  : "switch:" + peer;
      parent.emplace(key, key);
      join(self, key);
    }
  }
  std::map<std::string, int32_t> domain_of_root;
  for (GpuInfo& g : out) {
    const std::string root = find("gpu:" + std::to_string(g.index));
    g.nvlink_domain =
        domain_of_root.emplace(root, static_cast<int32_t>(domain_of_root.size())).first->second;
  }
  return out;
}

base::Result<std::vector<GpuTelemetry>> NvmlGpus::Telemetry() {
  const Api& a = *api_;
  if (events_) {
    EventData e{};
    for (int drained = 0; drained < 64 && a.event_wait(events_, &e, 0) == kSuccess; ++drained) {
      auto it = std::find(devices_.begin(), devices_.end(), e.device);
      if (it == devices_.end()) continue;
      auto& [count, last] = xids_[static_cast<int32_t>(it - devices_.begin())];
      ++count;
      last = static_cast<int32_t>(e.event_data);
    }
  }
  std::vector<GpuTelemetry> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    Device d = devices_[i];
    GpuTelemetry t;
    t.index = static_cast<int32_t>(i);
    Utilization u{};
    if (a.utilization(d, &u) == kSuccess) t.utilization = u.gpu / 100.0;
    Memory mem{};
    if (a.memory(d, &mem) == kSuccess) {
      t.memory_used_mib = static_cast<int64_t>(mem.used >> 20);
      t.memory_total_mib = static_cast<int64_t>(mem.total >> 20);
    }
    unsigned int temp = 0;
    if (a.temperature(d, kTemperatureGpu, &temp) == kSuccess) t.temperature_c = temp;
    unsigned int milliwatts = 0;
    if (a.power && a.power(d, &milliwatts) == kSuccess) t.power_w = milliwatts / 1000.0;
    unsigned int clock = 0;
    if (a.clock && a.clock(d, kClockSm, &clock) == kSuccess) t.sm_clock_mhz = clock;
    // Each of these is absent where the device does not keep it (ECC off, a consumer board,
    // page retirement on Ampere and later, row remapping before): NVML says NOT_SUPPORTED.
    unsigned long long ecc = 0;
    if (a.ecc && a.ecc(d, kEccCorrected, kEccVolatile, &ecc) == kSuccess) {
      t.ecc_single_bit = static_cast<int64_t>(ecc);
    }
    if (a.ecc && a.ecc(d, kEccUncorrected, kEccVolatile, &ecc) == kSuccess) {
      t.ecc_double_bit = static_cast<int64_t>(ecc);
    }
    if (a.retired_pages) {
      auto retired = [&](int cause) -> std::optional<int64_t> {
        unsigned long long addresses[kMaxPages];
        unsigned int count = kMaxPages;
        const int rc = a.retired_pages(d, cause, &count, addresses);
        if (rc != kSuccess && rc != kInsufficientSize) return std::nullopt;
        return count;
      };
      t.retired_pages_single_bit = retired(kRetiredSingleBit);
      t.retired_pages_double_bit = retired(kRetiredDoubleBit);
    }
    unsigned int correctable = 0, uncorrectable = 0, pending = 0, failed = 0;
    if (a.remapped_rows &&
        a.remapped_rows(d, &correctable, &uncorrectable, &pending, &failed) == kSuccess) {
      t.remapped_rows_correctable = correctable;
      t.remapped_rows_uncorrectable = uncorrectable;
      t.row_remap_pending = pending != 0;
      t.row_remap_failed = failed != 0;
    }
    unsigned int slowdown = 0;
    if (a.temperature_threshold &&
        a.temperature_threshold(d, kThresholdSlowdown, &slowdown) == kSuccess) {
      t.slowdown_temperature_c = slowdown;
    }
    unsigned long long reasons = 0;
    if (a.throttle_reasons && a.throttle_reasons(d, &reasons) == kSuccess) {
      t.throttle_reasons = static_cast<int64_t>(reasons);
    }
    t.nvlink_crc_errors = NvLinkCrcErrors(d);
    t.mig_instances = MigLayout(t.index);
    unsigned int mig_current = 0, mig_pending = 0;
    if (a.mig_mode && a.mig_mode(d, &mig_current, &mig_pending) == kSuccess) {
      t.mig_mode_pending = mig_current != mig_pending;
    }
    if (auto x = xids_.find(t.index); x != xids_.end()) {
      t.xid_errors = x->second.first;
      t.last_xid = x->second.second;
    }
    out.push_back(t);
  }
  return out;
}

std::optional<int64_t> NvmlGpus::NvLinkCrcErrors(void* device) const {
  const Api& a = *api_;
  if (!a.nvlink_errors || !a.nvlink_state) return std::nullopt;
  std::optional<int64_t> total;
  for (unsigned int link = 0; link < kMaxNvLinks; ++link) {
    int active = 0;
    if (a.nvlink_state(device, link, &active) != kSuccess || !active) continue;
    for (int counter : {kNvLinkCrcFlit, kNvLinkCrcData}) {
      unsigned long long n = 0;
      if (a.nvlink_errors(device, link, counter, &n) != kSuccess) continue;
      total = total.value_or(0) + static_cast<int64_t>(n);
    }
  }
  return total;
}

base::Status NvmlGpus::Probe(int32_t gpu) {
  if (gpu < 0 || gpu >= static_cast<int32_t>(devices_.size())) {
    return base::Status::Invalid("no GPU " + std::to_string(gpu));
  }
  const Api& a = *api_;
  Device d = devices_[static_cast<size_t>(gpu)];
  char buf[kBufferSize] = {0};
  if (base::Status s = Check(a.uuid(d, buf, kBufferSize), "nvmlDeviceGetUUID"); !s.ok()) return s;
  unsigned int correctable = 0, uncorrectable = 0, pending = 0, failed = 0;
  if (a.remapped_rows &&
      a.remapped_rows(d, &correctable, &uncorrectable, &pending, &failed) == kSuccess) {
    if (failed) return base::Status::Io("a row remap failed: the GPU needs replacing");
    if (pending) return base::Status::Io("a row remap still waits for a GPU reset");
  }
  unsigned int mig_current = 0, mig_pending = 0;
  if (a.mig_mode && a.mig_mode(d, &mig_current, &mig_pending) == kSuccess &&
      mig_current != mig_pending) {
    return base::Status::Io(std::string("MIG mode ") + (mig_pending ? "on" : "off") +
                            " still waits for a GPU reset");
  }
  return base::Status::Ok();
}

}  // namespace meridian::agent
