#include "domain/gpu_warnings.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace meridian::domain {

namespace {

std::string Figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string WindowHours(double seconds) { return Figure(seconds / 3600) + " h"; }

// What the power and heat bits of a throttle reason mask say, in words.
std::string ThrottleWords(uint64_t mask) {
  std::string out;
  auto add = [&](uint64_t bit, const char* words) {
    if (mask & bit) out += (out.empty() ? "" : ", ") + std::string(words);
  };
  add(kThrottleSwPowerCap, "software power cap");
  add(kThrottleHwSlowdown, "hardware slowdown");
  add(kThrottleHwPowerBrake, "hardware power brake");
  add(kThrottleSwThermal, "software thermal slowdown");
  add(kThrottleHwThermal, "hardware thermal slowdown");
  return out;
}

const Json* Section(const Json& spec, const char* name) {
  if (!spec.is_object()) return nullptr;
  auto s = spec.find(name);
  return s != spec.end() && s->is_object() ? &*s : nullptr;
}

}  // namespace

GpuWarningPolicy GpuWarningPolicyOf(const Json& policy_spec) {
  GpuWarningPolicy p;
  const Json* w = Section(policy_spec, "gpuWarnings");
  if (!w) return p;
  p.temperature_margin = w->value("temperatureMargin", p.temperature_margin);
  p.slowdown_temperature = w->value("slowdownTemperature", p.slowdown_temperature);
  p.ecc_corrected = w->value("eccCorrected", p.ecc_corrected);
  p.nvlink_crc_errors = w->value("nvlinkCrcErrors", p.nvlink_crc_errors);
  p.window = w->value("window", p.window);
  return p;
}

FailingNodePolicy FailingNodePolicyOf(const Json& policy_spec) {
  FailingNodePolicy p;
  const Json* f = Section(policy_spec, "failingNodes");
  if (!f) return p;
  p.window = f->value("window", p.window);
  p.min_failures = f->value("minFailures", p.min_failures);
  p.min_projects = f->value("minProjects", p.min_projects);
  p.cordon = f->value("cordon", p.cordon);
  return p;
}

Json ToJson(const NodeCondition& c) {
  Json j = {{"type", c.type},
            {"severity", "warning"},
            {"message", c.message},
            {"since", c.since},
            {"value", c.value}};
  if (c.gpu >= 0) j["gpu"] = c.gpu;
  return j;
}

std::vector<Json> ToJson(const std::vector<NodeCondition>& conditions) {
  std::vector<Json> out;
  for (const NodeCondition& c : conditions) out.push_back(ToJson(c));
  return out;
}

int64_t GpuWarningTracker::Increase(const std::string& key, int64_t value, double window,
                                    double now) {
  auto& s = samples_[key];
  // A counter that went down was reset (the driver reloaded): it counts from its new value.
  if (!s.empty() && value < s.back().second) s.clear();
  s.push_back({now, value});
  // Keep one sample at or before the window's start, so that the increase covers the window.
  while (s.size() > 2 && s[1].first <= now - window) s.pop_front();
  return value - s.front().second;
}

std::vector<NodeCondition> GpuWarningTracker::Observe(const std::vector<GpuReading>& readings,
                                                      const GpuWarningPolicy& policy, double now) {
  std::vector<NodeCondition> found;
  for (const GpuReading& r : readings) {
    const std::string gpu = "GPU " + std::to_string(r.index);
    const uint64_t throttle = r.throttle_reasons.value_or(0);
    const double slowdown = r.slowdown_temperature_c.value_or(policy.slowdown_temperature);
    const uint64_t thermal = throttle & (kThrottleSwThermal | kThrottleHwThermal);
    if (r.temperature_c >= slowdown - policy.temperature_margin || thermal) {
      found.push_back({kTemperatureNearSlowdown, r.index,
                       gpu + " at " + Figure(r.temperature_c) + " °C, " +
                           (thermal ? "held back by " + ThrottleWords(thermal)
                                    : "within " + Figure(policy.temperature_margin) + " °C of") +
                           " its slowdown temperature (" + Figure(slowdown) + " °C" +
                           (r.slowdown_temperature_c ? "" : ", the Policy's: NVML reports none") +
                           ")",
                       0, r.temperature_c});
    }
    const uint64_t power =
        throttle & (kThrottleSwPowerCap | kThrottleHwSlowdown | kThrottleHwPowerBrake);
    if (power) {
      found.push_back({kPowerCapped, r.index,
                       gpu + " clocks held back by " + ThrottleWords(power) +
                           " (throttle reasons " + Hex(throttle) + ")",
                       0, static_cast<double>(throttle)});
    }
    if (r.ecc_corrected) {
      const int64_t n =
          Increase("ecc/" + std::to_string(r.index), *r.ecc_corrected, policy.window, now);
      if (n >= policy.ecc_corrected) {
        found.push_back({kEccCorrectedRate, r.index,
                         gpu + ": " + std::to_string(n) + " corrected ECC errors in the last " +
                             WindowHours(policy.window) + " (warns at " +
                             std::to_string(policy.ecc_corrected) + "): its memory may be failing",
                         0, static_cast<double>(n)});
      }
    }
    if (r.nvlink_crc_errors) {
      const int64_t n =
          Increase("crc/" + std::to_string(r.index), *r.nvlink_crc_errors, policy.window, now);
      if (n >= policy.nvlink_crc_errors) {
        found.push_back({kNvlinkCrcErrors, r.index,
                         gpu + ": " + std::to_string(n) + " NVLink CRC errors in the last " +
                             WindowHours(policy.window) + " (warns at " +
                             std::to_string(policy.nvlink_crc_errors) + ")",
                         0, static_cast<double>(n)});
      }
    }
  }
  std::map<std::string, double> since;
  for (NodeCondition& c : found) {
    const std::string key = c.type + "/" + std::to_string(c.gpu);
    auto was = since_.find(key);
    c.since = was != since_.end() ? was->second : now;
    since[key] = c.since;
  }
  since_ = std::move(since);
  current_ = found;
  return found;
}

bool PointsAtNode(FailureCause cause) {
  switch (cause) {
    case FailureCause::kGpuFault:
    case FailureCause::kNodeLost:
    case FailureCause::kLeaseLost:
    case FailureCause::kNotStarted:
    case FailureCause::kNcclError:
      return true;
    default:
      return false;
  }
}

bool RecordNodeFailure(std::vector<NodeFailure>* failures, const NodeFailure& f,
                       const FailingNodePolicy& policy, double now) {
  std::erase_if(*failures, [&](const NodeFailure& old) { return old.at <= now - policy.window; });
  for (const NodeFailure& old : *failures) {
    if (old.job == f.job && old.generation == f.generation) return false;
  }
  failures->push_back(f);
  return true;
}

FailingVerdict AssessNode(const std::vector<NodeFailure>& failures, const FailingNodePolicy& policy,
                          double now) {
  FailingVerdict v;
  std::set<std::string> projects;
  for (const NodeFailure& f : failures) {
    if (f.at <= now - policy.window) continue;
    ++v.failures;
    projects.insert(f.project);
  }
  v.projects = static_cast<int64_t>(projects.size());
  v.flagged = v.failures >= policy.min_failures && v.projects >= policy.min_projects;
  return v;
}

bool KnownWarningInjection(const std::string& name) {
  for (const char* k : {"ecc-corrected", "temperature", "power-cap", "nvlink-crc", "clear"}) {
    if (name == k) return true;
  }
  return false;
}

}  // namespace meridian::domain
