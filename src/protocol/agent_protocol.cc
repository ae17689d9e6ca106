#include "protocol/agent_protocol.h"

#include <algorithm>
#include <limits>

#include "domain/spec.h"

namespace meridian::protocol {

using base::Status;
using domain::FieldReader;

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kMaxSeconds = 365.0 * 24 * 3600;

Json StringMap(const std::map<std::string, std::string>& m) {
  Json out = Json::object();
  for (const auto& [k, v] : m) out[k] = v;
  return out;
}

// Reads one message with a lenient FieldReader: `read` fills `out`; the first errors come back
// as one status naming their fields.
template <typename T, typename Read>
base::Result<T> Decode(const Json& j, const std::string& what, Read read) {
  if (!j.is_object()) return Status::Invalid(what + ": must be a JSON object");
  static const domain::SourceDoc kNoPositions{Json(), "", {}};
  domain::ErrorList errors;
  Json canonical;
  FieldReader r(kNoPositions, j, "", &errors, &canonical);
  r.IgnoreUnknown();
  T out;
  read(r, out);
  if (!errors.empty()) return Status::Invalid(what + ": " + errors.ToString());
  return out;
}

// Absent (or null) reads as none; the readers ignore unknown fields, so nothing need be marked.
std::optional<double> OptionalNumber(FieldReader& r, const char* key, double min, double max) {
  if (!r.Has(key)) return std::nullopt;
  return r.Number(key, min, max, 0);
}

std::optional<int64_t> OptionalInt(FieldReader& r, const char* key, int64_t min, int64_t max) {
  if (!r.Has(key)) return std::nullopt;
  return r.Int(key, min, max, 0);
}

void ReadTerms(FieldReader& r, AgentTerms& t) {
  const AgentTerms d;
  t.heartbeat_interval = r.Number("heartbeatInterval", 0.001, 3600, d.heartbeat_interval);
  t.lease = r.Number("lease", 0.001, kMaxSeconds, d.lease);
  t.fence_grace = OptionalNumber(r, "fenceGrace", 0, kMaxSeconds);
}

void WriteTerms(const AgentTerms& t, Json* out) {
  (*out)["heartbeatInterval"] = t.heartbeat_interval;
  (*out)["lease"] = t.lease;
  if (t.fence_grace) (*out)["fenceGrace"] = *t.fence_grace;
}

void ReadDevice(FieldReader& r, DeviceGrant& d) {
  const DeviceGrant def;
  d.gpu = static_cast<int32_t>(r.Int("gpu", 0, 1023, 0, true));
  d.uuid = r.String("uuid", false);
  d.milli = static_cast<int32_t>(r.Int("milli", 0, 1000, def.milli));
  d.memory_mib = r.Int("memoryMib", 0, int64_t{1} << 30, 0);
  d.disable_mig = r.Enum("change", {"none", "disable-mig"}, "none") == "disable-mig";
  if (r.Has("sharing")) d.sharing = r.Enum("sharing", {"mps", "time-slicing"}, "mps");
  if (!r.Has("mig")) return;
  Json ignored;
  FieldReader m = r.Object("mig", &ignored);
  MigGrant g;
  g.profile = m.String("profile", true);
  g.start = static_cast<int32_t>(m.Int("start", 0, 64, 0));
  g.change = m.Enum("change", {"none", "create-instance", "repartition", "enable-mig"}, "none");
  d.mig = g;
}

void ReadDevices(FieldReader& r, std::vector<DeviceGrant>& out) {
  r.ObjectList("devices", [&](FieldReader& item) {
    DeviceGrant d;
    ReadDevice(item, d);
    out.push_back(std::move(d));
  });
}

void ReadRun(FieldReader& r, TaskRun& run) {
  const TaskRun d;
  run.command = r.StringList("command");
  run.env = r.StringMap("env");
  run.image = r.String("image", false);
  run.working_dir = r.String("workingDir", false);
  run.grace_period = r.Number("gracePeriod", 0, 3600, d.grace_period);
  run.notice_signal = r.String("noticeSignal", false, d.notice_signal);
  run.restart.on_failure =
      r.Enum("restartPolicy", {"never", "on-failure"}, "never") == "on-failure";
  run.restart.max_restarts = r.Int("maxRestarts", 0, 1000000, d.restart.max_restarts);
  run.cpu_milli = r.Int("cpuMilli", 0, int64_t{1} << 40, d.cpu_milli);
  run.memory_mib = r.Int("memoryMib", 0, int64_t{1} << 40, d.memory_mib);
  run.simulate_utilization = r.Number("simulateUtilization", 0, 1, d.simulate_utilization);
  run.runtime_limit = r.Number("runtimeLimit", 0, kMaxSeconds, d.runtime_limit);
}

void ReadAssignment(FieldReader& r, Assignment& a) {
  a.job = r.Int("job", 1, kMaxInt, 0, true);
  a.task = static_cast<int32_t>(r.Int("task", 0, 100000, 0));
  a.generation = r.Int("generation", 0, kMaxInt, 0);
  a.name = r.String("name", false);
  a.project = r.String("project", false);
  a.user = r.String("user", false);
  a.stop = r.Bool("stop", false);
  a.stop_reason = r.String("stopReason", false);
  a.stop_within = OptionalNumber(r, "stopWithin", 0, kMaxSeconds);
  ReadDevices(r, a.devices);
  a.world_size = static_cast<int32_t>(r.Int("worldSize", 1, 100000, 1));
  a.master_addr = r.String("masterAddr", false);
  a.array_id = r.Int("arrayId", 0, kMaxInt, 0);
  a.array_index = r.Int("arrayIndex", -1, kMaxInt, -1);
  ReadRun(r, a.run);
  r.ObjectList("data", [&](FieldReader& m) {
    DataMount d;
    d.name = m.String("name", true);
    d.path = m.String("path", true);
    d.stage_from = m.String("stageFrom", false);
    d.staging_command = m.StringList("stagingCommand");
    d.size_gib = m.Number("sizeGib", 0, 1e12, 0);
    d.evict = m.StringList("evict");
    a.data.push_back(std::move(d));
  });
  a.checkpoint_dir = r.String("checkpointDir", false);
}

void ReadStagingProgress(FieldReader& r, StagingProgress& p) {
  p.dataset = r.String("dataset", true);
  p.state = r.Enum("state", {"copying", "staged", "cached", "failed"}, "copying");
  p.done_bytes = r.Int("doneBytes", 0, kMaxInt, 0);
  p.total_bytes = r.Int("totalBytes", 0, kMaxInt, 0);
  p.attempt = static_cast<int32_t>(r.Int("attempt", 0, 1000, 0));
  p.seconds = r.Number("seconds", 0, kMaxSeconds, 0);
  p.error = r.String("error", false);
  p.evicted = r.StringList("evicted");
}

void ReadTaskReport(FieldReader& r, TaskReport& t) {
  t.job = r.Int("job", 1, kMaxInt, 0, true);
  domain::TaskReport& s = t.report;
  s.task = static_cast<int32_t>(r.Int("task", 0, 100000, 0));
  s.generation = r.Int("generation", 0, kMaxInt, 0);
  const std::string state = r.String("state", true);
  if (state == "Running") {
    s.state = domain::TaskStatus::State::kRunning;
  } else if (state == "Exited") {
    s.state = domain::TaskStatus::State::kExited;
  } else if (r.Has("state")) {
    r.Error("state", "must be Running or Exited");
  }
  s.restarts = r.Int("restarts", 0, 1000000, 0);
  s.message = r.String("message", false);
  s.refused = s.state == domain::TaskStatus::State::kExited && r.Bool("refused", false);
  s.exit_code = OptionalInt(r, "exitCode", std::numeric_limits<int64_t>::min(), kMaxInt);
  // A cause this version does not know reads as a plain exit (its message still says why).
  const std::string cause = r.String("cause", false);
  s.cause = domain::ParseCause(cause).value_or(cause.empty() ? domain::FailureCause::kNone
                                                             : domain::FailureCause::kExitCode);
  r.ObjectList("staging", [&](FieldReader& item) {
    StagingProgress p;
    ReadStagingProgress(item, p);
    t.staging.push_back(std::move(p));
  });
  if (r.Has("sharing")) {
    Json ignored;
    FieldReader s = r.Object("sharing", &ignored);
    SharingNote n;
    n.gpu = static_cast<int32_t>(s.Int("gpu", 0, 1023, 0));
    n.mode = s.Enum("mode", {"mps", "time-slicing"}, "mps");
    n.why = s.String("why", false);
    t.sharing = std::move(n);
  }
}

void ReadGpuSample(FieldReader& r, GpuSample& g) {
  constexpr int64_t kMaxMib = int64_t{1} << 30;
  g.index = static_cast<int32_t>(r.Int("index", 0, 1023, 0, true));
  g.utilization = r.Number("utilization", 0, 1, 0);
  g.memory_used_mib = r.Int("memoryUsedMib", 0, kMaxMib, 0);
  g.memory_total_mib = OptionalInt(r, "memoryTotalMib", 0, kMaxMib);
  g.temperature_c = r.Number("temperatureC", -273, 1000, 0);
  g.power_w = r.Number("powerW", 0, 1e6, 0);
  g.sm_clock_mhz = OptionalInt(r, "smClockMhz", 0, 1000000);
  g.ecc_single_bit = OptionalInt(r, "eccSingleBit", 0, kMaxInt);
  g.ecc_double_bit = OptionalInt(r, "eccErrors", 0, kMaxInt);
  g.retired_pages_single_bit = OptionalInt(r, "retiredPagesSingleBit", 0, kMaxInt);
  g.retired_pages_double_bit = OptionalInt(r, "retiredPagesDoubleBit", 0, kMaxInt);
  g.remapped_rows_correctable = OptionalInt(r, "remappedRowsCorrectable", 0, kMaxInt);
  g.remapped_rows_uncorrectable = OptionalInt(r, "remappedRowsUncorrectable", 0, kMaxInt);
  if (r.Has("rowRemapPending")) g.row_remap_pending = r.Bool("rowRemapPending", false);
  if (r.Has("rowRemapFailed")) g.row_remap_failed = r.Bool("rowRemapFailed", false);
  if (r.Has("migModePending")) g.mig_mode_pending = r.Bool("migModePending", false);
  g.xid_errors = r.Int("xidErrors", 0, kMaxInt, 0);
  g.last_xid = static_cast<int32_t>(r.Int("lastXid", 0, 1000000, 0));
  if (r.Has("slowdownTemperatureC")) {
    g.slowdown_temperature_c = r.Number("slowdownTemperatureC", -273, 1000, 0);
  }
  g.throttle_reasons = OptionalInt(r, "throttleReasons", 0, kMaxInt);
  g.nvlink_crc_errors = OptionalInt(r, "nvlinkCrcErrors", 0, kMaxInt);
  g.mig_instances = r.StringList("migInstances");
}

}  // namespace

