// The audit log's writer: entries that could not be written are kept and retried, never dropped
// in silence; failed authentications are written as one entry per address and minute.
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>

#include "api/api_internal.h"
#include "base/duration.h"
#include "base/log.h"

namespace meridian::api {

namespace {

// Past this many held entries the oldest go to the server's log only (each in full): the audit
// log's store is gone for good, and memory must not grow without bound.
constexpr size_t kMaxHeld = 10000;
// Past this many addresses in one minute, the rest are counted together as "other addresses".
constexpr size_t kMaxAddresses = 10000;

std::string EntryText(const store::AuditEntry& a) {
  return Json{{"at", a.at},     {"user", a.user},     {"method", a.method},
              {"path", a.path}, {"action", a.action}, {"project", a.project},
              {"code", a.code}, {"result", a.result}, {"message", a.message}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

struct Api::AuditState {
  std::mutex mu;
  std::deque<store::AuditEntry> held;  // not yet written: the store refused them
  std::atomic<size_t> held_count{0};
  struct Failures {
    int64_t count = 0;
    std::string method, path;
    std::map<std::string, int64_t> reasons;
  };
  std::mutex auth_mu;
  std::map<std::pair<int64_t, std::string>, Failures> failed;  // by (minute, address)
  std::atomic<int64_t> oldest_minute{INT64_MAX};
  std::map<std::string, int64_t> limited;  // token id -> the last minute a refusal was audited
};

std::shared_ptr<Api::AuditState> NewAuditState() { return std::make_shared<Api::AuditState>(); }

Api::~Api() { FlushFailedAuths(true); }

void Api::WriteAudit(store::AuditEntry entry) {
  AuditState& st = *audit_;
  std::vector<store::AuditEntry> batch;
  if (st.held_count.load() > 0) {
    std::lock_guard<std::mutex> lock(st.mu);
    batch.assign(st.held.begin(), st.held.end());
    st.held.clear();
    st.held_count = 0;
  }
  batch.push_back(std::move(entry));
  base::Status s = store_->Write([&](store::Tx& tx) {
    for (const store::AuditEntry& a : batch) {
      if (auto r = tx.AppendAudit(a); !r.ok()) return r.status();
    }
    return base::Status::Ok();
  });
  if (s.ok()) return;
  metrics_->Add("meridian_audit_write_failures_total", {}, 1);
  std::lock_guard<std::mutex> lock(st.mu);
  // The newest entry is logged in full at once, so that the server's log holds it whatever
  // happens to the process later; the held ones were logged when they first failed.
  base::log::Error("audit: cannot write to the store ({}); holding {} entr{} to retry: {}",
                   s.message(), batch.size(), batch.size() == 1 ? "y" : "ies",
                   EntryText(batch.back()));
  for (store::AuditEntry& a : batch) st.held.push_back(std::move(a));
  while (st.held.size() > kMaxHeld) {
    base::log::Error("audit: {} entries held; this one is in this log only: {}", st.held.size(),
                     EntryText(st.held.front()));
    st.held.pop_front();
  }
  st.held_count = st.held.size();
  metrics_->Set("meridian_audit_entries_held", {}, static_cast<double>(st.held.size()));
}

size_t Api::PendingAudit() { return audit_->held_count.load(); }

bool Api::NoteLimitedOnce(const std::string& token, double now) {
  AuditState& st = *audit_;
  const int64_t minute = static_cast<int64_t>(now / 60);
  std::lock_guard<std::mutex> lock(st.auth_mu);
  if (st.limited.size() >= kMaxAddresses) st.limited.clear();  // tokens are few; a bound anyway
  auto [it, fresh] = st.limited.emplace(token, minute);
  if (!fresh && it->second == minute) return false;
  it->second = minute;
  return true;
}

void Api::CountFailedAuth(const Call& call) {
  AuditState& st = *audit_;
  const int64_t minute = static_cast<int64_t>(call.started / 60);
  std::lock_guard<std::mutex> lock(st.auth_mu);
  std::string address = call.client.empty() ? call.req.remote_addr : call.client;
  if (!st.failed.count({minute, address}) && st.failed.size() >= kMaxAddresses) {
    address = "other addresses";
  }
  AuditState::Failures& f = st.failed[{minute, address}];
  ++f.count;
  f.method = call.req.method;
  f.path = call.req.path;
  ++f.reasons[call.auth_failure.empty() ? call.audit_message : call.auth_failure];
  if (minute < st.oldest_minute) st.oldest_minute = minute;
}

void Api::FlushFailedAuths(bool all) {
  AuditState& st = *audit_;
  const int64_t now_minute = static_cast<int64_t>(clock_->Now() / 60);
  // The common case, on every request: nothing is waiting for its minute to end.
  if (!all && st.oldest_minute.load() >= now_minute) return;
  std::vector<store::AuditEntry> entries;
  {
    std::lock_guard<std::mutex> lock(st.auth_mu);
    for (auto it = st.failed.begin(); it != st.failed.end();) {
      const auto& [key, f] = *it;
      if (!all && key.first >= now_minute) {
        ++it;
        continue;
      }
      std::string reasons;
      for (const auto& [why, n] : f.reasons) {
        reasons += (reasons.empty() ? "" : "; ") + why + " (" + std::to_string(n) + ")";
      }
      store::AuditEntry a;
      a.at = static_cast<double>(key.first * 60);
      a.method = f.method;
      a.path = f.path;
      a.action = "auth.failed";
      a.code = 401;
      a.result = "denied";
      a.message = std::to_string(f.count) + " failed authentication" + (f.count == 1 ? "" : "s") +
                  " from " + key.second + " in the minute from " + base::FormatUtc(a.at) + ": " +
                  reasons + "; last " + f.method + " " + f.path;
      entries.push_back(std::move(a));
      it = st.failed.erase(it);
    }
    st.oldest_minute = st.failed.empty() ? INT64_MAX : st.failed.begin()->first.first;
  }
  for (store::AuditEntry& a : entries) WriteAudit(std::move(a));
}

}  // namespace meridian::api
