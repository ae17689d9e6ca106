#include "server/telemetry_metrics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <set>

#include "base/log.h"

namespace meridian::server {

namespace {

using MetricLabels = api::Metrics::Labels;

constexpr double kMib = 1024.0 * 1024.0;

// The families, described once per scrape: name, type, help.
struct Family {
  const char* name;
  const char* type;
  const char* help;
};
constexpr std::array<Family, 28> kFamilies = {{
    {"meridian_gpu_healthy", "gauge",
     "1 when the GPU is healthy (what its agent registered, not cordoned for a fault), 0 when "
     "not; a GPU held by work outside Meridian is healthy unless it is faulted."},
    {"meridian_gpu_unmanaged", "gauge",
     "1 when work outside Meridian holds the GPU (a job submitted to Slurm directly), 0 when "
     "not."},
    {"meridian_gpu_allocated_ratio", "gauge",
     "Share of the GPU allocated to jobs, 0..1 (fractions and MIG slices in parts)."},
    {"meridian_gpu_utilization_ratio", "gauge",
     "GPU compute utilisation, 0..1 (DCGM_FI_DEV_GPU_UTIL / 100)."},
    {"meridian_gpu_memory_used_bytes", "gauge", "GPU memory in use (DCGM_FI_DEV_FB_USED)."},
    {"meridian_gpu_memory_total_bytes", "gauge", "GPU memory in all (DCGM_FI_DEV_FB_TOTAL)."},
    {"meridian_gpu_temperature_celsius", "gauge", "GPU temperature (DCGM_FI_DEV_GPU_TEMP)."},
    {"meridian_gpu_power_watts", "gauge", "GPU board power draw (DCGM_FI_DEV_POWER_USAGE)."},
    {"meridian_gpu_sm_clock_hertz", "gauge", "SM clock (DCGM_FI_DEV_SM_CLOCK, in MHz there)."},
    {"meridian_gpu_ecc_single_bit_errors_total", "counter",
     "Corrected single-bit ECC errors since the driver loaded (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)."},
    {"meridian_gpu_ecc_double_bit_errors_total", "counter",
     "Uncorrected double-bit ECC errors since the driver loaded (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)."},
    {"meridian_gpu_retired_pages", "gauge",
     "Memory pages retired, by cause: single_bit (repeated) or double_bit (DCGM_FI_DEV_RETIRED_SBE"
     ", _DBE). GPUs before Ampere."},
    {"meridian_gpu_remapped_rows", "gauge",
     "Memory rows remapped, by cause: correctable or uncorrectable (DCGM_FI_DEV_CORRECTABLE_"
     "REMAPPED_ROWS, _UNCORRECTABLE_). Ampere and later."},
    {"meridian_gpu_row_remap_pending", "gauge",
     "1 when a row remap waits for a GPU reset (DCGM_FI_DEV_ROW_REMAP_PENDING)."},
    {"meridian_gpu_mig_mode_pending", "gauge",
     "1 when a MIG mode change waits for a GPU reset (the GPU is cordoned until then)."},
    {"meridian_gpu_row_remap_failed", "gauge",
     "1 when a row remap ever failed: the GPU needs service (DCGM_FI_DEV_ROW_REMAP_FAILURE)."},
    {"meridian_gpu_xid_errors_total", "counter",
     "Critical XID events seen by the node's agent since it started."},
    {"meridian_gpu_last_xid", "gauge",
     "Code of the latest critical XID event, 0 when none (DCGM_FI_DEV_XID_ERRORS)."},
    {"meridian_gpu_mig_instances", "gauge", "MIG instances on the GPU."},
    {"meridian_gpu_mig_instance_info", "gauge",
     "One series per MIG instance: its profile (GPU_I_PROFILE) and first memory slice."},
    {"meridian_node_state", "gauge",
     "1 for the state the node is in, 0 for the others: ready, cordoned, draining, drained, "
     "lost."},
    {"meridian_node_cpu_capacity_cores", "gauge", "CPU of the node that jobs may be given."},
    {"meridian_node_cpu_allocated_cores", "gauge", "CPU of the node allocated to jobs."},
    {"meridian_node_memory_capacity_bytes", "gauge", "Memory of the node that jobs may be given."},
    {"meridian_node_memory_allocated_bytes", "gauge", "Memory of the node allocated to jobs."},
    {"meridian_node_last_heartbeat_timestamp_seconds", "gauge",
     "When the node's agent last heartbeated (Unix seconds); registered nodes only."},
    {"meridian_node_telemetry_rejected_samples_total", "counter",
     "GPU samples of the node's heartbeats that did not decode and were dropped (the server's "
     "log says why, once)."},
    {"meridian_node_condition", "gauge",
     "1 when the node condition holds, 0 when not (warnings before failures: EccCorrectedRate, "
     "TemperatureNearSlowdown, PowerCapped, NvlinkCrcErrors on each GPU; FailingJobs on the "
     "node); registered nodes only."},
}};

// The node conditions of one GPU, each exported at 0 or 1 (domain/gpu_warnings.h).
constexpr std::array<const char*, 4> kGpuConditions = {
    domain::kEccCorrectedRate, domain::kTemperatureNearSlowdown, domain::kPowerCapped,
    domain::kNvlinkCrcErrors};

bool Holds(const NodeService::NodeReport& r, const char* type, int32_t gpu) {
  return std::any_of(r.conditions.begin(), r.conditions.end(), [&](const domain::NodeCondition& c) {
    return c.type == type && c.gpu == gpu;
  });
}

constexpr std::array<const char*, 5> kNodeStates = {"ready", "cordoned", "draining", "drained",
                                                    "lost"};

double Number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

std::string JsonText(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// One state for a node, the strongest that holds: a Lost node is lost whatever its operator
// asked; then the operator's drain (drained once no job holds it), then a cordon.
std::string NodeState(const Json& node, const NodeService::NodeReport* report) {
  if (!report) return node.value("schedulable", true) ? "ready" : "cordoned";
  if (report->state == "Lost") return "lost";
  const std::string_view scheduling = domain::NodeScheduling(report->ops, report->held);
  return scheduling.empty() ? "ready" : std::string(scheduling);
}

// The labels dcgm-exporter gives a GPU (gpu, UUID, device, modelName, Hostname), then Meridian's:
// the node again under the name its node series use, the cluster, and who holds the GPU. A GPU
// that several jobs share (fractions) names them all, by job id, with a comma.
MetricLabels GpuLabels(const Json& node, const Json& gpu,
                       const std::vector<NodeService::GpuHolder>* holders) {
  const std::string index = std::to_string(gpu.value("index", 0));
  std::string jobs, projects;
  if (holders) {
    std::set<std::string> seen;
    for (const NodeService::GpuHolder& h : *holders) {
      jobs += (jobs.empty() ? "" : ",") + std::to_string(h.job);
      if (seen.insert(h.project).second) projects += (projects.empty() ? "" : ",") + h.project;
    }
  }
  const std::string name = JsonText(node, "name");
  return {{"gpu", index},
          {"UUID", JsonText(gpu, "uuid")},
          {"device", "nvidia" + index},
          {"modelName", JsonText(node, "model")},
          {"Hostname", name},
          {"node", name},
          {"cluster", JsonText(node, "cluster")},
          {"job_id", jobs},
          {"project", projects}};
}

MetricLabels With(MetricLabels labels, const char* key, const std::string& value) {
  labels.emplace_back(key, value);
  return labels;
}

void RenderTelemetry(const MetricLabels& l, const protocol::GpuSample& s, api::MetricsText* out) {
  out->Set("meridian_gpu_utilization_ratio", l, s.utilization);
  out->Set("meridian_gpu_memory_used_bytes", l, static_cast<double>(s.memory_used_mib) * kMib);
  out->Set("meridian_gpu_temperature_celsius", l, s.temperature_c);
  out->Set("meridian_gpu_power_watts", l, s.power_w);
  out->Set("meridian_gpu_xid_errors_total", l, static_cast<double>(s.xid_errors));
  out->Set("meridian_gpu_last_xid", l, s.last_xid);
  out->Set("meridian_gpu_mig_instances", l, static_cast<double>(s.mig_instances.size()));
  // What the device does not keep is absent: no made-up zero.
  auto optional = [&](const char* name, const auto& v, double scale, const MetricLabels& labels) {
    if (v) out->Set(name, labels, static_cast<double>(*v) * scale);
  };
  optional("meridian_gpu_memory_total_bytes", s.memory_total_mib, kMib, l);
  optional("meridian_gpu_sm_clock_hertz", s.sm_clock_mhz, 1e6, l);
  optional("meridian_gpu_ecc_single_bit_errors_total", s.ecc_single_bit, 1, l);
  optional("meridian_gpu_ecc_double_bit_errors_total", s.ecc_double_bit, 1, l);
  optional("meridian_gpu_retired_pages", s.retired_pages_single_bit, 1,
           With(l, "cause", "single_bit"));
  optional("meridian_gpu_retired_pages", s.retired_pages_double_bit, 1,
           With(l, "cause", "double_bit"));
  optional("meridian_gpu_remapped_rows", s.remapped_rows_correctable, 1,
           With(l, "cause", "correctable"));
  optional("meridian_gpu_remapped_rows", s.remapped_rows_uncorrectable, 1,
           With(l, "cause", "uncorrectable"));
  optional("meridian_gpu_row_remap_pending", s.row_remap_pending, 1, l);
  optional("meridian_gpu_row_remap_failed", s.row_remap_failed, 1, l);
  optional("meridian_gpu_mig_mode_pending", s.mig_mode_pending, 1, l);
  // Each instance once: a sample that names one twice must not make a scrape with a series
  // twice, which Prometheus refuses.
  for (const std::string& m :
       std::set<std::string>(s.mig_instances.begin(), s.mig_instances.end())) {
    const size_t at = m.find('@');
    MetricLabels mig = With(l, "GPU_I_PROFILE", m.substr(0, at));
    out->Set("meridian_gpu_mig_instance_info",
             With(std::move(mig), "mig_start", at == std::string::npos ? "" : m.substr(at + 1)), 1);
  }
}

void RenderNode(const Json& node, const NodeService::NodeReport* report, api::MetricsText* out) {
  const MetricLabels l = {{"node", JsonText(node, "name")}, {"cluster", JsonText(node, "cluster")}};
  const std::string state = NodeState(node, report);
  for (const char* s : kNodeStates)
    out->Set("meridian_node_state", With(l, "state", s), s == state);
  const double cpu = Number(node, "cpuMilli"), cpu_free = Number(node, "cpuFreeMilli");
  const double mem = Number(node, "memoryMib"), mem_free = Number(node, "memoryFreeMib");
  out->Set("meridian_node_cpu_capacity_cores", l, cpu / 1000);
  out->Set("meridian_node_cpu_allocated_cores", l, (cpu - cpu_free) / 1000);
  out->Set("meridian_node_memory_capacity_bytes", l, mem * kMib);
  out->Set("meridian_node_memory_allocated_bytes", l, (mem - mem_free) * kMib);
  if (report) {
    out->Set("meridian_node_telemetry_rejected_samples_total", l,
             static_cast<double>(report->rejected_samples));
    out->Set("meridian_node_condition", With(l, "condition", domain::kFailingJobs),
             Holds(*report, domain::kFailingJobs, -1));
  }
  if (node.contains("lastHeartbeat")) {
    out->Set("meridian_node_last_heartbeat_timestamp_seconds", l, Number(node, "lastHeartbeat"));
  }
}

}  // namespace

void RenderEstateMetrics(const Json& nodes,
                         const std::map<std::string, NodeService::NodeReport>& reports,
                         api::MetricsText* out) {
  for (const Family& f : kFamilies) out->Describe(f.name, f.type, f.help);
  if (!nodes.is_array()) return;
  for (const Json& node : nodes) {
    if (!node.is_object()) continue;
    auto r = reports.find(JsonText(node, "name"));
    const NodeService::NodeReport* report = r == reports.end() ? nullptr : &r->second;
    RenderNode(node, report, out);
    if (!node.contains("gpus") || !node["gpus"].is_array()) continue;
    std::set<int32_t> seen;  // each GPU of the node once, as above
    for (const Json& gpu : node["gpus"]) {
      const int32_t index = gpu.value("index", 0);
      if (!seen.insert(index).second) continue;
      const std::vector<NodeService::GpuHolder>* holders = nullptr;
      if (report) {
        auto h = report->holders.find(index);
        if (h != report->holders.end()) holders = &h->second;
      }
      const MetricLabels l = GpuLabels(node, gpu, holders);
      out->Set("meridian_gpu_healthy", l, gpu.value("healthy", true) ? 1 : 0);
      out->Set("meridian_gpu_unmanaged", l, gpu.value("unmanaged", "").empty() ? 0 : 1);
      out->Set("meridian_gpu_allocated_ratio", l, Number(gpu, "allocatedMilli") / 1000);
      // A lost node's last sample is old news: its GPUs keep only what the scheduler says.
      if (!report || report->state == "Lost") continue;
      auto sample = std::find_if(report->gpus.begin(), report->gpus.end(),
                                 [&](const protocol::GpuSample& s) { return s.index == index; });
      if (sample != report->gpus.end()) RenderTelemetry(l, *sample, out);
      for (const char* type : kGpuConditions) {
        out->Set("meridian_node_condition", With(l, "condition", type),
                 Holds(*report, type, index));
      }
    }
  }
}

// --- job outcomes --------------------------------------------------------------------------

std::string JobOutcomes::FailureCause(const std::string& message) {
  auto has = [&](const char* part) { return message.find(part) != std::string::npos; };
  // What a runner said of why it stopped the task comes first: the exit code it then had (a
  // SIGTERM's) says less than the reason.
  if (has("runtime limit")) return "runtime_limit";
  if (has("lost the server") || has(" lease")) return "lease_lost";
  if (has("node ") && has(" lost")) return "node_lost";
  if (has("exited with code")) return "exit_code";
  return "other";
}

void JobOutcomes::Start(int64_t after_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  after_ = after_seq;
}

void JobOutcomes::Count(const store::Event& e, const std::string& cause) {
  if (e.object_kind != "Job") return;
  std::lock_guard<std::mutex> lock(mu_);
  after_ = std::max(after_, e.seq);
  const std::string& p = e.project;
  const std::string& r = e.reason;
  if (r == "Succeeded") {
    succeeded_[p] += 1;
  } else if (r == "Failed") {
    std::string c = cause;
    std::replace(c.begin(), c.end(), '-', '_');
    const bool known = std::any_of(std::begin(kFailureCauses), std::end(kFailureCauses),
                                   [&](const char* k) { return c == k; });
    failed_[{p, known && !c.empty() ? c : FailureCause(e.message)}] += 1;
  } else if (r == "Cancelled") {
    cancelled_[p] += 1;
  } else if (r == "Preempted") {
    preempted_[p] += 1;
    stopping_for_[e.object_name] = "preempted";
  } else if (r == "Drained") {
    stopping_for_[e.object_name] = "drained";
  } else if (r == "TaskLost") {
    stopping_for_[e.object_name] = "node_lost";
  } else if (r == "GpuFault") {
    stopping_for_[e.object_name] = "gpu_fault";
  } else if (r == "Requeued") {
    // Straight back to the queue (nothing left to stop): the message says why.
    const bool lost = e.message.find("node ") != std::string::npos &&
                      e.message.find(" lost") != std::string::npos;
    requeued_[{p, lost ? "node_lost" : "other"}] += 1;
    stopping_for_.erase(e.object_name);
  } else if (r == "Stopped") {
    // The end of a stop: back in the queue for the reason the stop was asked for.
    if (e.message.find("back in the queue") != std::string::npos) {
      auto why = stopping_for_.find(e.object_name);
      requeued_[{p, why == stopping_for_.end() ? "other" : why->second}] += 1;
    }
    stopping_for_.erase(e.object_name);
  }
  if (r == "Succeeded" || r == "Failed") stopping_for_.erase(e.object_name);
}

base::Status JobOutcomes::Follow(store::Store& store) {
  store::EventFilter f;
  f.object_kind = "Job";
  f.limit = 1000;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      f.after_seq = after_;
    }
    // A failure's cause is the job's (status.cause, the lifecycle's typed diagnosis).
    std::map<int64_t, std::string> causes;  // event seq -> cause
    auto page =
        store::ReadValue(store, [&](store::Tx& tx) -> base::Result<std::vector<store::Event>> {
          auto events = tx.ListEvents(f);
          if (!events.ok()) return events.status();
          for (const store::Event& e : *events) {
            if (e.reason != "Failed") continue;
            int64_t id = 0;
            const char* end = e.object_name.data() + e.object_name.size();
            if (std::from_chars(e.object_name.data(), end, id).ptr != end) continue;
            auto job = tx.GetJob(id);
            if (job.ok() && job->status.is_object()) causes[e.seq] = job->status.value("cause", "");
          }
          return events;
        });
    if (!page.ok()) return page.status();
    for (const store::Event& e : *page) Count(e, causes.count(e.seq) ? causes[e.seq] : "");
    if (page->size() < static_cast<size_t>(f.limit)) return base::Status::Ok();
  }
}