TaskRun TaskRun::Of(const domain::JobSpec& spec) {
  TaskRun r;
  r.command = spec.command;
  r.env = spec.env;
  r.image = spec.image;
  r.working_dir = spec.working_dir;
  r.grace_period = spec.grace_period;
  r.notice_signal = spec.notice_signal;
  r.restart = spec.restart;
  r.cpu_milli = spec.cpu_milli;
  r.memory_mib = spec.memory_mib;
  r.simulate_utilization = spec.simulate_utilization;
  r.runtime_limit = spec.runtime_limit;
  return r;
}

// --- encoders --------------------------------------------------------------------------------

Json ToJson(const Registration& r) {
  Json gpus = Json::array();
  for (const GpuInventory& g : r.gpus) {
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model},
                    {"memoryMib", g.memory_mib},
                    {"nvlinkDomain", g.nvlink_domain},
                    {"migCapable", g.mig_capable},
                    {"migEnabled", g.mig_enabled},
                    {"healthy", g.healthy}});
    if (!g.unmanaged.empty()) gpus.back()["unmanaged"] = g.unmanaged;
  }
  Json out = {{"node", r.node},           {"cluster", r.cluster},
              {"pool", r.pool},           {"rack", r.rack},
              {"address", r.address},     {"labels", StringMap(r.labels)},
              {"cpuMilli", r.cpu_milli},  {"memoryMib", r.memory_mib},
              {"simulated", r.simulated}, {"agentVersion", r.agent_version},
              {"gpus", std::move(gpus)},  {"unavailable", r.unavailable}};
  if (r.unmanaged_cpu_milli > 0) out["unmanagedCpuMilli"] = r.unmanaged_cpu_milli;
  if (r.unmanaged_memory_mib > 0) out["unmanagedMemoryMib"] = r.unmanaged_memory_mib;
  return out;
}

