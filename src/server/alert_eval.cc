#include "server/alert_eval.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace meridian::server {

namespace {

using domain::AlertCondition;
using Labels = std::map<std::string, std::string>;

std::string Figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

Labels GpuLabels(const AlertInputs::Node& n, const AlertInputs::Gpu& g) {
  return {
      {"node", n.name}, {"cluster", n.cluster}, {"gpu", std::to_string(g.index)}, {"UUID", g.uuid}};
}

// A rule's `project` restricts it to one project; empty: every project.
bool ForProject(const domain::AlertRule& rule, const std::string& project) {
  return rule.project.empty() || rule.project == project;
}

using Candidates = std::vector<AlertEvaluator::Candidate>;

void NodeLost(const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  for (const AlertInputs::Node& n : in.nodes) {
    if (!n.registered || !n.lost) continue;
    out.push_back({{{"node", n.name}, {"cluster", n.cluster}},
                   {{"summary", "Node " + n.name + " of cluster " + n.cluster + " is lost"},
                    {"description",
                     "Its agent has not heartbeated for longer than the policy's "
                     "nodeLostTimeout; its jobs were requeued or failed."}},
                   1});
  }
}

void GpuUnhealthy(const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  for (const AlertInputs::Node& n : in.nodes) {
    for (const AlertInputs::Gpu& g : n.gpus) {
      if (g.healthy) continue;
      out.push_back(
          {GpuLabels(n, g),
           {{"summary", "GPU " + std::to_string(g.index) + " of node " + n.name + " is unhealthy"}},
           1});
    }
  }
}

void PendingJobAge(const domain::AlertRule& rule, const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  for (const auto& [project, age] : in.oldest_pending) {
    if (!ForProject(rule, project) || age <= rule.threshold) continue;
    out.push_back({{{"project", project}},
                   {{"summary", "The oldest pending job of project " + project + " has waited " +
                                    Figure(age) + " s"}},
                   age});
  }
}

void QuotaNearLimit(const domain::AlertRule& rule, const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  for (const AlertInputs::Quota& q : in.quotas) {
    if (!(q.limit > 0) || q.used < rule.threshold * q.limit) continue;
    out.push_back({{{"scope", q.scope}, {"level", q.level}},
                   {{"summary", "The " + q.level + " " + q.scope + " uses " + Figure(q.used) +
                                    " of its limit of " + Figure(q.limit) + " GPUs"}},
                   q.used / q.limit});
  }
}

void GpuIdle(const domain::AlertRule& rule, const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  for (const AlertInputs::Node& n : in.nodes) {
    if (n.lost) continue;
    for (const AlertInputs::Gpu& g : n.gpus) {
      if (!g.utilization || *g.utilization >= rule.threshold) continue;
      // One alert per job holding the GPU: each is its project's to act on.
      for (const AlertInputs::Holder& h : g.holders) {
        if (!ForProject(rule, h.project)) continue;
        Labels l = GpuLabels(n, g);
        l["job_id"] = std::to_string(h.job);
        l["project"] = h.project;
        out.push_back({std::move(l),
                       {{"summary", "Job " + std::to_string(h.job) + " holds GPU " +
                                        std::to_string(g.index) + " of node " + n.name + " at " +
                                        Figure(*g.utilization * 100) + "% use"}},
                       *g.utilization});
      }
    }
  }
}

// A node condition of `type` (domain/gpu_warnings.h): one alert per GPU it holds on, or per
// node for the node's own.
void NodeConditions(const char* type, const AlertInputs& in, Candidates* found) {
  auto& out = *found;
  // A lost node's warnings were left out by the node service; its FailingJobs flag stands.
  for (const AlertInputs::Node& n : in.nodes) {
    for (const domain::NodeCondition& c : n.conditions) {
      if (c.type != type) continue;
      Labels l = {{"node", n.name}, {"cluster", n.cluster}};
      if (c.gpu >= 0) {
        l["gpu"] = std::to_string(c.gpu);
        for (const AlertInputs::Gpu& g : n.gpus) {
          if (g.index == c.gpu) l["UUID"] = g.uuid;
        }
      }
      out.push_back({std::move(l),
                     {{"summary", "Node " + n.name + ": " + c.message}, {"condition", c.type}},
                     c.value});
    }
  }
}

void GpuHeld(const AlertInputs& in, Candidates* found) {
  for (const AlertInputs::Node& n : in.nodes) {
    for (const AlertInputs::Gpu& g : n.gpus) {
      if (!g.held) continue;
      found->push_back({GpuLabels(n, g),
                        {{"summary", "GPU " + std::to_string(g.index) + " of node " + n.name +
                                         " stays cordoned until an operator uncordons it"},
                         {"description", g.held_reason + "; after a repair: meridian uncordon " +
                                             n.name + " --gpu " + std::to_string(g.index)}},
                        1});
    }
  }
}

void JobIdle(const domain::AlertRule& rule, const AlertInputs& in, Candidates* found) {
  for (const AlertInputs::IdleJob& j : in.idle_jobs) {
    if (!ForProject(rule, j.project)) continue;
    found->push_back({{{"job_id", std::to_string(j.job)},
                       {"project", j.project},
                       {"policy", j.policy},
                       {"action", j.action}},
                      {{"summary", j.summary}},
                      j.utilization});
  }
}

void ProvisioningFailed(const AlertInputs& in, Candidates* found) {
  for (const AlertInputs::PoolFailure& f : in.pool_failures) {
    std::string summary = "Elastic pool " + f.pool + " (cluster " + f.cluster + ", provisioner " +
                          f.provisioner + "): " + f.what;
    if (f.in_a_row > 0) {
      summary += " (failure " + std::to_string(f.in_a_row) +
                 " in a row; the pool is backed off, and jobs that need new nodes go to another "
                 "pool or wait)";
    }
    found->push_back({{{"pool", f.pool}, {"cluster", f.cluster}},
                      {{"summary", summary}},
                      static_cast<double>(f.in_a_row)});
  }
}

void BudgetThreshold(const AlertInputs& in, Candidates* found) {
  for (const AlertInputs::BudgetThreshold& b : in.budget_thresholds) {
    std::string summary = "Budget " + b.budget + " (" + b.level + " " + b.scope + ") reached " +
                          std::to_string(b.threshold) + "%: " + b.summary;
    if (b.blocking) summary += "; no new cloud capacity is asked for its jobs";
    found->push_back({{{"budget", b.budget},
                       {"level", b.level},
                       {"scope", b.scope},
                       {"threshold", std::to_string(b.threshold)}},
                      {{"summary", summary}},
                      b.percent});
  }
}

}  // namespace

