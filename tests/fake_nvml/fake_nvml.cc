// A FAKE of NVML (libnvidia-ml.so) for tests on machines without NVIDIA GPUs: the few functions
// Meridian's agent calls, answering for four made-up H100s. GPUs 0 and 1 share a direct NVLink;
// GPUs 2 and 3 reach each other through one NVSwitch; GPU 3 is in MIG mode; GPU 1 has five
// corrected and two uncorrected ECC errors and one row remapped for an uncorrectable error,
// pending a reset; GPU 0 has a row remapped for correctable errors; one critical XID event (79) is
// pending on GPU 2. Warnings before failures: every GPU slows down at 87 C except GPU 3, whose
// NVML reports no threshold; GPU 2's clocks are held by the software power cap (0x4) and GPU 0
// is idle (0x1); each active NVLink of GPU 1 counts 3 flit and 4 data CRC errors (14 in all over
// its two links), the others none. Like the H100s they stand for, they retire no pages (Ampere and
// later remap rows instead: NOT_SUPPORTED).
//
// MIG: the H100's GPU-instance profiles (1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb and
// the 1g.10gb+me variant) with NVML's numbers, placements on eight memory slices, one compute
// instance per GPU instance. GPU 3 starts in MIG mode with a 1g.10gb instance at slice 6 made "by
// hand" (and, with FAKE_NVML_ME_AT=<slice>, a 1g.10gb+me there, a profile the catalogue lacks);
// GPU 1 behaves like an A100 with work on it: MIG mode changes are pending until a GPU
// reset (activation status RESET_REQUIRED); FAKE_NVML_RESET_REQUIRED, a list of GPU indices
// ("1,3"), names others instead. A reset is a file named after the GPU's index in the folder that
// FAKE_NVML_RESETS names (what a test's remediation command writes, standing for nvidia-smi
// --gpu-reset): the next look at the GPU's MIG mode finds the pending mode in effect and the
// file gone. Overlapping slices answer INSUFFICIENT_RESOURCES.
// Every call that changes the MIG layout is appended, one line each, to the file named by
// FAKE_NVML_CALLS when it is set, so that tests can check the calls and their order. nvmlInit
// puts every GPU back as described. With FAKE_NVML_HEALTHY set, the GPUs have no faults (no XID
// event, no ECC errors, no row remapped), so that a node on them takes work. Never shipped.
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct FakeDevice {
  int index;
};
FakeDevice g_devices[4] = {{0}, {1}, {2}, {3}};
bool g_initialized = false;
bool g_xid_pending = true;
bool g_healthy = false;

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct EventData {
  void* device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id, compute_instance_id;
};

int Index(void* d) { return static_cast<FakeDevice*>(d)->index; }
void BusId(int index, char* out) { std::snprintf(out, 32, "00000000:%02X:00.0", 0x10 + index); }

// --- MIG ---
struct GiProfile {
  unsigned int index, id;     // NVML_GPU_INSTANCE_PROFILE_*, and the id NVML gives it
  unsigned int slices, size;  // compute slices, memory slices of a placement
  unsigned long long memory_mb;
};
// NVML_GPU_INSTANCE_PROFILE_1_SLICE (0), 2_SLICE (1), 3_SLICE (2), 4_SLICE (3), 7_SLICE (4),
// 1_SLICE_REV1 (7, "+me"), 1_SLICE_REV2 (9, twice the memory), with the ids an H100 80GB gives
// them (`nvidia-smi mig -lgip`), which are not their indices.
const GiProfile kProfiles[] = {{0, 19, 1, 1, 9856}, {1, 14, 2, 2, 19968}, {2, 9, 3, 4, 40192},
                               {3, 5, 4, 4, 40192}, {4, 0, 7, 8, 80384},  {7, 20, 1, 1, 9856},
                               {9, 15, 1, 2, 19968}};