Json ToJson(const RegistrationAnswer& a) {
  Json out = {{"node", a.node}};
  if (!a.credential.empty()) out["credential"] = a.credential;
  WriteTerms(a.terms, &out);
  return out;
}

Json ToJson(const DeviceGrant& d) {
  Json out = {{"gpu", d.gpu}, {"uuid", d.uuid}, {"milli", d.milli}};
  if (d.memory_mib > 0) out["memoryMib"] = d.memory_mib;
  if (d.disable_mig) out["change"] = "disable-mig";
  if (!d.sharing.empty()) out["sharing"] = d.sharing;
  if (d.mig) {
    out["mig"] = {{"profile", d.mig->profile}, {"start", d.mig->start}, {"change", d.mig->change}};
  }
  return out;
}

Json ToJson(const Assignment& a) {
  Json devices = Json::array();
  for (const DeviceGrant& d : a.devices) devices.push_back(ToJson(d));
  const TaskRun& r = a.run;
  Json out = {{"job", a.job},
              {"task", a.task},
              {"generation", a.generation},
              {"name", a.name},
              {"project", a.project},
              {"user", a.user},
              {"stop", a.stop},
              {"stopReason", a.stop_reason},
              {"devices", std::move(devices)},
              {"worldSize", a.world_size},
              {"masterAddr", a.master_addr},
              {"arrayId", a.array_id},
              {"arrayIndex", a.array_index},
              {"command", r.command},
              {"env", StringMap(r.env)},
              {"image", r.image},
              {"workingDir", r.working_dir},
              {"gracePeriod", r.grace_period},
              {"noticeSignal", r.notice_signal},
              {"restartPolicy", r.restart.on_failure ? "on-failure" : "never"},
              {"maxRestarts", r.restart.max_restarts},
              {"cpuMilli", r.cpu_milli},
              {"memoryMib", r.memory_mib},
              {"simulateUtilization", r.simulate_utilization},
              {"runtimeLimit", r.runtime_limit}};
  if (a.stop_within) out["stopWithin"] = *a.stop_within;
  if (!a.data.empty()) {
    Json data = Json::array();
    for (const DataMount& d : a.data) {
      data.push_back({{"name", d.name},
                      {"path", d.path},
                      {"stageFrom", d.stage_from},
                      {"stagingCommand", d.staging_command},
                      {"sizeGib", d.size_gib},
                      {"evict", d.evict}});
    }
    out["data"] = std::move(data);
  }
  if (!a.checkpoint_dir.empty()) out["checkpointDir"] = a.checkpoint_dir;
  return out;
}

