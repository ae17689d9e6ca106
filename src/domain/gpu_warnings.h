#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "domain/failure_cause.h"

// Warnings before failures, and nodes that fail other people's jobs
// (docs/adr/0020-gpu-warnings-and-failing-nodes.md). A warning is a node condition: it is shown
// and alerted on, and nothing is cordoned for it. Pure: callers pass `now` and the readings.
namespace meridian::domain {

using Json = nlohmann::json;

// The kinds of node condition. Each GPU warning names its GPU; kFailingJobs is the node's.
inline constexpr const char* kEccCorrectedRate = "EccCorrectedRate";
inline constexpr const char* kTemperatureNearSlowdown = "TemperatureNearSlowdown";
inline constexpr const char* kPowerCapped = "PowerCapped";
inline constexpr const char* kNvlinkCrcErrors = "NvlinkCrcErrors";
inline constexpr const char* kFailingJobs = "FailingJobs";

// NVML's clock throttle (since R535: "clocks event") reason bits that say a GPU is held back by
// power or heat rather than by idleness or an application's clock setting.
inline constexpr uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr uint64_t kThrottleSwThermal = 0x20;
inline constexpr uint64_t kThrottleHwThermal = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrake = 0x80;

// The Policy's `gpuWarnings`: when a reading becomes a warning.
struct GpuWarningPolicy {
  // A GPU warns this many degrees below the slowdown temperature NVML reports for it.
  double temperature_margin = 5;
  // The slowdown temperature taken for a GPU whose NVML reports none.
  double slowdown_temperature = 85;
  // Corrected (single-bit) ECC errors, and NVLink CRC errors, counted within `window` seconds.
  int64_t ecc_corrected = 100;
  int64_t nvlink_crc_errors = 10;
  double window = 3600;
  bool operator==(const GpuWarningPolicy&) const = default;
};
GpuWarningPolicy GpuWarningPolicyOf(const Json& policy_spec);

// The Policy's `failingNodes`: a node whose jobs fail, for causes that point at the node, in
// `min_projects` projects or more, `min_failures` times or more within `window`, is flagged;
// with `cordon` it is also cordoned (when the flag rises).
struct FailingNodePolicy {
  double window = 3600;
  int64_t min_failures = 5;
  int64_t min_projects = 3;
  bool cordon = false;
  bool operator==(const FailingNodePolicy&) const = default;
};
FailingNodePolicy FailingNodePolicyOf(const Json& policy_spec);

// One condition that holds on a node now.
struct NodeCondition {
  std::string type;  // kEccCorrectedRate, ...
  int32_t gpu = -1;  // -1: the node's own
  std::string message;
  double since = 0;  // when it was first seen to hold, this time
  double value = 0;  // the figure compared (°C, a count in the window, a throttle reason mask)
};
Json ToJson(const NodeCondition& c);  // {type, severity: warning, gpu?, message, since, value}
std::vector<Json> ToJson(const std::vector<NodeCondition>& conditions);

// What a GPU reads, as far as warnings go (absent: the GPU does not say).
struct GpuReading {
  int32_t index = 0;
  double temperature_c = 0;
  std::optional<double> slowdown_temperature_c;
  std::optional<uint64_t> throttle_reasons;
  std::optional<int64_t> ecc_corrected;      // a counter since the driver loaded
  std::optional<int64_t> nvlink_crc_errors;  // a counter, summed over the GPU's links
};

// A node's GPU warnings over time: the counters' samples within the window, and since when each
// condition holds. Not thread-safe; its owner (the node service) keeps one per node.
class GpuWarningTracker {
 public:
  // Takes a heartbeat's readings at `now` and returns the conditions that hold.
  std::vector<NodeCondition> Observe(const std::vector<GpuReading>& readings,
                                     const GpuWarningPolicy& policy, double now);
  const std::vector<NodeCondition>& current() const { return current_; }

 private:
  // The increase of one counter over the window; a counter that went down (a driver reload)
  // starts again from its new value.
  int64_t Increase(const std::string& key, int64_t value, double window, double now);

  std::map<std::string, std::deque<std::pair<double, int64_t>>> samples_;
  std::map<std::string, double> since_;  // "type/gpu" -> first seen holding
  std::vector<NodeCondition> current_;
};

// Whether a failure of this cause says something about the node it ran on, rather than about
// the job itself: GPU faults, a lost node or lease, a task that could not be started, NCCL.
bool PointsAtNode(FailureCause cause);

// A failed run on a node, for a cause that points at the node.
struct NodeFailure {
  double at = 0;
  int64_t job = 0;
  int64_t generation = 0;
  std::string project;
  FailureCause cause = FailureCause::kNone;
};
// Records `f` (once per job and generation) and forgets failures older than the window.
// Returns whether it was new.
bool RecordNodeFailure(std::vector<NodeFailure>* failures, const NodeFailure& f,
                       const FailingNodePolicy& policy, double now);
struct FailingVerdict {
  int64_t failures = 0;  // within the window
  int64_t projects = 0;  // distinct projects among them
  bool flagged = false;
};
FailingVerdict AssessNode(const std::vector<NodeFailure>& failures, const FailingNodePolicy& policy,
                          double now);

// The warnings fault injection makes simulated GPUs show (POST .../gpus/{index}/faults
// {warning}): "ecc-corrected", "temperature", "power-cap", "nvlink-crc", or "clear".
bool KnownWarningInjection(const std::string& name);
inline constexpr const char* kWarningInjections =
    "ecc-corrected, temperature, power-cap, nvlink-crc, clear";

}  // namespace meridian::domain
