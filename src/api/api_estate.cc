// The estate as the scheduler sees it: nodes, quota use, and their history over time.
#include <cmath>
#include <set>

#include "api/api_internal.h"
#include "base/version.h"
#include "domain/label_selector.h"

namespace meridian::api {

namespace {

// The nodes of the tenancy tree a caller may see: for an admin all of them; otherwise the
// projects it may read, and the team and organization above each (their totals say nothing of
// any one project the caller cannot read).
std::function<bool(const std::string&)> VisibleTenancy(const Access& access, const Tenancy& tenancy,
                                                       const std::vector<std::string>& projects) {
  if (access.IsAdmin()) return [](const std::string&) { return true; };
  auto names = std::make_shared<std::set<std::string>>();
  for (const std::string& p : access.Readable(projects)) {
    names->insert(p);
    const std::string team = tenancy.TeamOf(p);
    if (!team.empty()) names->insert(team);
    const std::string org = tenancy.OrgOfProject(p);
    if (!org.empty()) names->insert(org);
  }
  return [names](const std::string& name) { return names->count(name) > 0; };
}

Json Rounded(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

// Compact: a sample every 10 s for 6 hours is 2,160 rows.
Json HistorySampleToJson(const HistorySample& s) {
  Json groups = Json::array();
  for (const HistorySample::Group& g : s.groups) {
    groups.push_back({g.cluster, g.model, g.gpus, Rounded(g.allocated), Rounded(g.utilization)});
  }
  Json projects = Json::object();
  for (const auto& [name, q] : s.projects) projects[name] = {q.pending, q.running};
  Json quota = Json::object();
  for (const auto& [name, used] : s.quota_used) quota[name] = Rounded(used);
  return {{"groups", groups}, {"projects", projects}, {"quota", quota}};
}

HistorySample HistorySampleFromJson(double at, const Json& j) {
  HistorySample s;
  s.at = at;
  if (!j.is_object()) return s;
  auto number = [](const Json& v) { return v.is_number() ? v.get<double>() : 0.0; };
  for (const Json& g : j.value("groups", Json::array())) {
    if (!g.is_array() || g.size() != 5 || !g[0].is_string() || !g[1].is_string()) continue;
    s.groups.push_back({g[0].get<std::string>(), g[1].get<std::string>(), number(g[2]),
                        number(g[3]), g[4].is_number() ? g[4].get<double>() : -1});
  }
  const Json projects = j.value("projects", Json::object());
  if (projects.is_object()) {
    for (const auto& [name, q] : projects.items()) {
      if (!q.is_array() || q.size() != 2) continue;
      s.projects[name] = {static_cast<int32_t>(number(q[0])), static_cast<int32_t>(number(q[1]))};
    }
  }
  const Json quota = j.value("quota", Json::object());
  if (quota.is_object()) {
    for (const auto& [name, used] : quota.items()) s.quota_used[name] = number(used);
  }
  return s;
}

// Liveness, and whether the whole configuration is scheduled. Always 200 while the server
// serves: a restart would not mend a bad object, so a liveness probe must not restart it for
// one; "degraded" names each object the scheduler leaves out, and why.
void Api::Health(Call& call) {
  const std::vector<ConfigProblem> problems = hooks_->ConfigProblems();
  Json items = Json::array();
  for (const ConfigProblem& p : problems) {
    items.push_back({{"kind", p.kind}, {"name", p.name}, {"message", p.message}});
  }
  if (const size_t held = PendingAudit(); held > 0) {
    items.push_back({{"kind", "Audit"},
                     {"name", "audit log"},
                     {"message", std::to_string(held) +
                                     " audit entries could not be written to the store; they are "
                                     "held, retried with the next, and in the server's log"}});
  }
  Respond(call, 200, {{"status", items.empty() ? "ok" : "degraded"}, {"problems", items}});
}

void Api::ServeMetrics(Call& call) {
  // Routed as a read (a token is needed) unless options_.open_metrics.
  if (call.authenticated && !call.access.ScrapesMetrics()) {
    return Fail(
        call, 403, "permission_denied",
        call.access.user() + " may not read /metrics: it needs the metrics role (or admin)");
  }
  metrics_->Set("meridian_config_problems", {},
                static_cast<double>(hooks_->ConfigProblems().size()));
  call.res.set_content(metrics_->Render(), "text/plain; version=0.0.4");
}

void Api::AddOperations(Json* row) {
  // What operators asked of a registered node: cordoned, draining or drained, GPUs held.
  if (!node_ops_ || row->value("source", "") != "registered") return;
  Json ops = node_ops_->Operations(row->value("name", ""));
  if (!ops.is_object()) return;
  for (const char* k : {"cordoned", "drain", "scheduling", "gpuHealth"}) (*row)[k] = ops[k];
}

void Api::Version(Call& call) {
  // Read access, not public: which build runs is worth something to an attacker, and every
  // client that asks has a token (kubectl's /version is for authenticated users by default too).
  Respond(call, 200, {{"version", base::Version()}, {"api", "v1"}});
}

void Api::Nodes(Call& call) {
  auto selector = domain::LabelSelector::Parse(call.req.get_param_value("labelSelector"));
  if (!selector.ok()) {
    return Fail(call, 400, "invalid_argument", "labelSelector: " + selector.status().message(),
                "labelSelector");
  }
  Json items = Json::array();
  for (Json& row : hooks_->Nodes()) {
    if (!selector->Matches(domain::LabelsOf(row.value("labels", Json::object())))) continue;
    AddOperations(&row);
    items.push_back(std::move(row));
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

void Api::GetNode(Call& call) {
  const std::string name = call.Arg(1);
  for (Json& row : hooks_->Nodes()) {
    if (row.value("name", "") != name) continue;
    AddOperations(&row);
    return Respond(call, 200, row);
  }
  Fail(call, 404, "not_found", "node \"" + name + "\" not found");
}

void Api::Usage(Call& call) {
  auto config = Config();
  auto visible = VisibleTenancy(call.access, config->tenancy, config->projects);
  Json items = Json::array();
  for (const Json& row : hooks_->Usage()) {
    if (visible(row.value("name", ""))) items.push_back(row);
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

void Api::History(Call& call) {
  // The last hour by default; `since` is Unix seconds.
  auto since = IntParam(call, "since", static_cast<int64_t>(call.started) - 3600, 0, INT64_MAX);
  if (!since) return;
  auto config = Config();
  auto visible = VisibleTenancy(call.access, config->tenancy, config->projects);
  double interval = 0;
  std::vector<HistorySample> samples = hooks_->History(static_cast<double>(*since), &interval);
  // Columns, one value per sample: what a chart takes as it is. A series missing from a sample
  // (a cluster not yet configured) is null there.
  const size_t n = samples.size();
  Json at = Json::array();
  std::map<std::pair<std::string, std::string>, Json> groups;
  std::map<std::string, Json> quota;
  Json pending = Json::array(), running = Json::array();
  for (size_t i = 0; i < n; ++i) {
    const HistorySample& s = samples[i];
    at.push_back(s.at);
    for (const HistorySample::Group& g : s.groups) {
      Json& series = groups[{g.cluster, g.model}];
      if (series.is_null()) {
        series = {{"cluster", g.cluster},
                  {"model", g.model},
                  {"gpus", Json(n, nullptr)},
                  {"allocated", Json(n, nullptr)},
                  {"utilization", Json(n, nullptr)}};
      }
      series["gpus"][i] = g.gpus;
      series["allocated"][i] = Rounded(g.allocated);
      if (g.utilization >= 0) series["utilization"][i] = Rounded(g.utilization);
    }
    int64_t p = 0, r = 0;
    for (const auto& [project, q] : s.projects) {
      if (!visible(project)) continue;
      p += q.pending;
      r += q.running;
    }
    pending.push_back(p);
    running.push_back(r);
    for (const auto& [name, used] : s.quota_used) {
      if (!visible(name)) continue;
      Json& series = quota[name];
      if (series.is_null()) series = {{"name", name}, {"usedGpus", Json(n, nullptr)}};
      series["usedGpus"][i] = Rounded(used);
    }
  }
  Json clusters = Json::array();
  for (auto& [key, series] : groups) clusters.push_back(std::move(series));
  Json quotas = Json::array();
  for (auto& [name, series] : quota) quotas.push_back(std::move(series));
  Respond(call, 200,
          {{"interval", interval},
           {"at", at},
           {"clusters", clusters},
           {"queue", {{"pending", pending}, {"running", running}}},
           {"quota", quotas}});
}

// One node's GPUs over time, as /history gives the estate's: columns, one value per sample.
// Nodes are seen by everyone (as /nodes), and so is their telemetry.
void Api::NodeHistory(Call& call) {
  const std::string name = call.Arg(1);
  auto since = IntParam(call, "since", static_cast<int64_t>(call.started) - 3600, 0, INT64_MAX);
  if (!since) return;
  bool known = false;
  for (const Json& row : hooks_->Nodes()) known = known || row.value("name", "") == name;
  if (!known) return Fail(call, 404, "not_found", "node \"" + name + "\" not found");
  double interval = 0;
  std::vector<NodeSample> samples =
      hooks_->NodeHistory(name, static_cast<double>(*since), &interval);
  const size_t n = samples.size();
  Json at = Json::array();
  std::map<int32_t, Json> gpus;  // by index: a GPU missing from a sample is null there
  for (size_t i = 0; i < n; ++i) {
    at.push_back(samples[i].at);
    for (const NodeGpuSample& g : samples[i].gpus) {
      Json& series = gpus[g.index];
      if (series.is_null()) {
        series = {{"index", g.index},
                  {"utilization", Json(n, nullptr)},
                  {"memoryUsedMib", Json(n, nullptr)}};
      }
      if (g.utilization >= 0) series["utilization"][i] = Rounded(g.utilization);
      if (g.memory_used_mib >= 0) series["memoryUsedMib"][i] = std::round(g.memory_used_mib);
    }
  }
  Json items = Json::array();
  for (auto& [index, series] : gpus) items.push_back(std::move(series));
  Respond(call, 200, {{"interval", interval}, {"at", at}, {"gpus", items}});
}

void Api::ListAlerts(Call& call) {
  const std::string state = call.req.has_param("state") ? call.req.get_param_value("state") : "";
  if (!state.empty() && state != "firing" && state != "pending") {
    return Fail(call, 400, "invalid_argument", "state: must be firing or pending", "state");
  }
  auto config = Config();
  auto visible = VisibleTenancy(call.access, config->tenancy, config->projects);
  // One rule for every alert, by what it is about (docs/adr/0017-alerting.md): a project's
  // alert is seen by who reads the project; a quota's as /usage shows it; a node's or GPU's by
  // everyone, as /api/v1/nodes is; the rest (the scheduler's own) by admins.
  auto sees = [&](const Json& labels) {
    if (!labels.is_object()) return call.access.IsAdmin();
    if (labels.contains("project")) return call.access.CanRead(labels.value("project", ""));
    if (labels.contains("scope")) return visible(labels.value("scope", ""));
    if (labels.contains("node")) return true;
    return call.access.IsAdmin();
  };
  Json items = Json::array();
  if (alerts_) {
    for (Json& a : alerts_->Alerts()) {
      if (!state.empty() && a.value("state", "") != state) continue;
      if (sees(a.value("labels", Json::object()))) items.push_back(std::move(a));
    }
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

// The running jobs that IdlePolicy documents find idle, and what is (or, in a dry run, would be)
// done about each: a job is seen by who may read its project, as its alerts are.
void Api::ListIdle(Call& call) {
  const std::string project =
      call.req.has_param("project") ? call.req.get_param_value("project") : "";
  Json items = Json::array();
  if (idle_) {
    for (Json& f : idle_->Idle()) {
      const std::string p = f.value("project", "");
      if (!project.empty() && p != project) continue;
      if (call.access.CanRead(p)) items.push_back(std::move(f));
    }
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

}  // namespace meridian::api