Json ToJson(const TaskReport& t) {
  const domain::TaskReport& r = t.report;
  const bool exited = r.state == domain::TaskStatus::State::kExited;
  Json out = {{"job", t.job},
              {"task", r.task},
              {"generation", r.generation},
              {"state", exited ? "Exited" : "Running"},
              {"restarts", r.restarts}};
  if (exited) out["exitCode"] = r.exit_code ? Json(*r.exit_code) : Json();
  if (!r.message.empty()) out["message"] = r.message;
  if (r.cause != domain::FailureCause::kNone) out["cause"] = domain::CauseName(r.cause);
  if (exited && r.refused) out["refused"] = true;
  if (!t.staging.empty()) {
    Json staging = Json::array();
    for (const StagingProgress& p : t.staging) staging.push_back(ToJson(p));
    out["staging"] = std::move(staging);
  }
  if (t.sharing) {
    out["sharing"] = {{"gpu", t.sharing->gpu}, {"mode", t.sharing->mode}};
    if (!t.sharing->why.empty()) out["sharing"]["why"] = t.sharing->why;
  }
  return out;
}

Json ToJson(const StagingProgress& p) {
  Json out = {{"dataset", p.dataset},        {"state", p.state},     {"doneBytes", p.done_bytes},
              {"totalBytes", p.total_bytes}, {"attempt", p.attempt}, {"seconds", p.seconds}};
  if (!p.error.empty()) out["error"] = p.error;
  if (!p.evicted.empty()) out["evicted"] = p.evicted;
  return out;
}

Json ToJson(const GpuSample& g) {
  Json out = {{"index", g.index},
              {"utilization", g.utilization},
              {"memoryUsedMib", g.memory_used_mib},
              {"temperatureC", g.temperature_c},
              {"powerW", g.power_w},
              {"xidErrors", g.xid_errors},
              {"lastXid", g.last_xid}};
  auto optional = [&](const char* key, const auto& v) {
    if (v) out[key] = *v;
  };
  optional("memoryTotalMib", g.memory_total_mib);
  optional("smClockMhz", g.sm_clock_mhz);
  optional("eccSingleBit", g.ecc_single_bit);
  optional("eccErrors", g.ecc_double_bit);
  optional("retiredPagesSingleBit", g.retired_pages_single_bit);
  optional("retiredPagesDoubleBit", g.retired_pages_double_bit);
  optional("remappedRowsCorrectable", g.remapped_rows_correctable);
  optional("remappedRowsUncorrectable", g.remapped_rows_uncorrectable);
  optional("rowRemapPending", g.row_remap_pending);
  optional("rowRemapFailed", g.row_remap_failed);
  optional("migModePending", g.mig_mode_pending);
  optional("slowdownTemperatureC", g.slowdown_temperature_c);
  optional("throttleReasons", g.throttle_reasons);
  optional("nvlinkCrcErrors", g.nvlink_crc_errors);
  if (!g.mig_instances.empty()) out["migInstances"] = g.mig_instances;
  return out;
}

Json ToJson(const Heartbeat& h) {
  Json telemetry = Json::array();
  for (const GpuSample& g : h.telemetry) telemetry.push_back(ToJson(g));
  Json tasks = Json::array();
  for (const TaskReport& t : h.tasks) tasks.push_back(ToJson(t));
  Json out = {{"telemetry", std::move(telemetry)}, {"tasks", std::move(tasks)}};
  if (!h.remediations.empty()) {
    Json results = Json::array();
    for (const RemediationResult& r : h.remediations) {
      results.push_back({{"gpu", r.gpu}, {"healthy", r.healthy}, {"message", r.message}});
    }
    out["remediations"] = std::move(results);
  }
  if (!h.notices.empty()) {
    Json notices = Json::array();
    for (const NodeNotice& n : h.notices) {
      notices.push_back({{"reason", n.reason}, {"message", n.message}});
    }
    out["notices"] = std::move(notices);
  }
  return out;
}

