// A FAKE of NVML (libnvidia-ml.so) for tests on machines without NVIDIA GPUs: the few functions
// Meridian's agent calls, answering for four made-up H100s. GPUs 0 and 1 share a direct NVLink;
// GPUs 2 and 3 reach each other through one NVSwitch; GPU 3 is in MIG mode; GPU 1 has five
// corrected and two uncorrected ECC errors and one row remapped for an uncorrectable error,
// pending a reset; GPU 0 has a row remapped for correctable errors; one critical XID event (79) is
// pending on GPU 2. Warnings before failures: every GPU slows down at 87 C except GPU 3, whose
// NVML reports no threshold; GPU 2's clocks are held by the software power cap (0x4) and GPU 0
// is idle (0x1); each active NVLink of GPU 1 counts 3 flit and 4 data CRC errors (14 in all over
// its two links), the others none. Like the H100s they stand for, they retire no pages (Ampere and
// later remap rows instead: NOT_SUPPORTED). Never shipped.
#include <cstdio>
#include <cstring>

namespace {

struct FakeDevice {
  int index;
};
FakeDevice g_devices[4] = {{0}, {1}, {2}, {3}};
bool g_initialized = false;
bool g_xid_pending = true;

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

}  // namespace

extern "C" {

int nvmlInit_v2() {
  g_initialized = true;
  return 0;
}
int nvmlShutdown() {
  g_initialized = false;
  return 0;
}
const char* nvmlErrorString(int rc) { return rc == 1 ? "Uninitialized" : "Unknown Error"; }
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
  *current = *pending = Index(d) == 3 ? 1 : 0;
  return 0;
}
// errorType 0: corrected (single-bit), 1: uncorrected (double-bit); counterType 0: volatile.
int nvmlDeviceGetTotalEccErrors(void* d, int error_type, int, unsigned long long* count) {
  *count = Index(d) == 1 ? (error_type == 0 ? 5 : 2) : 0;
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
  *unc = Index(d) == 1 ? 1 : 0;
  *pending = Index(d) == 1 ? 1 : 0;
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