const GiProfile* Profile(unsigned int id) {  // by id
  for (const GiProfile& p : kProfiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}
const GiProfile* ProfileAt(unsigned int index) {
  for (const GiProfile& p : kProfiles) {
    if (p.index == index) return &p;
  }
  return nullptr;
}
struct FakeGi {
  int gpu = 0;
  bool used = false;
  unsigned int id = 0, profile = 0, start = 0, size = 0;
  bool has_ci = false;
};
struct FakeCi {
  FakeGi* gi = nullptr;
};
struct MigDevice {
  int index;  // first, as in FakeDevice: the parent's index
  FakeGi* gi;
};
constexpr int kSlots = 8;
FakeGi g_gis[4][kSlots];
FakeCi g_cis[4][kSlots];
MigDevice g_mig_devices[4][kSlots];
unsigned int g_mig_current[4], g_mig_pending[4];
unsigned int g_next_gi_id[4];

void Log(const char* format, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* format, ...) {
  const char* path = std::getenv("FAKE_NVML_CALLS");
  if (!path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(f, format, args);
  va_end(args);
  std::fputc('\n', f);
  std::fclose(f);
}

FakeGi* AddGi(int gpu, unsigned int profile, unsigned int start) {
  for (int k = 0; k < kSlots; ++k) {
    FakeGi& g = g_gis[gpu][k];
    if (g.used) continue;
    g = FakeGi{gpu, true, ++g_next_gi_id[gpu], profile, start, Profile(profile)->size, false};
    return &g;
  }
  return nullptr;
}

void ResetMig() {
  for (int gpu = 0; gpu < 4; ++gpu) {
    for (int k = 0; k < kSlots; ++k) {
      g_gis[gpu][k] = FakeGi{};
      g_cis[gpu][k] = FakeCi{};
      g_mig_devices[gpu][k] = MigDevice{gpu, nullptr};
    }
    g_mig_current[gpu] = g_mig_pending[gpu] = gpu == 3 ? 1 : 0;
    g_next_gi_id[gpu] = 0;
  }
  FakeGi* by_hand = AddGi(3, 19, 6);  // a 1g.10gb
  by_hand->has_ci = true;
  // FAKE_NVML_ME_AT=<start>: a 1g.10gb+me made by hand on GPU 3 too, at that slice.
  if (const char* at = std::getenv("FAKE_NVML_ME_AT")) {
    FakeGi* me = AddGi(3, 20, static_cast<unsigned int>(std::atoi(at)));
    me->has_ci = true;
  }
}

// Whether a mode change of GPU `gpu` waits for a reset.
bool ResetRequired(int gpu) {
  const char* list = std::getenv("FAKE_NVML_RESET_REQUIRED");
  if (!list) return gpu == 1;
  for (const char* at = list; *at; ++at) {
    if (*at - '0' == gpu && (at == list || at[-1] == ',') && (at[1] == ',' || at[1] == 0)) {
      return true;
    }
  }
  return false;
}

// A reset of GPU `gpu` asked for since the last look: the pending mode takes effect.
void TakeReset(int gpu) {
  const char* folder = std::getenv("FAKE_NVML_RESETS");
  if (!folder) return;
  const std::string marker = std::string(folder) + "/" + std::to_string(gpu);
  if (::unlink(marker.c_str()) != 0) return;
  Log("reset gpu=%d", gpu);
  g_mig_current[gpu] = g_mig_pending[gpu];
}

bool IsMigDevice(void* d) {
  for (auto& row : g_mig_devices) {
    for (MigDevice& m : row) {
      if (d == &m) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  g_initialized = true;
  g_healthy = std::getenv("FAKE_NVML_HEALTHY") != nullptr;
  g_xid_pending = !g_healthy;
  ResetMig();
  return 0;
}
int nvmlShutdown() {
  g_initialized = false;
  return 0;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 1:
      return "Uninitialized";
    case 16:
      return "Reset Required";
    case 19:
      return "In use by another client";
    case 23:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return 1;
  *count = 4;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index >= 4) return 2;
  *device = &g_devices[index];
  return 0;
}
int nvmlDeviceGetUUID(void* d, char* uuid, unsigned int length) {
  if (IsMigDevice(d)) {
    const MigDevice* m = static_cast<MigDevice*>(d);
    std::snprintf(uuid, length, "MIG-fake-%04d-%04u", m->index, m->gi->id);
    return 0;
  }
  std::snprintf(uuid, length, "GPU-fake-0000-%04d", Index(d));
  return 0;
}
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  std::snprintf(name, length, "NVIDIA H100 80GB HBM3");
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* d, Memory* m) {
  m->total = 81559ULL << 20;
  m->used = static_cast<unsigned long long>(1000 * (Index(d) + 1)) << 20;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* d, Utilization* u) {
  u->gpu = 10 * (Index(d) + 1);
  u->memory = 5;
  return 0;
}
int nvmlDeviceGetTemperature(void* d, unsigned int, unsigned int* t) {
  *t = 40 + Index(d);
  return 0;
}
int nvmlDeviceGetPowerUsage(void* d, unsigned int* mw) {
  *mw = 300000 + 1000 * Index(d);
  return 0;
}
int nvmlDeviceGetMigMode(void* d, unsigned int* current, unsigned int* pending) {
  TakeReset(Index(d));
  *current = g_mig_current[Index(d)];
  *pending = g_mig_pending[Index(d)];
  return 0;
}
int nvmlDeviceSetMigMode(void* d, unsigned int mode, int* activation) {
  const int i = Index(d);
  Log("nvmlDeviceSetMigMode gpu=%d mode=%u", i, mode);
  if (mode > 1) return 2;  // INVALID_ARGUMENT
  for (const FakeGi& g : g_gis[i]) {
    if (g.used && mode == 0) return 19;  // IN_USE: instances must go first
  }
  g_mig_pending[i] = mode;
  if (ResetRequired(i) && mode != g_mig_current[i]) {
    *activation = 16;  // RESET_REQUIRED: pending until a reset
    return 0;
  }
  g_mig_current[i] = mode;
  *activation = 0;
  return 0;
}
int nvmlDeviceGetGpuInstanceProfileInfo(void*, unsigned int profile, unsigned int* info) {
  const GiProfile* p = ProfileAt(profile);
  if (!p) return 3;  // NOT_SUPPORTED
  // nvmlGpuInstanceProfileInfo_t: id, isP2pSupported, sliceCount, instanceCount,
  // multiprocessorCount, copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount,
  // then memorySizeMB (unsigned long long, 8-aligned at byte 40).
  std::memset(info, 0, 48);
  info[0] = p->id;
  info[2] = p->slices;
  info[3] = 8 / p->size;
  unsigned long long memory = p->memory_mb;
  std::memcpy(reinterpret_cast<char*>(info) + 40, &memory, sizeof(memory));
  return 0;
}
struct Placement {
  unsigned int start, size;
};
int nvmlDeviceCreateGpuInstanceWithPlacement(void* d, unsigned int profile,
                                             const Placement* placement, void** instance) {
  const int i = Index(d);
  Log("nvmlDeviceCreateGpuInstanceWithPlacement gpu=%d profile=%u start=%u size=%u", i, profile,
      placement->start, placement->size);
  const GiProfile* p = Profile(profile);
  if (!p || placement->size != p->size || placement->start % p->size != 0 ||
      placement->start + p->size > 8 || (p->slices == 3 && placement->start > 4)) {
    return 2;  // INVALID_ARGUMENT
  }
  if (!g_mig_current[i]) return 3;  // NOT_SUPPORTED outside MIG mode
  for (const FakeGi& g : g_gis[i]) {
    if (g.used && g.start < placement->start + p->size && placement->start < g.start + g.size) {
      return 23;  // INSUFFICIENT_RESOURCES
    }
  }
  FakeGi* g = AddGi(i, profile, placement->start);
  if (!g) return 23;
  *instance = g;
  return 0;
}
int nvmlDeviceGetGpuInstances(void* d, unsigned int profile, void** instances,
                              unsigned int* count) {
  unsigned int n = 0;
  for (FakeGi& g : g_gis[Index(d)]) {
    if (!g.used || g.profile != profile) continue;
    if (n >= *count) return 7;  // INSUFFICIENT_SIZE
    instances[n++] = &g;
  }
  *count = n;
  return 0;
}
struct GiInfo {
  void* device;
  unsigned int id, profile_id;
  Placement placement;
};
int nvmlGpuInstanceGetInfo(void* instance, GiInfo* info) {
  const FakeGi* g = static_cast<FakeGi*>(instance);
  if (!g->used) return 2;
  info->device = &g_devices[g->gpu];
  info->id = g->id;
  info->profile_id = g->profile;
  info->placement = {g->start, g->size};
  return 0;
}
int nvmlGpuInstanceDestroy(void* instance) {
  FakeGi* g = static_cast<FakeGi*>(instance);
  Log("nvmlGpuInstanceDestroy gpu=%d gi=%u", g->gpu, g->id);
  if (!g->used) return 2;
  if (g->has_ci) return 19;  // IN_USE: its compute instance must go first
  *g = FakeGi{};
  return 0;
}
// Compute-instance profiles 0..7 have 1, 2, 3, 4, 7, 8, 6, 1 slices; those wider than the GPU
// instance are NOT_SUPPORTED there.
int nvmlGpuInstanceGetComputeInstanceProfileInfo(void* instance, unsigned int profile,
                                                 unsigned int engine, unsigned int* info) {
  static const unsigned int kSlices[] = {1, 2, 3, 4, 7, 8, 6, 1};
  const FakeGi* g = static_cast<FakeGi*>(instance);
  if (profile >= 8 || engine != 0 || profile == 7 ||
      kSlices[profile] > Profile(g->profile)->slices) {
    return 3;
  }
  std::memset(info, 0, 9 * sizeof(unsigned int));
  info[0] = profile;
  info[1] = kSlices[profile];
  return 0;
}
FakeCi* CiOf(FakeGi* g) { return &g_cis[g->gpu][g - g_gis[g->gpu]]; }
int nvmlGpuInstanceCreateComputeInstance(void* instance, unsigned int profile, void** ci) {
  FakeGi* g = static_cast<FakeGi*>(instance);
  Log("nvmlGpuInstanceCreateComputeInstance gpu=%d gi=%u profile=%u", g->gpu, g->id, profile);
  if (g->has_ci) return 23;
  g->has_ci = true;
  CiOf(g)->gi = g;
  *ci = CiOf(g);
  return 0;
}
int nvmlGpuInstanceGetComputeInstances(void* instance, unsigned int profile, void** cis,
                                       unsigned int* count) {
  FakeGi* g = static_cast<FakeGi*>(instance);
  static const unsigned int kSlices[] = {1, 2, 3, 4, 7, 8, 6, 1};
  const bool match =
      g->has_ci && profile < 8 && kSlices[profile] == Profile(g->profile)->slices && profile != 7;
  if (match && *count < 1) return 7;
  if (match) {
    CiOf(g)->gi = g;
    cis[0] = CiOf(g);
  }
  *count = match ? 1 : 0;
  return 0;
}
int nvmlComputeInstanceDestroy(void* ci) {
  FakeCi* c = static_cast<FakeCi*>(ci);
  if (!c->gi || !c->gi->has_ci) return 2;
  Log("nvmlComputeInstanceDestroy gpu=%d gi=%u", c->gi->gpu, c->gi->id);
  c->gi->has_ci = false;
  c->gi = nullptr;
  return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(void*, unsigned int* count) {
  *count = 7;
  return 0;
}
// The MIG devices are the GPU instances that have a compute instance, in slot order.
int nvmlDeviceGetMigDeviceHandleByIndex(void* d, unsigned int index, void** device) {
  const int i = Index(d);
  unsigned int n = 0;
  for (int k = 0; k < kSlots; ++k) {
    if (!g_gis[i][k].used || !g_gis[i][k].has_ci) continue;
    if (n++ == index) {
      g_mig_devices[i][k] = MigDevice{i, &g_gis[i][k]};
      *device = &g_mig_devices[i][k];
      return 0;
    }
  }
  return 6;  // NOT_FOUND
}
int nvmlDeviceGetGpuInstanceId(void* d, unsigned int* id) {
  if (!IsMigDevice(d)) return 2;
  *id = static_cast<MigDevice*>(d)->gi->id;
  return 0;
}
// One compute instance spanning each GPU instance: the first, id 0.
int nvmlDeviceGetComputeInstanceId(void* d, unsigned int* id) {
  if (!IsMigDevice(d)) return 2;
  *id = 0;
  return 0;
}
// The driver's minor numbers run the other way round from NVML's indices here (3 for GPU 0), so
// that what uses one for the other shows.
int nvmlDeviceGetMinorNumber(void* d, unsigned int* minor) {
  if (IsMigDevice(d)) return 3;  // NOT_SUPPORTED
  *minor = 3 - static_cast<unsigned int>(Index(d));
  return 0;
}
// errorType 0: corrected (single-bit), 1: uncorrected (double-bit); counterType 0: volatile.
int nvmlDeviceGetTotalEccErrors(void* d, int error_type, int, unsigned long long* count) {
  *count = Index(d) == 1 && !g_healthy ? (error_type == 0 ? 5 : 2) : 0;
  return 0;
}
// NVML_CLOCK_SM (1): 1980 MHz on GPU 0, 10 MHz less on each next one.
int nvmlDeviceGetClockInfo(void* d, unsigned int type, unsigned int* mhz) {
  if (type != 1) return 3;  // NOT_SUPPORTED for the clocks the agent does not read
  *mhz = 1980 - 10 * static_cast<unsigned int>(Index(d));
  return 0;
}
int nvmlDeviceGetRetiredPages(void*, int, unsigned int*, unsigned long long*) {
  return 3;  // NVML_ERROR_NOT_SUPPORTED
}
int nvmlDeviceGetRemappedRows(void* d, unsigned int* corr, unsigned int* unc, unsigned int* pending,
                              unsigned int* failed) {
  *corr = Index(d) == 0 ? 1 : 0;
  *unc = Index(d) == 1 && !g_healthy ? 1 : 0;
  *pending = Index(d) == 1 && !g_healthy ? 1 : 0;
  *failed = 0;
  return 0;
}
int nvmlDeviceGetPciInfo_v3(void* d, PciInfo* pci) {
  std::memset(pci, 0, sizeof(*pci));
  BusId(Index(d), pci->bus_id);
  return 0;
}
int nvmlDeviceGetNvLinkState(void* d, unsigned int link, int* active) {
  *active = link < 2 && Index(d) >= 0 ? 1 : 0;
  return 0;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* d, unsigned int link, PciInfo* pci) {
  std::memset(pci, 0, sizeof(*pci));
  const int i = Index(d);
  if (i < 2) {
    BusId(1 - i, pci->bus_id);  // 0 <-> 1 directly
  } else {
    std::snprintf(pci->bus_id, 32, "00000000:%02X:00.0", 0xA0 + static_cast<int>(link));
  }
  return 0;
}
// NVML_TEMPERATURE_THRESHOLD_SLOWDOWN (1) only; NOT_SUPPORTED on GPU 3.
int nvmlDeviceGetTemperatureThreshold(void* d, int type, unsigned int* t) {
  if (type != 1 || Index(d) == 3) return 3;
  *t = 87;
  return 0;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* d, unsigned long long* reasons) {
  *reasons = Index(d) == 2 ? 0x4 : Index(d) == 0 ? 0x1 : 0;
  return 0;
}
// NVML_NVLINK_ERROR_DL_CRC_FLIT (2) and _CRC_DATA (3), per link.
int nvmlDeviceGetNvLinkErrorCounter(void* d, unsigned int, int counter, unsigned long long* n) {
  if (counter != 2 && counter != 3) return 3;
  *n = Index(d) == 1 ? (counter == 2 ? 3 : 4) : 0;
  return 0;
}
int nvmlEventSetCreate(void** set) {
  static int token;
  *set = &token;
  return 0;
}
int nvmlDeviceRegisterEvents(void*, unsigned long long, void*) { return 0; }
int nvmlEventSetWait_v2(void*, EventData* e, unsigned int) {
  if (!g_xid_pending) return 10;  // timeout
  g_xid_pending = false;
  e->device = &g_devices[2];
  e->event_type = 0x8;
  e->event_data = 79;
  return 0;
}
int nvmlEventSetFree(void*) { return 0; }

}  // extern "C"