std::map<std::string, std::pair<double, double>> JobOutcomes::EndedTotals() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::pair<double, double>> out;
  for (const auto& [p, n] : succeeded_) out[p].first += n;
  for (const auto& [key, n] : failed_) out[key.first].second += n;
  return out;
}

void JobOutcomes::Render(const std::set<std::string>& projects, api::MetricsText* out) const {
  out->Describe("meridian_jobs_succeeded_total", "counter",
                "Jobs that ended with every task exiting 0, by project.");
  out->Describe("meridian_jobs_failed_total", "counter",
                "Jobs that failed, by project and cause: the job's status.cause (exit_code, "
                "oom_killed, gpu_fault, node_lost, ...; other when unknown).");
  out->Describe("meridian_jobs_cancelled_total", "counter", "Jobs cancelled, by project.");
  out->Describe("meridian_jobs_preempted_total", "counter",
                "Jobs asked to stop to make room for another, by project.");
  out->Describe("meridian_jobs_requeued_total", "counter",
                "Runs that went back to the queue, by project and reason: preempted, drained, "
                "node_lost, other.");
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> all = projects;
  for (const auto& m : {&succeeded_, &cancelled_, &preempted_}) {
    for (const auto& [p, n] : *m) all.insert(p);
  }
  for (const auto& m : {&failed_, &requeued_}) {
    for (const auto& [key, n] : *m) all.insert(key.first);
  }
  auto value = [](const auto& m, const auto& key) {
    auto it = m.find(key);
    return it == m.end() ? 0.0 : it->second;
  };
  for (const std::string& p : all) {
    const MetricLabels l = {{"project", p}};
    out->Set("meridian_jobs_succeeded_total", l, value(succeeded_, p));
    out->Set("meridian_jobs_cancelled_total", l, value(cancelled_, p));
    out->Set("meridian_jobs_preempted_total", l, value(preempted_, p));
    for (const char* c : kFailureCauses) {
      out->Set("meridian_jobs_failed_total", With(l, "cause", c),
               value(failed_, std::pair{p, std::string(c)}));
    }
    for (const char* r : kRequeueReasons) {
      out->Set("meridian_jobs_requeued_total", With(l, "reason", r),
               value(requeued_, std::pair{p, std::string(r)}));
    }
  }
}

// --- the collector -------------------------------------------------------------------------

TelemetryMetrics::TelemetryMetrics(store::Store* store, api::SchedulerHooks* scheduler,
                                   NodeService* nodes)
    : store_(store), scheduler_(scheduler), nodes_(nodes) {
  auto latest = store::ReadValue(*store_, [](store::Tx& tx) { return tx.LatestEventSeq(); });
  outcomes_.Start(latest.ok() ? *latest : 0);
}

std::string TelemetryMetrics::Render() {
  api::MetricsText m;
  RenderEstateMetrics(scheduler_->Nodes(), nodes_->Reports(), &m);
  // A store that cannot be read now is read at the next scrape: the counters lag, not lie.
  if (base::Status s = outcomes_.Follow(*store_); !s.ok()) {
    base::log::Error("metrics: job events: {}", s.message());
  }
  std::set<std::string> projects;
  auto objects = store::ReadValue(*store_, [](store::Tx& tx) { return tx.ListObjects("Project"); });
  if (objects.ok()) {
    for (const store::Object& o : *objects) projects.insert(o.name);
  }
  outcomes_.Render(projects, &m);
  return m.Render();
}

}  // namespace meridian::server