Json ToJson(const HeartbeatAnswer& a) {
  Json tasks = Json::array();
  for (const Assignment& t : a.tasks) tasks.push_back(ToJson(t));
  Json out = {{"tasks", std::move(tasks)}};
  WriteTerms(a.terms, &out);
  if (!a.faults.empty()) {
    Json faults = Json::array();
    for (const InjectedFault& f : a.faults) {
      Json fault = {{"gpu", f.gpu}};
      if (f.warning.empty()) {
        fault["xid"] = f.xid;
      } else {
        fault["warning"] = f.warning;
      }
      faults.push_back(std::move(fault));
    }
    out["faults"] = std::move(faults);
  }
  if (!a.remediations.empty()) {
    Json orders = Json::array();
    for (const Remediation& r : a.remediations) {
      orders.push_back({{"gpu", r.gpu}, {"command", r.command}});
    }
    out["remediations"] = std::move(orders);
  }
  return out;
}

Json ToJson(const ShimSpec& s) {
  Json out = {{"argv", s.argv},
              {"env", StringMap(s.env)},
              {"cwd", s.cwd},
              {"output", s.output},
              {"grace", s.grace},
              {"noticeSignal", s.notice_signal},
              {"noticeFile", s.notice_file},
              {"leaseFile", s.lease_file},
              {"lease", s.lease},
              {"runtimeLimit", s.runtime_limit},
              {"cgroupProcs", s.cgroup_procs},
              {"cleanup", s.cleanup},
              {"hideDevices", s.hide_devices}};
  if (!s.stages.empty()) {
    Json stages = Json::array();
    for (const ShimSpec::Stage& st : s.stages) {
      stages.push_back({{"dataset", st.dataset},
                        {"argv", st.argv},
                        {"source", st.source},
                        {"target", st.target},
                        {"evict", st.evict},
                        {"bytes", st.bytes}});
    }
    out["stages"] = std::move(stages);
  }
  for (const auto& [key, list] :
       {std::pair{"readOnly", &s.read_only}, std::pair{"readWrite", &s.read_write}}) {
    if (list->empty()) continue;
    Json binds = Json::array();
    for (const auto& [source, target] : *list) {
      binds.push_back({{"source", source}, {"target", target}});
    }
    out[key] = std::move(binds);
  }
  if (!s.devices_dir.empty()) {
    out["devicesDir"] = s.devices_dir;
    Json devices = Json::array();
    for (const ShimSpec::Device& d : s.devices) {
      devices.push_back(
          {{"name", d.name}, {"major", d.major}, {"minor", d.minor}, {"mode", d.mode}});
    }
    out["devices"] = std::move(devices);
  }
  if (!s.owned.empty()) out["owned"] = s.owned;
  if (s.owner > 0) out["owner"] = s.owner;
  if (s.fence_grace) out["fenceGrace"] = *s.fence_grace;
  if (s.uid) out["uid"] = *s.uid;
  if (s.gid) out["gid"] = *s.gid;
  return out;
}

Json ToJson(const ShimStop& s) {
  Json out = {{"reason", s.reason}};
  if (s.within) out["within"] = *s.within;
  return out;
}

Json ToJson(const ShimStarted& s) {
  return {{"pid", s.pid}, {"startedAt", s.started_at}, {"cgroupError", s.cgroup_error}};
}

Json ToJson(const ShimExit& e) {
  Json out = {{"startedAt", e.started_at}, {"finishedAt", e.finished_at}};
  out["exitCode"] = e.exit_code ? Json(*e.exit_code) : Json();
  if (e.signal) out["signal"] = *e.signal;
  if (!e.reason.empty()) out["reason"] = e.reason;
  if (!e.staging_error.empty()) out["stagingError"] = e.staging_error;
  return out;
}

Json ToJson(const LeaseTerms& l) {
  Json out = {{"lease", l.lease}};
  if (l.fence_grace) out["fenceGrace"] = *l.fence_grace;
  return out;
}

// --- decoders --------------------------------------------------------------------------------

base::Result<Registration> DecodeRegistration(const Json& j) {
  return Decode<Registration>(j, "registration", [](FieldReader& r, Registration& out) {
    const Registration d;
    out.node = r.String("node", true);
    out.cluster = r.String("cluster", true);
    out.pool = r.String("pool", false);
    out.rack = r.String("rack", false);
    out.address = r.String("address", false);
    out.labels = r.StringMap("labels");
    out.cpu_milli = r.Int("cpuMilli", 1, int64_t{1} << 40, d.cpu_milli);
    out.memory_mib = r.Int("memoryMib", 1, int64_t{1} << 40, d.memory_mib);
    out.unmanaged_cpu_milli = r.Int("unmanagedCpuMilli", 0, out.cpu_milli, 0);
    out.unmanaged_memory_mib = r.Int("unmanagedMemoryMib", 0, out.memory_mib, 0);
    out.simulated = r.Bool("simulated", false);
    out.agent_version = r.String("agentVersion", false);
    out.unavailable = r.String("unavailable", false);
    int32_t i = 0;
    r.ObjectList("gpus", [&](FieldReader& g) {
      GpuInventory gpu;
      gpu.index = static_cast<int32_t>(g.Int("index", 0, 1023, i++));
      gpu.uuid = g.String("uuid", true);
      gpu.model = g.String("model", true);
      gpu.memory_mib = g.Int("memoryMib", 0, int64_t{1} << 30, 0);
      gpu.nvlink_domain = static_cast<int32_t>(g.Int("nvlinkDomain", 0, 1023, 0));
      gpu.mig_capable = g.Bool("migCapable", false);
      gpu.mig_enabled = g.Bool("migEnabled", false);
      gpu.healthy = g.Bool("healthy", true);
      gpu.unmanaged = g.String("unmanaged", false);
      out.gpus.push_back(std::move(gpu));
    });
  });
}

