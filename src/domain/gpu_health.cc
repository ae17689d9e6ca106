#include "domain/gpu_health.h"

#include <algorithm>
#include <array>

#include "domain/gpu_warnings.h"
#include "domain/spec.h"

namespace meridian::domain {

namespace {

// NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors) gives each XID an immediate action:
// RESTART_APP (the application's error: the GPU is fine), RESET_GPU, or RESTART_BM (reboot the
// machine). The table keeps the XIDs a data-centre GPU reports in practice; ClassifyXid takes
// the rest as needing a reset.
constexpr std::array kXids = {
    XidClass{13, XidScope::kJob, "graphics engine exception"},
    XidClass{31, XidScope::kJob, "GPU memory page fault"},
    XidClass{43, XidScope::kJob, "GPU stopped processing"},
    XidClass{45, XidScope::kJob, "preemptive cleanup, due to previous errors"},
    XidClass{68, XidScope::kJob, "video decoder exception"},
    XidClass{69, XidScope::kJob, "graphics engine class error"},
    XidClass{48, XidScope::kGpu, "double-bit ECC error"},
    XidClass{61, XidScope::kGpu, "internal micro-controller breakpoint"},
    XidClass{62, XidScope::kGpu, "internal micro-controller halt"},
    XidClass{63, XidScope::kGpu, "ECC page retirement or row remapping recorded"},
    XidClass{64, XidScope::kGpu, "ECC page retirement or row remapping failure"},
    XidClass{74, XidScope::kNvlinkDomain, "NVLink error"},
    XidClass{79, XidScope::kNode, "GPU has fallen off the bus"},
    XidClass{92, XidScope::kGpu, "high single-bit ECC error rate"},
    XidClass{94, XidScope::kGpu, "contained ECC error"},
    XidClass{95, XidScope::kGpu, "uncontained ECC error"},
    XidClass{119, XidScope::kGpu, "GSP RPC timeout"},
    XidClass{120, XidScope::kGpu, "GSP error"},
    XidClass{140, XidScope::kGpu, "unrecovered ECC error"},
    XidClass{154, XidScope::kNode, "GPU recovery action changed (node reboot required)"},
};

}  // namespace

XidClass ClassifyXid(int32_t xid) {
  for (const XidClass& c : kXids) {
    if (c.xid == xid) return c;
  }
  return {xid, XidScope::kGpu, "critical XID"};
}

std::string_view ScopeName(XidScope scope) {
  switch (scope) {
    case XidScope::kJob:
      return "job";
    case XidScope::kGpu:
      return "gpu";
    case XidScope::kNvlinkDomain:
      return "nvlink-domain";
    case XidScope::kNode:
      return "node";
  }
  return "gpu";
}

std::string DescribeXid(int32_t xid) {
  return "XID " + std::to_string(xid) + " (" + std::string(ClassifyXid(xid).meaning) + ")";
}

GpuHealthPolicy GpuHealthPolicyOf(const Json& policy_spec) {
  GpuHealthPolicy p;
  if (!policy_spec.is_object()) return p;
  auto h = policy_spec.find("gpuHealth");
  if (h == policy_spec.end() || !h->is_object()) return p;
  if (auto r = h->find("remediation"); r != h->end() && r->is_array()) {
    p.remediation.clear();
    for (const Json& word : *r) {
      if (word.is_string()) p.remediation.push_back(word.get<std::string>());
    }
  }
  if (auto m = h->find("maxFaults"); m != h->end() && m->is_number_integer()) {
    p.max_faults = m->get<int64_t>();
  }
  if (auto w = h->find("faultWindow"); w != h->end() && w->is_number()) {
    p.fault_window = w->get<double>();
  }
  return p;
}

const GpuHealth* FindGpu(const std::vector<GpuHealth>& gpus, int32_t index) {
  for (const GpuHealth& g : gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

bool GpuCordoned(const std::vector<GpuHealth>& gpus, int32_t index) {
  const GpuHealth* g = FindGpu(gpus, index);
  return g && g->cordoned;
}

namespace {

// GPU `index`'s record, made (in index order) if it has none.
GpuHealth& RecordOf(std::vector<GpuHealth>* gpus, int32_t index) {
  auto it = std::find_if(gpus->begin(), gpus->end(),
                         [&](const GpuHealth& g) { return g.index == index; });
  if (it != gpus->end()) return *it;
  auto at =
      std::find_if(gpus->begin(), gpus->end(), [&](const GpuHealth& g) { return g.index > index; });
  GpuHealth fresh;
  fresh.index = index;
  return *gpus->insert(at, std::move(fresh));
}

}  // namespace

FaultRecorded RecordGpuFault(std::vector<GpuHealth>* gpus, int32_t index, int32_t xid,
                             const std::string& reason, const GpuHealthPolicy& policy, double now) {
  GpuHealth& g = RecordOf(gpus, index);
  FaultRecorded out;
  std::erase_if(g.faults, [&](double at) { return at <= now - policy.fault_window; });
  g.faults.push_back(now);
  out.recent = static_cast<int64_t>(g.faults.size());
  out.cordoned = !g.cordoned;
  if (!g.cordoned) {
    g.cordoned = true;
    g.since = now;
  }
  g.xid = xid;
  g.reason = reason;
  if (!g.held && out.recent >= policy.max_faults) {
    g.held = true;
    out.held = true;
  }
  return out;
}

bool CordonForMigMode(std::vector<GpuHealth>* gpus, int32_t index, const std::string& reason,
                      double now) {
  GpuHealth& g = RecordOf(gpus, index);
  g.mig_mode_pending = true;
  if (g.cordoned) return false;  // a fault's cordon stays what it says; the reset serves both
  g.cordoned = true;
  g.since = now;
  g.reason = reason;
  return true;
}

bool MigModeInEffect(std::vector<GpuHealth>* gpus, int32_t index) {
  auto it = std::find_if(gpus->begin(), gpus->end(),
                         [&](const GpuHealth& g) { return g.index == index; });
  if (it == gpus->end()) return false;
  if (it->cordoned && it->xid == 0 && !it->held)
    return UncordonGpu(gpus, index, Uncordon::kRemediated);
  it->mig_mode_pending = false;  // cordoned for a fault too: that cordon stays
  return false;
}

bool UncordonGpu(std::vector<GpuHealth>* gpus, int32_t index, Uncordon how) {
  auto it = std::find_if(gpus->begin(), gpus->end(),
                         [&](const GpuHealth& g) { return g.index == index; });
  if (it == gpus->end()) return false;
  const bool was = it->cordoned;
  if (how == Uncordon::kOperator) {
    gpus->erase(it);  // repaired or vouched for: it starts afresh
    return was;
  }
  it->cordoned = false;
  it->held = false;
  it->xid = 0;
  it->reason.clear();
  it->since = 0;
  it->mig_mode_pending = false;
  return was;
}

Json GpuHealthToJson(const std::vector<GpuHealth>& gpus) {
  Json out = Json::array();
  for (const GpuHealth& g : gpus) {
    out.push_back({{"index", g.index},
                   {"cordoned", g.cordoned},
                   {"xid", g.xid},
                   {"reason", g.reason},
                   {"since", g.since},
                   {"held", g.held},
                   {"faults", g.faults},
                   {"migModePending", g.mig_mode_pending}});
  }
  return out;
}

std::vector<GpuHealth> GpuHealthOf(const Json& items) {
  std::vector<GpuHealth> out;
  if (!items.is_array()) return out;
  for (const Json& j : items) {
    if (!j.is_object() || !j.contains("index") || !j.at("index").is_number_integer()) continue;
    GpuHealth g;
    g.index = j.at("index").get<int32_t>();
    auto boolean = [&](const char* k) {
      return j.contains(k) && j.at(k).is_boolean() && j.at(k).get<bool>();
    };
    g.cordoned = boolean("cordoned");
    g.held = boolean("held");
    g.mig_mode_pending = boolean("migModePending");
    if (j.contains("xid") && j.at("xid").is_number_integer()) g.xid = j.at("xid").get<int32_t>();
    if (j.contains("reason") && j.at("reason").is_string())
      g.reason = j.at("reason").get<std::string>();
    if (j.contains("since") && j.at("since").is_number()) g.since = j.at("since").get<double>();
    for (const Json& t : j.value("faults", Json::array())) {
      if (t.is_number()) g.faults.push_back(t.get<double>());
    }
    if (FindGpu(out, g.index)) continue;  // the first record of an index is the one
    out.push_back(std::move(g));
  }
  return out;
}

base::Result<FaultInjection> DecodeFaultInjection(const Json& body) {
  if (!body.is_object())
    return base::Status::Invalid("body: must be a JSON object, e.g. {\"xid\": 79}");
  SourceDoc doc{body, "", {}};
  ErrorList errors;
  Json canonical;
  FieldReader f(doc, body, "", &errors, &canonical);
  FaultInjection r;
  if (f.Has("warning")) {
    r.warning = f.String("warning", true);
    if (!KnownWarningInjection(r.warning)) {
      f.Error("warning",
              "unknown warning \"" + r.warning + "\" (one of " + kWarningInjections + ")");
    }
    if (f.Has("xid")) {
      f.Error("xid", "give an xid or a warning, not both");
      f.Skip("xid");
    }
    f.Finish();
    if (!errors.empty()) return errors.First();
    return r;
  }
  if (!f.Has("xid")) {
    f.Error("xid", std::string("is required (the XID to inject, e.g. 79), or give a warning: ") +
                       kWarningInjections);
  }
  r.xid = static_cast<int32_t>(f.Int("xid", 1, 999, 0));
  f.Finish();
  if (!errors.empty()) return errors.First();
  return r;
}

}  // namespace meridian::domain
