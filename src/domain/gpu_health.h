#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

// GPU health as the control plane acts on it: what NVIDIA's XID catalogue says each XID needs
// (its resolution, turned into the scope Meridian acts on), the Policy's remediation and repeat
// limits, and each GPU's health record (cordoned pending a reset, its recent faults), which is
// kept with the node's operator state (node_ops.h). Pure: callers pass `now`.
namespace meridian::domain {

using Json = nlohmann::json;

// What an XID takes out of service, from NVIDIA's published resolution for it.
enum class XidScope {
  kJob,           // RESTART_APP: the application's error; only the job on the GPU is affected
  kGpu,           // RESET_GPU: the GPU (and its MIG instances) is cordoned until it is reset
  kNvlinkDomain,  // an NVLink error: every GPU of the GPU's NVLink domain waits for a reset
  kNode,          // RESTART_BM (reboot): the node is drained; a reboot is the operator's call
};

struct XidClass {
  int32_t xid = 0;
  XidScope scope = XidScope::kGpu;
  std::string_view meaning;  // NVIDIA's name for the error, in short
};

// The class of `xid`. An XID the table does not name is taken as needing a GPU reset: the agent
// watches only critical XIDs, and putting a GPU aside until a probe passes costs less than a
// job on a GPU in an unknown state.
XidClass ClassifyXid(int32_t xid);
std::string_view ScopeName(XidScope scope);  // "job", "gpu", "nvlink-domain", "node"
// "XID 79 (GPU has fallen off the bus)": how events and reasons name a fault.
std::string DescribeXid(int32_t xid);

// The Policy's `gpuHealth`: what the agent runs to remediate a cordoned GPU, and how often a GPU
// may fault before it stays out.
struct GpuHealthPolicy {
  // The remediation's command line, "{gpu}" standing for the GPU's index: by default NVIDIA's
  // RESET_GPU, `nvidia-smi --gpu-reset -i {gpu}`. Empty: none, cordoned GPUs wait for an
  // operator. Simulated GPUs clear their fault instead of running it.
  std::vector<std::string> remediation = {"nvidia-smi", "--gpu-reset", "-i", "{gpu}"};
  int64_t max_faults = 3;             // faults within the window that keep a GPU cordoned
  double fault_window = 24 * 3600.0;  // seconds
  bool remediates() const { return !remediation.empty(); }
  bool operator==(const GpuHealthPolicy&) const = default;
};
// From a stored Policy spec (validated by documents.cc); defaults where absent.
GpuHealthPolicy GpuHealthPolicyOf(const Json& policy_spec);

// One GPU's health record on a node. GPUs that never faulted have none.
struct GpuHealth {
  int32_t index = 0;
  bool cordoned = false;  // nothing new is placed on it
  int32_t xid = 0;        // the fault that cordoned it (0: an operator did)
  std::string reason;     // why it is cordoned, in words
  double since = 0;       // when it was cordoned
  // It faulted max_faults times within the window: no automatic remediation, it stays cordoned
  // until an operator uncordons it.
  bool held = false;
  std::vector<double> faults;  // when its hardware faults happened, within the window
  // Cordoned, without a fault, until a reset puts a MIG mode change that NVML took in effect: the
  // Policy's remediation resets it; nothing of it counts toward max_faults.
  bool mig_mode_pending = false;
};

// What recording a hardware fault did to a GPU's record.
struct FaultRecorded {
  bool cordoned = false;  // it was not cordoned before
  bool held = false;      // this fault made it one too many: it stays cordoned
  int64_t recent = 0;     // its faults within the window, this one included
};

// Records a fault of `xid` on GPU `index` at `now`: the GPU is cordoned (if it was not), the
// fault counted, faults older than the window forgotten, and the GPU held once it has faulted
// max_faults times within the window.
FaultRecorded RecordGpuFault(std::vector<GpuHealth>* gpus, int32_t index, int32_t xid,
                             const std::string& reason, const GpuHealthPolicy& policy, double now);

// Cordons GPU `index` until a reset puts its pending MIG mode change in effect (not a fault: its
// faults are left as they are). Returns whether it was not cordoned before.
bool CordonForMigMode(std::vector<GpuHealth>* gpus, int32_t index, const std::string& reason,
                      double now);

// GPU `index`'s pending MIG mode change is in effect (it was reset): uncordoned when nothing
// else kept it cordoned (a fault, an operator's hold), which is what it returns; the flag goes
// either way.
bool MigModeInEffect(std::vector<GpuHealth>* gpus, int32_t index);

// Uncordons GPU `index` (remediated, or an operator's word). An operator's uncordon (`forget`)
// also forgets its faults, so that a GPU that was repaired starts afresh; a remediation keeps
// them, so that a GPU that keeps faulting is held. Returns whether it was cordoned.
enum class Uncordon { kRemediated, kOperator };
bool UncordonGpu(std::vector<GpuHealth>* gpus, int32_t index, Uncordon how);

const GpuHealth* FindGpu(const std::vector<GpuHealth>& gpus, int32_t index);
bool GpuCordoned(const std::vector<GpuHealth>& gpus, int32_t index);

// The stored form (`gpuHealth` of a Node's spec), and the API's: [{index, cordoned, xid, reason,
// since, held, faults, migModePending}]. Items of the wrong shape read as absent (a store written
// by hand).
Json GpuHealthToJson(const std::vector<GpuHealth>& gpus);
std::vector<GpuHealth> GpuHealthOf(const Json& items);

// The body of POST /api/v1/nodes/{node}/gpus/{index}/faults: {xid: N}, N in 1..999, or
// {warning: KIND}, a warning before failure (gpu_warnings.h, KnownWarningInjection).
struct FaultInjection {
  int32_t xid = 0;      // 0 with a warning
  std::string warning;  // empty with an XID
};
base::Result<FaultInjection> DecodeFaultInjection(const Json& body);

}  // namespace meridian::domain
