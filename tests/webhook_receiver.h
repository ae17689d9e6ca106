#pragma once

// A webhook receiver that a test runs itself (an httplib server on loopback): what the server's
// alerting, or Alertmanager's routing, delivers to an AlertReceiver of type webhook.
#include <httplib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace meridian::testing {

// The test's own receiver: every POST it gets, by path, with when it came.
class WebhookReceiver {
 public:
  struct Delivery {
    std::chrono::steady_clock::time_point at;
    std::string path;
    nlohmann::json body;
  };
  WebhookReceiver() {
    server_.Post(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back({std::chrono::steady_clock::now(), req.path,
                      nlohmann::json::parse(req.body, nullptr, false)});
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~WebhookReceiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // The first delivery to `path` with an alert named `alertname` of `status` (firing or
  // resolved) whose labels include `labels`; nullopt when none came yet.
  std::optional<Delivery> Find(const std::string& path, const std::string& alertname,
                               const std::string& status,
                               const std::map<std::string, std::string>& labels = {}) {
    std::optional<Delivery> first;
    Each(path, alertname, status, labels, [&](const Delivery& d) {
      if (!first) first = d;
    });
    return first;
  }
  // How many such alerts came to `path`, over every delivery.
  int Count(const std::string& path, const std::string& alertname, const std::string& status,
            const std::map<std::string, std::string>& labels = {}) {
    int n = 0;
    Each(path, alertname, status, labels, [&](const Delivery&) { ++n; });
    return n;
  }
  std::string Dump() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const Delivery& d : got_) out += d.path + " " + d.body.dump() + "\n";
    return out;
  }

 private:
  // Calls `found` with the delivery of each matching alert, in the order they came.
  template <typename F>
  void Each(const std::string& path, const std::string& alertname, const std::string& status,
            const std::map<std::string, std::string>& labels, F found) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Delivery& d : got_) {
      if (d.path != path || !d.body.is_object()) continue;
      for (const nlohmann::json& a : d.body.value("alerts", nlohmann::json::array())) {
        const nlohmann::json l = a.value("labels", nlohmann::json::object());
        if (l.value("alertname", "") != alertname || a.value("status", "") != status) continue;
        bool match = true;
        for (const auto& [k, v] : labels) match = match && l.value(k, "") == v;
        if (match) found(d);
      }
    }
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Delivery> got_;
};

}  // namespace meridian::testing
