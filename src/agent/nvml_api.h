#pragma once

// The parts of NVML's C interface the agent calls (nvml.h of the driver), declared from its
// documentation, for nvml_gpus.cc and nvml_mig.cc only: return codes are ints, NVML_SUCCESS is 0;
// handles are opaque pointers. Meridian builds without NVIDIA's headers (the library is opened
// with dlopen at run time).
#include "agent/nvml_gpus.h"

namespace meridian::agent::nvml {

// The parts of NVML's C interface used here (nvml.h of the driver), declared from its
// documentation: return codes are ints, NVML_SUCCESS is 0; handles are opaque pointers.
using Device = void*;
using EventSet = void*;
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
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id, compute_instance_id;
};

constexpr int kSuccess = 0;
constexpr unsigned int kTemperatureGpu = 0;
constexpr int kInsufficientSize = 7;
constexpr unsigned int kClockSm = 1;    // NVML_CLOCK_SM
constexpr int kEccCorrected = 0;        // NVML_MEMORY_ERROR_TYPE_CORRECTED: single-bit
constexpr int kEccUncorrected = 1;      // NVML_MEMORY_ERROR_TYPE_UNCORRECTED: double-bit
constexpr int kEccVolatile = 0;         // NVML_VOLATILE_ECC: since the driver loaded
constexpr int kRetiredSingleBit = 0;    // NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
constexpr int kRetiredDoubleBit = 1;    // NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
constexpr unsigned int kMaxPages = 64;  // what one call lists; the count comes back regardless
constexpr unsigned long long kEventXidCritical = 0x8;
constexpr unsigned int kMaxNvLinks = 18;
constexpr int kThresholdSlowdown = 1;  // NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
constexpr int kNvLinkCrcFlit = 2;      // NVML_NVLINK_ERROR_DL_CRC_FLIT
constexpr int kNvLinkCrcData = 3;      // NVML_NVLINK_ERROR_DL_CRC_DATA
constexpr unsigned int kBufferSize = 96;

// MIG (nvml_mig.cc).
using GpuInstance = void*;
using ComputeInstance = void*;
struct GiPlacement {
  unsigned int start, size;
};
struct GiProfileInfo {  // nvmlGpuInstanceProfileInfo_t (version 1)
  unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count,
      copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
  unsigned long long memory_size_mb;
};
struct GiInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id, profile_id;
  GiPlacement placement;
};
struct CiProfileInfo {  // nvmlComputeInstanceProfileInfo_t (version 1)
  unsigned int id, slice_count, instance_count, multiprocessor_count, shared_copy_engine_count,
      shared_decoder_count, shared_encoder_count, shared_jpeg_count, shared_ofa_count;
};
constexpr int kNotSupported = 3;
constexpr int kResetRequired = 16;  // NVML_ERROR_RESET_REQUIRED
constexpr int kInUse = 19;          // NVML_ERROR_IN_USE
constexpr int kInsufficientResources = 23;
constexpr unsigned int kGiProfiles = 17;  // NVML_GPU_INSTANCE_PROFILE_COUNT of recent drivers
constexpr unsigned int kCiProfiles = 8;   // NVML_COMPUTE_INSTANCE_PROFILE_COUNT
constexpr unsigned int kCiEngineShared = 0;
constexpr unsigned int kMaxInstances = 8;

}  // namespace meridian::agent::nvml

namespace meridian::agent {

struct NvmlGpus::Api {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle_by_index)(unsigned int, nvml::Device*) = nullptr;
  int (*uuid)(nvml::Device, char*, unsigned int) = nullptr;
  int (*name)(nvml::Device, char*, unsigned int) = nullptr;
  int (*memory)(nvml::Device, nvml::Memory*) = nullptr;
  int (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;
  int (*temperature)(nvml::Device, unsigned int, unsigned int*) = nullptr;
  int (*power)(nvml::Device, unsigned int*) = nullptr;
  int (*mig_mode)(nvml::Device, unsigned int*, unsigned int*) = nullptr;
  int (*ecc)(nvml::Device, int, int, unsigned long long*) = nullptr;
  int (*clock)(nvml::Device, unsigned int, unsigned int*) = nullptr;
  int (*retired_pages)(nvml::Device, int, unsigned int*, unsigned long long*) = nullptr;
  int (*remapped_rows)(nvml::Device, unsigned int*, unsigned int*, unsigned int*,
                       unsigned int*) = nullptr;
  int (*pci_info)(nvml::Device, nvml::PciInfo*) = nullptr;
  int (*nvlink_state)(nvml::Device, unsigned int, int*) = nullptr;
  int (*nvlink_remote_pci)(nvml::Device, unsigned int, nvml::PciInfo*) = nullptr;
  int (*temperature_threshold)(nvml::Device, int, unsigned int*) = nullptr;
  int (*throttle_reasons)(nvml::Device, unsigned long long*) = nullptr;
  int (*nvlink_errors)(nvml::Device, unsigned int, int, unsigned long long*) = nullptr;
  int (*event_set_create)(nvml::EventSet*) = nullptr;
  int (*register_events)(nvml::Device, unsigned long long, nvml::EventSet) = nullptr;
  int (*event_wait)(nvml::EventSet, nvml::EventData*, unsigned int) = nullptr;
  int (*event_set_free)(nvml::EventSet) = nullptr;
  // MIG.
  int (*set_mig_mode)(nvml::Device, unsigned int, int*) = nullptr;
  int (*gi_profile_info)(nvml::Device, unsigned int, nvml::GiProfileInfo*) = nullptr;
  int (*create_gi)(nvml::Device, unsigned int, const nvml::GiPlacement*,
                   nvml::GpuInstance*) = nullptr;
  int (*get_gis)(nvml::Device, unsigned int, nvml::GpuInstance*, unsigned int*) = nullptr;
  int (*gi_info)(nvml::GpuInstance, nvml::GiInfo*) = nullptr;
  int (*gi_destroy)(nvml::GpuInstance) = nullptr;
  int (*ci_profile_info)(nvml::GpuInstance, unsigned int, unsigned int,
                         nvml::CiProfileInfo*) = nullptr;
  int (*create_ci)(nvml::GpuInstance, unsigned int, nvml::ComputeInstance*) = nullptr;
  int (*get_cis)(nvml::GpuInstance, unsigned int, nvml::ComputeInstance*, unsigned int*) = nullptr;
  int (*ci_destroy)(nvml::ComputeInstance) = nullptr;
  int (*max_mig_devices)(nvml::Device, unsigned int*) = nullptr;
  int (*mig_device_by_index)(nvml::Device, unsigned int, nvml::Device*) = nullptr;
  int (*mig_gi_id)(nvml::Device, unsigned int*) = nullptr;
  int (*mig_ci_id)(nvml::Device, unsigned int*) = nullptr;
  int (*minor_number)(nvml::Device, unsigned int*) = nullptr;
};

}  // namespace meridian::agent