base::Result<RegistrationAnswer> DecodeRegistrationAnswer(const Json& j) {
  return Decode<RegistrationAnswer>(j, "registration answer",
                                    [](FieldReader& r, RegistrationAnswer& out) {
                                      out.node = r.String("node", false);
                                      out.credential = r.String("credential", false);
                                      ReadTerms(r, out.terms);
                                    });
}

base::Result<AgentTerms> DecodeTerms(const Json& answer) {
  return Decode<AgentTerms>(answer, "answer",
                            [](FieldReader& r, AgentTerms& out) { ReadTerms(r, out); });
}

base::Result<std::vector<DeviceGrant>> DecodeDevices(const Json& devices) {
  return Decode<std::vector<DeviceGrant>>(
      Json{{"devices", devices}}, "allocation",
      [](FieldReader& r, std::vector<DeviceGrant>& out) { ReadDevices(r, out); });
}

base::Result<Assignment> DecodeAssignment(const Json& j) {
  return Decode<Assignment>(j, "assignment", ReadAssignment);
}

std::vector<DecodedAssignment> DecodeAssignments(const Json& answer) {
  std::vector<DecodedAssignment> out;
  if (!answer.is_object() || !answer.contains("tasks")) return out;
  const Json& tasks = answer.at("tasks");
  if (!tasks.is_array()) {
    out.push_back({Status::Invalid("answer: tasks: must be a list"), std::nullopt});
    return out;
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    DecodedAssignment d{
        Decode<Assignment>(tasks[i], "tasks[" + std::to_string(i) + "]", ReadAssignment),
        std::nullopt};
    const Json& t = tasks[i];
    if (d.assignment.ok()) {
      d.key = std::make_tuple(d.assignment->job, d.assignment->task, d.assignment->generation);
    } else if (t.is_object() && t.contains("job") && t.contains("task") &&
               t.contains("generation") && t.at("job").is_number_integer() &&
               t.at("task").is_number_integer() && t.at("generation").is_number_integer()) {
      d.key = std::make_tuple(t.at("job").get<int64_t>(), t.at("task").get<int32_t>(),
                              t.at("generation").get<int64_t>());
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string ChannelAnswer(int status, std::string_view body) {
  return std::to_string(status) + " " + std::string(body);
}

std::string ChannelRing(std::string_view body) { return "ring " + std::string(body); }

std::optional<ChannelMessage> DecodeChannelMessage(std::string_view m) {
  const size_t space = m.find(' ');
  const std::string_view head = m.substr(0, space);
  ChannelMessage out;
  out.body = space == std::string_view::npos ? "" : std::string(m.substr(space + 1));
  if (head == "ring") {
    out.ring = true;
    return out;
  }
  if (head.size() != 3 ||
      !std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  out.status = (head[0] - '0') * 100 + (head[1] - '0') * 10 + (head[2] - '0');
  if (out.status < 100) return std::nullopt;
  return out;
}

base::Result<Heartbeat> DecodeHeartbeat(const Json& j) {
  return Decode<Heartbeat>(j, "heartbeat", [](FieldReader& r, Heartbeat& out) {
    // Each sample alone: a GPU's bad figure must not cost the node its task reports.
    if (const Json* t = r.Array("telemetry", false)) {
      for (size_t i = 0; i < t->size(); ++i) {
        auto g = Decode<GpuSample>((*t)[i], "telemetry[" + std::to_string(i) + "]", ReadGpuSample);
        if (g.ok()) {
          out.telemetry.push_back(std::move(*g));
        } else {
          out.telemetry_errors.push_back(g.status().message());
        }
      }
    }
    r.ObjectList("tasks", [&](FieldReader& item) {
      TaskReport t;
      ReadTaskReport(item, t);
      out.tasks.push_back(std::move(t));
    });
    r.ObjectList("remediations", [&](FieldReader& item) {
      RemediationResult x;
      x.gpu = static_cast<int32_t>(item.Int("gpu", 0, 1023, 0, true));
      x.healthy = item.Bool("healthy", false);
      x.message = item.String("message", false);
      out.remediations.push_back(std::move(x));
    });
    r.ObjectList("notices", [&](FieldReader& item) {
      NodeNotice n;
      n.reason = item.String("reason", true);
      n.message = item.String("message", true);
      out.notices.push_back(std::move(n));
    });
  });
}

base::Result<HealthOrders> DecodeHealthOrders(const Json& answer) {
  return Decode<HealthOrders>(answer, "answer", [](FieldReader& r, HealthOrders& out) {
    r.ObjectList("faults", [&](FieldReader& item) {
      InjectedFault f;
      f.gpu = static_cast<int32_t>(item.Int("gpu", 0, 1023, 0, true));
      f.warning = item.String("warning", false);
      if (f.warning.empty()) f.xid = static_cast<int32_t>(item.Int("xid", 1, 999, 0, true));
      out.faults.push_back(f);
    });
    r.ObjectList("remediations", [&](FieldReader& item) {
      Remediation x;
      x.gpu = static_cast<int32_t>(item.Int("gpu", 0, 1023, 0, true));
      x.command = item.StringList("command");
      out.remediations.push_back(std::move(x));
    });
  });
}

base::Result<GpuSample> DecodeGpuSample(const Json& j) {
  return Decode<GpuSample>(j, "telemetry", ReadGpuSample);
}

base::Result<ShimSpec> DecodeShimSpec(const Json& j) {
  return Decode<ShimSpec>(j, "spec.json", [](FieldReader& r, ShimSpec& s) {
    const ShimSpec d;
    s.argv = r.StringList("argv");
    s.env = r.StringMap("env");
    s.cwd = r.String("cwd", false);
    s.output = r.String("output", false);
    s.grace = r.Number("grace", 0, 3600, d.grace);
    s.notice_signal = static_cast<int>(r.Int("noticeSignal", 0, 64, 0));
    s.notice_file = r.String("noticeFile", false);
    s.lease_file = r.String("leaseFile", false);
    s.lease = r.Number("lease", 0, kMaxSeconds, 0);
    s.fence_grace = OptionalNumber(r, "fenceGrace", 0, kMaxSeconds);
    s.runtime_limit = r.Number("runtimeLimit", 0, kMaxSeconds, 0);
    s.cgroup_procs = r.StringList("cgroupProcs");
    s.cleanup = r.StringList("cleanup");
    s.hide_devices = r.StringList("hideDevices");
    s.devices_dir = r.String("devicesDir", false);
    r.ObjectList("devices", [&](FieldReader& b) {
      ShimSpec::Device d;
      d.name = b.String("name", true);
      d.major = b.Int("major", 0, 4095, 0, true);
      d.minor = b.Int("minor", 0, (1 << 20) - 1, 0, true);
      d.mode = b.Int("mode", 0, 0777, 0444);
      s.devices.push_back(std::move(d));
    });
    r.ObjectList("readOnly", [&](FieldReader& b) {
      s.read_only.emplace_back(b.String("source", true), b.String("target", true));
    });
    r.ObjectList("readWrite", [&](FieldReader& b) {
      s.read_write.emplace_back(b.String("source", true), b.String("target", true));
    });
    s.owned = r.String("owned", false);
    s.owner = r.Int("owner", 0, std::numeric_limits<int32_t>::max() - 1, 0);
    r.ObjectList("stages", [&](FieldReader& b) {
      ShimSpec::Stage st;
      st.dataset = b.String("dataset", true);
      st.argv = b.StringList("argv");
      st.source = b.String("source", false);
      st.target = b.String("target", true);
      st.evict = b.StringList("evict");
      st.bytes = b.Int("bytes", 0, kMaxInt, 0);
      s.stages.push_back(std::move(st));
    });
    // Never root, and never an id that reads as -1 ("leave unchanged") to setresuid.
    s.uid = OptionalInt(r, "uid", 1, std::numeric_limits<int32_t>::max() - 1);
    s.gid = OptionalInt(r, "gid", 1, std::numeric_limits<int32_t>::max() - 1);
  });
}

base::Result<ShimStop> DecodeShimStop(const Json& j) {
  return Decode<ShimStop>(j, "stop", [](FieldReader& r, ShimStop& s) {
    s.reason = r.String("reason", false);
    s.within = OptionalNumber(r, "within", 0, kMaxSeconds);
  });
}

base::Result<ShimStarted> DecodeShimStarted(const Json& j) {
  return Decode<ShimStarted>(j, "started.json", [](FieldReader& r, ShimStarted& s) {
    s.pid = r.Int("pid", 1, 1 << 30, 0, true);
    s.started_at = r.Number("startedAt", 0, 1e12, 0);
    s.cgroup_error = r.String("cgroupError", false);
  });
}

base::Result<ShimExit> DecodeShimExit(const Json& j) {
  return Decode<ShimExit>(j, "exit.json", [](FieldReader& r, ShimExit& e) {
    e.exit_code = OptionalInt(r, "exitCode", std::numeric_limits<int64_t>::min(), kMaxInt);
    e.signal = OptionalInt(r, "signal", 0, 128);
    e.reason = r.String("reason", false);
    e.started_at = r.Number("startedAt", 0, 1e12, 0);
    e.finished_at = r.Number("finishedAt", 0, 1e12, 0);
    e.staging_error = r.String("stagingError", false);
  });
}

base::Result<StagingProgress> DecodeStagingProgress(const Json& j) {
  return Decode<StagingProgress>(j, "staging.json", ReadStagingProgress);
}

base::Result<LeaseTerms> DecodeLeaseTerms(const Json& j) {
  return Decode<LeaseTerms>(j, "lease", [](FieldReader& r, LeaseTerms& l) {
    l.lease = r.Number("lease", 0, kMaxSeconds, 0);
    l.fence_grace = OptionalNumber(r, "fenceGrace", 0, kMaxSeconds);
  });
}

std::string Frame(Channel channel, std::string_view data) {
  std::string out;
  out.reserve(data.size() + 1);
  out.push_back(static_cast<char>(channel));
  out.append(data);
  return out;
}

std::string EndFrame(const SessionEnd& end) { return Frame(Channel::kStatus, ToJson(end).dump()); }

std::string ErrorFrame(const std::string& error) {
  SessionEnd end;
  end.error = error;
  return EndFrame(end);
}

Json ToJson(const SessionOffer& o) {
  Json j = {{"id", o.id},     {"job", o.job}, {"task", o.task}, {"generation", o.generation},
            {"kind", o.kind}, {"tty", o.tty}};
  if (o.kind == "exec") j["command"] = o.command;
  if (o.port > 0) j["port"] = o.port;
  return j;
}

Json ToJson(const SessionEnd& e) {
  Json j = Json::object();
  if (e.exit_code) j["exitCode"] = *e.exit_code;
  if (e.signal) j["signal"] = *e.signal;
  if (!e.error.empty()) j["error"] = e.error;
  return j;
}

Json ToJson(const TerminalSize& t) { return {{"cols", t.cols}, {"rows", t.rows}}; }

Json ToJson(const ShimExec& e) {
  Json j = {{"argv", e.argv},
            {"env", StringMap(e.env)},
            {"cwd", e.cwd},
            {"cgroupProcs", e.cgroup_procs},
            {"namespacePid", e.namespace_pid},
            {"tty", e.tty}};
  if (e.uid) j["uid"] = *e.uid;
  if (e.gid) j["gid"] = *e.gid;
  return j;
}

std::vector<base::Result<SessionOffer>> DecodeSessionOffers(const Json& answer) {
  std::vector<base::Result<SessionOffer>> out;
  if (!answer.is_object() || !answer.contains("sessions") || !answer["sessions"].is_array()) {
    return out;
  }
  for (size_t i = 0; i < answer["sessions"].size(); ++i) {
    out.push_back(Decode<SessionOffer>(answer["sessions"][i], "sessions[" + std::to_string(i) + "]",
                                       [](FieldReader& r, SessionOffer& o) {
                                         o.id = r.String("id", true);
                                         o.job = r.Int("job", 1, kMaxInt, 0, true);
                                         o.task = static_cast<int32_t>(
                                             r.Int("task", 0, 100000, 0, true));
                                         o.generation = r.Int("generation", 0, kMaxInt, 0, true);
                                         o.kind = r.Enum("kind", {"exec", "port-forward"}, "exec");
                                         o.command = r.StringList("command");
                                         o.tty = r.Bool("tty", false);
                                         o.port = static_cast<int32_t>(r.Int("port", 0, 65535, 0));
                                         if (o.kind == "exec" && o.command.empty())
                                           r.Error("command", "is required for exec");
                                         if (o.kind == "port-forward" && o.port == 0)
                                           r.Error("port", "is required to forward");
                                       }));
  }
  return out;
}

base::Result<SessionEnd> DecodeSessionEnd(const Json& j) {
  return Decode<SessionEnd>(j, "status", [](FieldReader& r, SessionEnd& e) {
    e.exit_code = OptionalInt(r, "exitCode", std::numeric_limits<int64_t>::min(), kMaxInt);
    e.signal = OptionalInt(r, "signal", 0, 128);
    e.error = r.String("error", false);
  });
}

base::Result<TerminalSize> DecodeTerminalSize(const Json& j) {
  return Decode<TerminalSize>(j, "resize", [](FieldReader& r, TerminalSize& t) {
    t.cols = static_cast<int32_t>(r.Int("cols", 1, 10000, 80));
    t.rows = static_cast<int32_t>(r.Int("rows", 1, 10000, 24));
  });
}

base::Result<ShimExec> DecodeShimExec(const Json& j) {
  return Decode<ShimExec>(j, "exec", [](FieldReader& r, ShimExec& e) {
    e.argv = r.StringList("argv");
    e.env = r.StringMap("env");
    e.cwd = r.String("cwd", false);
    e.uid = OptionalInt(r, "uid", 0, 0xffffffffLL);
    e.gid = OptionalInt(r, "gid", 0, 0xffffffffLL);
    e.cgroup_procs = r.StringList("cgroupProcs");
    e.namespace_pid = r.Int("namespacePid", 0, 1 << 30, 0);
    e.tty = r.Bool("tty", false);
    if (e.argv.empty()) r.Error("argv", "is empty: nothing to run");
  });
}

}  // namespace meridian::protocol