const char* AlertStateName(Alert::State s) {
  switch (s) {
    case Alert::State::kPending:
      return "pending";
    case Alert::State::kFiring:
      return "firing";
    case Alert::State::kResolved:
      return "resolved";
  }
  return "pending";
}

std::string Alert::Key() const {
  std::string key;
  for (const auto& [k, v] : labels) key += k + "=" + v + "\x1f";
  return key;
}

domain::Json Alert::ToJson() const {
  domain::Json j = {{"rule", rule},
                    {"state", AlertStateName(state)},
                    {"labels", labels},
                    {"annotations", annotations},
                    {"activeSince", active_since},
                    {"value", value}};
  j["firedAt"] = fired_at > 0 ? domain::Json(fired_at) : domain::Json();
  j["resolvedAt"] = resolved_at > 0 ? domain::Json(resolved_at) : domain::Json();
  return j;
}

double AlertEvaluator::Increase(const std::string& key, double value, double now, double window) {
  auto& s = samples_[key];
  if (s.empty()) s.push_back({now, 0});  // counted since the server started
  s.push_back({now, value});
  // Keep one sample at or before the window's start, so the increase covers the whole window.
  while (s.size() > 2 && s[1].first <= now - window) s.pop_front();
  const double base = s.front().second;
  // A counter that went down was reset: count from zero again.
  return value >= base ? value - base : value;
}

void AlertEvaluator::GpuXid(const domain::AlertRule& rule, const AlertInputs& in, double now,
                            std::vector<Candidate>* found) {
  auto& out = *found;
  for (const AlertInputs::Node& n : in.nodes) {
    for (const AlertInputs::Gpu& g : n.gpus) {
      const std::string id = g.uuid.empty() ? n.name + "/" + std::to_string(g.index) : g.uuid;
      auto seen = xid_seen_.try_emplace(id, 0, 0.0).first;
      if (g.xid_errors > seen->second.first) seen->second.second = now;
      // A lower count: the agent restarted. Only a rise is an event.
      seen->second.first = g.xid_errors;
      if (seen->second.second <= 0 || now - seen->second.second > rule.window) continue;
      out.push_back({GpuLabels(n, g),
                     {{"summary", "GPU " + std::to_string(g.index) + " of node " + n.name +
                                      " reported XID " + std::to_string(g.last_xid)},
                      {"xid", std::to_string(g.last_xid)}},
                     static_cast<double>(g.last_xid)});
    }
  }
}

void AlertEvaluator::JobFailureRate(const domain::AlertRule& rule, const AlertInputs& in,
                                    double now, std::vector<Candidate>* found) {
  auto& out = *found;
  for (const auto& [project, counts] : in.ended) {
    if (!ForProject(rule, project)) continue;
    const double ok = Increase(rule.name + "/ok/" + project, counts.first, now, rule.window);
    const double failed =
        Increase(rule.name + "/failed/" + project, counts.second, now, rule.window);
    const double ended = ok + failed;
    if (ended < static_cast<double>(rule.min_jobs) || ended <= 0) continue;
    const double rate = failed / ended;
    if (rate <= rule.threshold) continue;
    out.push_back(
        {{{"project", project}},
         {{"summary", "Project " + project + ": " + Figure(failed) + " of " + Figure(ended) +
                          " jobs ended in the last " + Figure(rule.window) + " s failed"}},
         rate});
  }
}

