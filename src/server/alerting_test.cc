// The alert dispatcher's timing with a recording notifier: what Alertmanager is sent and when
// (resends, endsAt), and webhook batches retried in order.
#include "server/alerting.h"

#include <gtest/gtest.h>

namespace meridian::server {
namespace {

using domain::Json;

class RecordingNotifier final : public AlertNotifier {
 public:
  base::Status Post(const std::string& url, const std::string& body) override {
    if (failing) return base::Status::Io(url + ": connection refused");
    posts.push_back({url, Json::parse(body)});
    return base::Status::Ok();
  }
  bool failing = false;
  std::vector<std::pair<std::string, Json>> posts;
};

Alert Firing(const std::string& node, double since) {
  Alert a;
  a.rule = "node-lost";
  a.labels = {{"alertname", "MeridianNodeLost"}, {"node", node}, {"severity", "critical"}};
  a.annotations = {{"summary", "Node " + node + " is lost"}};
  a.state = Alert::State::kFiring;
  a.active_since = since;
  a.fired_at = since;
  return a;
}

Alert Resolved(Alert a, double at) {
  a.state = Alert::State::kResolved;
  a.resolved_at = at;
  return a;
}

domain::AlertReceiver Receiver(const char* name, domain::AlertReceiver::Type type,
                               const char* url) {
  domain::AlertReceiver r;
  r.name = name;
  r.type = type;
  r.url = url;
  r.resend_interval = 60;
  return r;
}

constexpr double kAlertingNow = 1796140800;  // 2026-12-01T16:00:00Z

TEST(AlertDispatcher, AlertmanagerIsToldOnChangesAndEveryResendInterval) {
  RecordingNotifier n;
  AlertDispatcher d(&n);
  d.SetGeneratorUrl("http://meridian:8080");
  const std::vector<domain::AlertReceiver> am = {
      Receiver("am", domain::AlertReceiver::Type::kAlertmanager, "http://am:9093/")};
  const Alert a = Firing("n1", kAlertingNow);
  d.Dispatch(am, {a}, {a}, {}, kAlertingNow);
  ASSERT_EQ(n.posts.size(), 1u);
  EXPECT_EQ(n.posts[0].first, "http://am:9093/api/v2/alerts");
  const Json& sent = n.posts[0].second;
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0]["labels"]["alertname"], "MeridianNodeLost");
  EXPECT_EQ(sent[0]["startsAt"], "2026-12-01T16:00:00.000Z");
  EXPECT_EQ(sent[0]["endsAt"], "2026-12-01T16:04:00.000Z");  // four resend intervals ahead
  EXPECT_EQ(sent[0]["generatorURL"], "http://meridian:8080/api/v1/alerts");
  // Nothing changed and the interval has not passed: nothing sent.
  d.Dispatch(am, {}, {a}, {}, kAlertingNow + 59);
  EXPECT_EQ(n.posts.size(), 1u);
  d.Dispatch(am, {}, {a}, {}, kAlertingNow + 60);
  ASSERT_EQ(n.posts.size(), 2u);
  EXPECT_EQ(n.posts[1].second[0]["endsAt"], "2026-12-01T16:05:00.000Z");
  // Resolved: sent at once with endsAt its resolution, and again with the resends.
  const Alert r = Resolved(a, kAlertingNow + 70.5);
  d.Dispatch(am, {r}, {}, {r}, kAlertingNow + 70.5);
  ASSERT_EQ(n.posts.size(), 3u);
  EXPECT_EQ(n.posts[2].second[0]["endsAt"], "2026-12-01T16:01:10.500Z");
  // A failed send is retried at the next evaluation, not a resend interval later.
  n.failing = true;
  d.Dispatch(am, {}, {}, {r}, kAlertingNow + 131);
  n.failing = false;
  d.Dispatch(am, {}, {}, {r}, kAlertingNow + 133);
  EXPECT_EQ(n.posts.size(), 4u);
}

TEST(AlertDispatcher, WebhooksGetChangesAndFailedBatchesInOrder) {
  RecordingNotifier n;
  AlertDispatcher d(&n);
  const std::vector<domain::AlertReceiver> hook = {
      Receiver("hook", domain::AlertReceiver::Type::kWebhook, "http://hook/meridian")};
  const Alert a = Firing("n1", kAlertingNow);
  d.Dispatch(hook, {}, {a}, {}, kAlertingNow);  // no change: nothing to say
  EXPECT_TRUE(n.posts.empty());
  n.failing = true;
  d.Dispatch(hook, {a}, {a}, {}, kAlertingNow);
  const Alert r = Resolved(a, kAlertingNow + 5);
  d.Dispatch(hook, {r}, {}, {r}, kAlertingNow + 5);
  EXPECT_TRUE(n.posts.empty());
  n.failing = false;
  d.Dispatch(hook, {}, {}, {r}, kAlertingNow + 7);
  ASSERT_EQ(n.posts.size(), 2u);
  EXPECT_EQ(n.posts[0].first, "http://hook/meridian");
  EXPECT_EQ(n.posts[0].second["status"], "firing");
  EXPECT_EQ(n.posts[0].second["receiver"], "hook");
  EXPECT_EQ(n.posts[0].second["alerts"][0]["labels"]["node"], "n1");
  EXPECT_EQ(n.posts[1].second["status"], "resolved");
  EXPECT_EQ(n.posts[1].second["alerts"][0]["endsAt"], "2026-12-01T16:00:05.000Z");
}

}  // namespace
}  // namespace meridian::server
