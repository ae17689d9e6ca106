#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "base/clock.h"
#include "server/alert_eval.h"
#include "server/controller.h"
#include "server/nodes.h"
#include "server/telemetry_metrics.h"
#include "store/store.h"

// The server's alerting (docs/adr/0017-alerting.md): a loop on the server's clock evaluates the
// rules in force (the built-ins as AlertRule documents override them) and tells the receivers
// that AlertReceiver documents configure.
namespace meridian::server {

// Sends one JSON body to a receiver. Implementations: HttpAlertNotifier; tests record instead.
// Called from the alert loop's thread only.
class AlertNotifier {
 public:
  virtual ~AlertNotifier() = default;
  // POSTs `body` (application/json) to `url`; Ok on a 2xx answer.
  virtual base::Status Post(const std::string& url, const std::string& body) = 0;
};

// httplib, with short timeouts: a receiver that hangs delays the next evaluation by seconds, not
// minutes.
class HttpAlertNotifier final : public AlertNotifier {
 public:
  base::Status Post(const std::string& url, const std::string& body) override;
};

// Tells receivers about alerts, as AlertService describes; the sending half of it, apart so
// that its timing (resends, retries) is tested with a fake notifier and clock. Not thread-safe:
// the alert loop's thread only.
class AlertDispatcher {
 public:
  explicit AlertDispatcher(AlertNotifier* notifier) : notifier_(notifier) {}
  // Alerts link to {url}/api/v1/alerts.
  void SetGeneratorUrl(const std::string& url) { generator_url_ = url; }
  // `changed`: what this evaluation fired or resolved; `firing`: every firing alert; `resolved`:
  // those resolved lately (told to Alertmanager again, in case a resolution was lost).
  void Dispatch(const std::vector<domain::AlertReceiver>& receivers,
                const std::vector<Alert>& changed, const std::vector<Alert>& firing,
                const std::vector<Alert>& resolved, double now);

 private:
  struct Batch {
    std::string receiver;
    std::string url;
    std::string body;
  };
  void Webhook(const domain::AlertReceiver& r, const std::vector<Alert>& changed);
  void Alertmanager(const domain::AlertReceiver& r, bool changed, const std::vector<Alert>& firing,
                    const std::vector<Alert>& resolved, double now);
  domain::Json AlertmanagerAlert(const Alert& a, double ends_at) const;
  void LogOnce(const std::string& receiver, const base::Status& status);

  AlertNotifier* notifier_;
  std::string generator_url_;
  std::map<std::string, double> last_sent_;        // Alertmanager receiver -> when last told
  std::map<std::string, std::string> last_error_;  // receiver -> the last failure logged
  std::deque<Batch> retries_;                      // webhook batches not yet delivered, in order
};

struct AlertServiceOptions {
  double interval = 2;  // seconds between evaluations
};

// Evaluates the alert rules every `interval` seconds and notifies:
//  - Alertmanager receivers get every firing alert (endsAt four resend intervals ahead, so that
//    Alertmanager resolves it by itself if this server stops) and every alert resolved in the
//    last 15 minutes (endsAt its resolution), whenever an alert changes and at least every
//    resendInterval, as Prometheus does;
//  - webhook receivers get one POST per evaluation that changed something: {receiver, status,
//    alerts}, retried in order at the next evaluations while it fails (100 at most are kept).
// Silences, grouping and routing are Alertmanager's. Thread-safe: Alerts is called from the
// API's threads.
class AlertService final : public api::AlertHooks {
 public:
  AlertService(store::Store* store, const base::Clock* clock, SchedulerController* scheduler,
               NodeService* nodes, AlertNotifier* notifier, AlertServiceOptions options = {});
  ~AlertService() override;

  // Set before Start.
  void SetGeneratorUrl(const std::string& url) { dispatcher_.SetGeneratorUrl(url); }
  // Where the job-idle rule's jobs come from (the idle reclaimer's findings); set before Start.
  void SetBudgetSource(std::function<std::vector<AlertInputs::BudgetThreshold>()> source) {
    budget_source_ = std::move(source);
  }
  void SetIdleSource(std::function<std::vector<AlertInputs::IdleJob>()> source) {
    idle_source_ = std::move(source);
  }
  void Start();
  void Stop();

  // One evaluation and its notifications; Start's thread calls it, tests may instead.
  base::Status RunOnce();

  domain::Json Alerts() override;

 private:
  base::Status Gather(AlertInputs* inputs, std::vector<domain::AlertRule>* rules,
                      std::vector<domain::AlertReceiver>* receivers);
  void Loop();

  store::Store* store_;
  const base::Clock* clock_;
  SchedulerController* scheduler_;
  NodeService* nodes_;
  AlertServiceOptions options_;
  JobOutcomes outcomes_;  // jobs ended per project, for the failure rate
  std::function<std::vector<AlertInputs::IdleJob>()> idle_source_;
  std::function<std::vector<AlertInputs::BudgetThreshold>()> budget_source_;
  AlertDispatcher dispatcher_;  // the loop's thread only

  std::mutex mu_;  // guards evaluator_
  AlertEvaluator evaluator_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace meridian::server