void AlertEvaluator::SchedulerErrors(const domain::AlertRule& rule, const AlertInputs& in,
                                     double now, std::vector<Candidate>* found) {
  auto& out = *found;
  const double errors = Increase(rule.name + "/scheduler", in.scheduler_errors, now, rule.window);
  if (errors >= rule.threshold) {
    out.push_back({{},
                   {{"summary", Figure(errors) + " scheduler cycles failed in the last " +
                                    Figure(rule.window) + " s (the server's log says why)"}},
                   errors});
  }
}

std::vector<AlertEvaluator::Candidate> AlertEvaluator::Check(const domain::AlertRule& rule,
                                                             const AlertInputs& in, double now) {
  std::vector<Candidate> out;
  switch (rule.condition) {
    case AlertCondition::kNodeLost:
      NodeLost(in, &out);
      break;
    case AlertCondition::kGpuUnhealthy:
      GpuUnhealthy(in, &out);
      break;
    case AlertCondition::kGpuXid:
      GpuXid(rule, in, now, &out);
      break;
    case AlertCondition::kPendingJobAge:
      PendingJobAge(rule, in, &out);
      break;
    case AlertCondition::kQuotaNearLimit:
      QuotaNearLimit(rule, in, &out);
      break;
    case AlertCondition::kGpuIdle:
      GpuIdle(rule, in, &out);
      break;
    case AlertCondition::kJobFailureRate:
      JobFailureRate(rule, in, now, &out);
      break;
    case AlertCondition::kSchedulerErrors:
      SchedulerErrors(rule, in, now, &out);
      break;
    case AlertCondition::kGpuEccCorrectedRate:
    case AlertCondition::kGpuTemperature:
    case AlertCondition::kGpuPowerCapped:
    case AlertCondition::kGpuNvlinkCrcErrors:
    case AlertCondition::kNodeFailingJobs:
      NodeConditions(domain::NodeConditionType(rule.condition), in, &out);
      break;
    case AlertCondition::kGpuHeld:
      GpuHeld(in, &out);
      break;
    case AlertCondition::kJobIdle:
      JobIdle(rule, in, &out);
      break;
    case AlertCondition::kProvisioningFailed:
      ProvisioningFailed(in, &out);
      break;
    case AlertCondition::kBudgetThreshold:
      BudgetThreshold(in, &out);
      break;
  }
  return out;
}

std::vector<Alert> AlertEvaluator::Evaluate(const std::vector<domain::AlertRule>& rules,
                                            const AlertInputs& inputs, double now) {
  std::vector<Alert> changed;
  std::set<std::string> holding;
  for (const domain::AlertRule& rule : rules) {
    for (Candidate& c : Check(rule, inputs, now)) {
      Alert a;
      a.rule = rule.name;
      a.labels = rule.labels;
      for (auto& [k, v] : c.labels) a.labels[k] = v;
      a.labels["alertname"] = rule.AlertName();
      a.labels["rule"] = rule.name;
      a.labels["severity"] = rule.severity;
      // An empty label is no label, to Prometheus and Alertmanager alike.
      std::erase_if(a.labels, [](const auto& kv) { return kv.second.empty(); });
      a.annotations = std::move(c.annotations);
      for (const auto& [k, v] : rule.annotations) a.annotations[k] = v;
      a.value = c.value;
      const std::string key = a.Key();
      holding.insert(key);
      auto [it, added] = active_.try_emplace(key, a);
      Alert& live = it->second;
      if (added) {
        live.active_since = now;
      } else {
        live.annotations = a.annotations;  // the figures move
        live.value = a.value;
      }
      if (live.state == Alert::State::kPending && now - live.active_since >= rule.for_seconds) {
        live.state = Alert::State::kFiring;
        live.fired_at = now;
        changed.push_back(live);
      }
    }
  }
  for (auto it = active_.begin(); it != active_.end();) {
    if (holding.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.state == Alert::State::kFiring) {
      Alert done = std::move(it->second);
      done.state = Alert::State::kResolved;
      done.resolved_at = now;
      changed.push_back(done);
      resolved_.push_back(std::move(done));
    }
    it = active_.erase(it);
  }
  // Resolved alerts are told for 15 minutes, as Prometheus does; nothing older is kept.
  while (!resolved_.empty() &&
         (now - resolved_.front().resolved_at > 900 || resolved_.size() > 10000)) {
    resolved_.pop_front();
  }
  return changed;
}

std::vector<Alert> AlertEvaluator::Active() const {
  std::vector<Alert> out;
  for (const auto& [key, a] : active_) out.push_back(a);
  return out;
}

std::vector<Alert> AlertEvaluator::Resolved(double now, double keep) const {
  std::vector<Alert> out;
  for (const Alert& a : resolved_) {
    if (now - a.resolved_at <= keep) out.push_back(a);
  }
  return out;
}

}  // namespace meridian::server
