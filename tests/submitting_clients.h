#pragma once

// Clients that keep submitting jobs while a test breaks what is under the servers (PostgreSQL
// restarted, moved by Patroni): each submission carries its own Idempotency-Key and is sent
// again, to the next server, until one takes it, as `meridian submit` does. Afterwards every
// acknowledged submission must be one job in the store.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/server_process.h"

namespace meridian::testing {

class SubmittingClients {
 public:
  // `clients` threads submit 1-GPU jobs of `project` to `servers` until Stop.
  SubmittingClients(std::vector<const ServerProcess*> servers, std::string token,
                    std::string project, int clients = 2)
      : servers_(std::move(servers)), token_(std::move(token)), project_(std::move(project)) {
    for (int n = 0; n < clients; ++n) threads_.emplace_back([this, n] { Run(n); });
  }
  ~SubmittingClients() { Stop(); }

  void Stop() {
    submitting_ = false;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Acknowledged submissions: key (the job's name) -> job id.
  std::map<std::string, int64_t> acked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }
  size_t acked_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_.size();
  }
  // Attempts refused (no database, no leader) or cut off, and sent again; a follower's 307 is
  // not counted (the next server is tried at once).
  int retries() const { return retries_.load(); }
  // Submissions that no server took within 60 s (their client stopped then).
  int given_up() const { return given_up_.load(); }

  // Every acknowledged submission is one job, listed by `server`.
  void ExpectEachAcknowledgedOnce(const ServerProcess& server) const {
    std::map<std::string, int> made;
    std::string after;
    for (;;) {
      HttpResult page = Http(server, "GET", "/api/v1/jobs?limit=500" + after, token_);
      ASSERT_EQ(page.status, 200) << page.text;
      for (const Json& j : page.body["items"]) ++made[j["metadata"].value("name", "")];
      const Json& next = page.body["continue"];
      if (!next.is_number()) break;
      after = "&continue=" + std::to_string(next.get<int64_t>());
    }
    for (const auto& [key, id] : acked()) {
      EXPECT_EQ(made[key], 1) << key << " (job " << id << ")";
      EXPECT_EQ(GetJob(server, token_, id).value("id", int64_t{0}), id) << key;
    }
    for (const auto& [name, count] : made) EXPECT_LE(count, 1) << name;
  }

 private:
  void Run(int n) {
    for (int i = 0; submitting_; ++i) {
      const std::string key = "c" + std::to_string(n) + "-" + std::to_string(i);
      const Json job = {{"metadata", {{"name", key}, {"project", project_}}},
                        {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      int64_t id = 0;
      for (size_t attempt = 0; id == 0 && std::chrono::steady_clock::now() < deadline; ++attempt) {
        const ServerProcess& to = *servers_[(attempt + static_cast<size_t>(n)) % servers_.size()];
        HttpResult r =
            Http(to, "POST", "/api/v1/jobs", token_, job.dump(), {{"Idempotency-Key", key}});
        if (r.status == 201 || r.status == 200) {
          id = r.body.value("id", int64_t{0});
        } else if (r.status != 307) {
          ++retries_;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
      if (id == 0) {
        ++given_up_;
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        acked_[key] = id;
      }
      // Under the server's default write limit (50 a second per token) with two clients.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  const std::vector<const ServerProcess*> servers_;
  const std::string token_;
  const std::string project_;
  std::atomic<bool> submitting_{true};
  std::atomic<int> retries_{0};
  std::atomic<int> given_up_{0};
  mutable std::mutex mu_;
  std::map<std::string, int64_t> acked_;
  std::vector<std::thread> threads_;
};

}  // namespace meridian::testing
