#include "server/alerting.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "base/log.h"

namespace meridian::server {

using base::Status;
using domain::Json;

namespace {

// RFC 3339 in UTC with milliseconds, as Alertmanager's API takes times.
std::string Rfc3339(double t) {
  const auto secs = static_cast<std::time_t>(std::floor(t));
  const int millis = static_cast<int>((t - std::floor(t)) * 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string Text(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// Splits "http://host:port/path" into what httplib's client takes ("http://host:port") and the
// path ("/path", "/" when none).
void SplitUrl(const std::string& url, std::string* origin, std::string* path) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  *origin = slash == std::string::npos ? url : url.substr(0, slash);
  *path = slash == std::string::npos ? "/" : url.substr(slash);
}

// A webhook's alert: the evaluator's JSON with times as RFC 3339 too.
Json WebhookAlert(const Alert& a, const std::string& generator) {
  Json j = a.ToJson();
  j["status"] = a.state == Alert::State::kResolved ? "resolved" : "firing";
  j["startsAt"] = Rfc3339(a.active_since);
  j["endsAt"] = a.resolved_at > 0 ? Json(Rfc3339(a.resolved_at)) : Json();
  j["generatorURL"] = generator;
  return j;
}

// The nodes as the rules see them: the scheduler's node list (every GPU, its health) with the
// node service's reports of registered nodes (liveness, the last samples, who holds each GPU).
std::vector<AlertInputs::Node> NodeInputs(
    const std::vector<SchedulerController::ScheduledNode>& nodes,
    const std::map<std::string, NodeService::NodeReport>& reports) {
  std::vector<AlertInputs::Node> out;
  out.reserve(nodes.size());
  for (const SchedulerController::ScheduledNode& n : nodes) {
    AlertInputs::Node node;
    node.name = n.name;
    node.cluster = n.cluster;
    auto r = reports.find(node.name);
    const NodeService::NodeReport* report = r == reports.end() ? nullptr : &r->second;
    node.registered = report != nullptr;
    node.lost = report && report->state == "Lost";
    if (report) node.conditions = report->conditions;
    for (const SchedulerController::ScheduledNode::Gpu& g : n.gpus) {
      AlertInputs::Gpu gpu;
      gpu.index = g.index;
      gpu.uuid = g.uuid;
      gpu.healthy = g.healthy;
      // A held GPU stays held while its node is lost: it waits for an operator either way.
      if (const domain::GpuHealth* health =
              report ? domain::FindGpu(report->ops.gpus, gpu.index) : nullptr;
          health && health->cordoned && health->held) {
        gpu.held = true;
        gpu.held_reason = health->reason + " (" + std::to_string(health->faults.size()) +
                          " fault(s) within the Policy's gpuHealth.faultWindow)";
      }
      if (report && !node.lost) {
        for (const protocol::GpuSample& s : report->gpus) {
          if (s.index != gpu.index) continue;
          gpu.utilization = s.utilization;
          gpu.xid_errors = s.xid_errors;
          gpu.last_xid = s.last_xid;
        }
        auto h = report->holders.find(gpu.index);
        if (h != report->holders.end()) {
          for (const NodeService::GpuHolder& holder : h->second) {
            gpu.holders.push_back({holder.job, holder.project});
          }
        }
      }
      node.gpus.push_back(std::move(gpu));
    }
    out.push_back(std::move(node));
  }
  return out;
}

}  // namespace

Status HttpAlertNotifier::Post(const std::string& url, const std::string& body) {
  std::string origin, path;
  SplitUrl(url, &origin, &path);
  httplib::Client client(origin);
  if (!client.is_valid()) return Status::Invalid("cannot reach " + origin + ": not a valid URL");
  client.set_connection_timeout(2);
  client.set_read_timeout(5);
  client.set_write_timeout(5);
  auto res = client.Post(path, body, "application/json");
  // The origin only: a webhook's path is often its secret, and this goes to the log.
  if (!res) return Status::Io(origin + ": " + httplib::to_string(res.error()));
  if (res->status < 200 || res->status >= 300) {
    return Status::Io(origin + " answered " + std::to_string(res->status) + ": " +
                      res->body.substr(0, 200));
  }
  return Status::Ok();
}

AlertService::AlertService(store::Store* store, const base::Clock* clock,
                           SchedulerController* scheduler, NodeService* nodes,
                           AlertNotifier* notifier, AlertServiceOptions options)
    : store_(store),
      clock_(clock),
      scheduler_(scheduler),
      nodes_(nodes),
      options_(std::move(options)),
      dispatcher_(notifier) {
  auto latest = store::ReadValue(*store_, [](store::Tx& tx) { return tx.LatestEventSeq(); });
  outcomes_.Start(latest.ok() ? *latest : 0);
}

AlertService::~AlertService() { Stop(); }

void AlertService::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void AlertService::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AlertService::Loop() {
  std::string last;
  for (;;) {
    Status s = RunOnce();
    if (!s.ok() && s.message() != last) {
      base::log::Error("alerts: {}", s.message());
    }
    last = s.ok() ? "" : s.message();
    std::unique_lock<std::mutex> lock(wake_mu_);
    if (wake_cv_.wait_for(lock, std::chrono::duration<double>(options_.interval),
                          [this] { return stopping_; })) {
      return;
    }
  }
}

Status AlertService::Gather(AlertInputs* in, std::vector<domain::AlertRule>* rules,
                            std::vector<domain::AlertReceiver>* receivers) {
  std::vector<store::Object> rule_docs, receiver_docs;
  Status read = store_->Read([&](store::Tx& tx) {
    auto r = tx.ListObjects("AlertRule");
    if (!r.ok()) return r.status();
    auto v = tx.ListObjects("AlertReceiver");
    if (!v.ok()) return v.status();
    rule_docs = std::move(r.value());
    receiver_docs = std::move(v.value());
    return Status::Ok();
  });
  if (!read.ok()) return read;
  std::map<std::string, Json> specs;
  for (const store::Object& o : rule_docs) specs[o.name] = o.spec;
  *rules = domain::EffectiveAlertRules(specs);
  for (const store::Object& o : receiver_docs) {
    receivers->push_back(domain::AlertReceiverFromSpec(o.name, o.spec));
  }

  in->nodes = NodeInputs(scheduler_->ScheduledNodes(), nodes_->Reports());
  in->oldest_pending = scheduler_->OldestPending();
  for (const Json& q : scheduler_->Usage()) {
    AlertInputs::Quota quota;
    quota.scope = Text(q, "name");
    quota.level = Text(q, "level");
    quota.used = q.value("usedGpus", 0.0);
    quota.limit =
        q.contains("limitGpus") && q["limitGpus"].is_number() ? q["limitGpus"].get<double>() : -1.0;
    in->quotas.push_back(std::move(quota));
  }
  // A store that cannot be read now is read at the next evaluation: the rate lags, not lies.
  if (Status s = outcomes_.Follow(*store_); !s.ok()) return s;
  in->ended = outcomes_.EndedTotals();
  in->scheduler_errors = static_cast<double>(scheduler_->CycleErrors());
  if (idle_source_) in->idle_jobs = idle_source_();
  if (budget_source_) in->budget_thresholds = budget_source_();
  for (const ElasticPools::Failure& f : scheduler_->ProvisioningFailures()) {
    in->pool_failures.push_back({f.pool, f.cluster, f.provisioner, f.what, f.in_a_row});
  }
  return Status::Ok();
}

Status AlertService::RunOnce() {
  AlertInputs inputs;
  std::vector<domain::AlertRule> rules;
  std::vector<domain::AlertReceiver> receivers;
  if (Status s = Gather(&inputs, &rules, &receivers); !s.ok()) return s;
  const double now = clock_->Now();
  std::vector<Alert> changed, active, resolved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    changed = evaluator_.Evaluate(rules, inputs, now);
    active = evaluator_.Active();
    resolved = evaluator_.Resolved(now, 900);
  }
  // A line for every change: what an operator greps the log for.
  for (const Alert& a : changed) {
    std::string labels;
    for (const auto& [k, v] : a.labels) {
      if (k != "alertname") labels += " " + k + "=" + v;
    }
    base::log::Warn(base::log::Fields{{"alert", a.labels.at("alertname")}}, "alert {}: {}{}",
                    AlertStateName(a.state), a.labels.at("alertname"), labels);
  }
  std::vector<Alert> firing;
  for (Alert& a : active) {
    if (a.state == Alert::State::kFiring) firing.push_back(std::move(a));
  }
  dispatcher_.Dispatch(receivers, changed, firing, resolved, now);
  return Status::Ok();
}

Json AlertDispatcher::AlertmanagerAlert(const Alert& a, double ends_at) const {
  return {{"labels", a.labels},
          {"annotations", a.annotations},
          {"startsAt", Rfc3339(a.active_since)},
          {"endsAt", Rfc3339(ends_at)},
          {"generatorURL", generator_url_ + "/api/v1/alerts"}};
}

void AlertDispatcher::LogOnce(const std::string& receiver, const Status& status) {
  const std::string message = status.ok() ? "" : status.message();
  std::string& last = last_error_[receiver];
  if (last == message) return;
  last = message;
  base::log::Log(message.empty() ? base::log::Level::kInfo : base::log::Level::kWarn, {},
                 "alerts: receiver {}: {}", receiver, message.empty() ? "delivers again" : message);
}

void AlertDispatcher::Dispatch(const std::vector<domain::AlertReceiver>& receivers,
                               const std::vector<Alert>& changed, const std::vector<Alert>& firing,
                               const std::vector<Alert>& resolved, double now) {
  // Webhook batches that failed before go first, in order, until one fails again.
  while (!retries_.empty()) {
    const Batch& b = retries_.front();
    Status s = notifier_->Post(b.url, b.body);
    LogOnce(b.receiver, s);
    if (!s.ok()) break;
    retries_.pop_front();
  }
  for (const domain::AlertReceiver& r : receivers) {
    if (r.type == domain::AlertReceiver::Type::kWebhook) {
      Webhook(r, changed);
    } else {
      Alertmanager(r, !changed.empty(), firing, resolved, now);
    }
  }
}

void AlertDispatcher::Webhook(const domain::AlertReceiver& r, const std::vector<Alert>& changed) {
  if (changed.empty()) return;
  const std::string generator = generator_url_ + "/api/v1/alerts";
  Json alerts = Json::array();
  bool any_firing = false;
  for (const Alert& a : changed) {
    alerts.push_back(WebhookAlert(a, generator));
    any_firing = any_firing || a.state == Alert::State::kFiring;
  }
  const Json body = {{"version", "1"},
                     {"receiver", r.name},
                     {"status", any_firing ? "firing" : "resolved"},
                     {"alerts", alerts}};
  Batch batch{r.name, r.url, body.dump()};
  // Behind an undelivered batch of the same receiver, it waits its turn: a receiver sees a
  // resolution after its firing.
  const bool queued = std::any_of(retries_.begin(), retries_.end(),
                                  [&](const Batch& b) { return b.receiver == r.name; });
  if (!queued) {
    Status s = notifier_->Post(batch.url, batch.body);
    LogOnce(r.name, s);
    if (s.ok()) return;
  }
  retries_.push_back(std::move(batch));
  while (retries_.size() > 100) retries_.pop_front();
}

void AlertDispatcher::Alertmanager(const domain::AlertReceiver& r, bool changed,
                                   const std::vector<Alert>& firing,
                                   const std::vector<Alert>& resolved, double now) {
  // Everything it should know, whenever something changed and at least every resendInterval;
  // it deduplicates by labels.
  auto last = last_sent_.find(r.name);
  const bool due = last == last_sent_.end() || now - last->second >= r.resend_interval;
  if (!changed && !due) return;
  if (firing.empty() && resolved.empty()) {
    last_sent_[r.name] = now;
    return;
  }
  Json alerts = Json::array();
  for (const Alert& a : firing) alerts.push_back(AlertmanagerAlert(a, now + 4 * r.resend_interval));
  for (const Alert& a : resolved) alerts.push_back(AlertmanagerAlert(a, a.resolved_at));
  std::string origin, path;
  SplitUrl(r.url, &origin, &path);
  if (!path.empty() && path.back() == '/') path.pop_back();
  Status s = notifier_->Post(origin + path + "/api/v2/alerts", alerts.dump());
  LogOnce(r.name, s);
  // A failed send is tried again at the next evaluation, not a resend interval later.
  if (s.ok()) last_sent_[r.name] = now;
}

Json AlertService::Alerts() {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const Alert& a : evaluator_.Active()) out.push_back(a.ToJson());
  return out;
}

}  // namespace meridian::server
