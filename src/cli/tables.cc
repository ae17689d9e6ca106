#include "cli/tables.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <vector>

#include "base/duration.h"

namespace meridian::cli {

std::string GpuRequest(const Json& spec) {
  const int64_t gpus = spec.value("gpus", 0);
  const int64_t milli = spec.value("gpuMilli", 0);
  const std::string mig = spec.value("migProfile", "");
  const int64_t tasks = spec.value("tasks", 1);
  const std::string each = gpus > 0       ? std::to_string(gpus)
                           : milli > 0    ? Num(Json(static_cast<double>(milli) / 1000.0))
                           : !mig.empty() ? mig
                                          : "0";
  return tasks > 1 ? std::to_string(tasks) + "x" + each : each;
}

std::string ArrayPhases(const Json& array) {
  std::string out;
  for (const char* phase :
       {"Running", "Placed", "Stopping", "Pending", "Succeeded", "Failed", "Cancelled"}) {
    const int64_t n = array.at("phases").value(phase, int64_t{0});
    if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + phase;
  }
  return out;
}

std::string ListedId(const Json& j) {
  const Json& m = j.at("metadata");
  if (!m.contains("arrayId") || j.at("status").contains("array")) return Num(j.at("id"));
  return Num(m.at("arrayId")) + "_" + Num(m.at("arrayIndex"));
}

Table ElementsTable(const Json& elements, const Json& array_id) {
  Table t;
  t.headers = {"element", "job", "phase", "reason"};
  for (const Json& e : elements) {
    t.rows.push_back({Num(array_id) + "_" + Num(e.at("index")), Num(e.at("id")),
                      e.value("phase", ""), e.value("reason", "")});
  }
  return t;
}

Table JobsTable(const Json& items, bool wide, double now) {
  Table t;
  t.headers = {"id", "name", "project", "phase", "gpus", "age", "reason"};
  if (wide)
    t.headers = {"id",    "name", "project", "user",       "priority",
                 "phase", "gpus", "age",     "generation", "reason"};
  for (const Json& j : items) {
    const Json& m = j.at("metadata");
    const Json& s = j.at("status");
    std::string reason = s.value("reason", "");
    // An array is one line: its elements' counts by phase, and its size and limit.
    std::string phase = s.value("phase", "");
    std::string name = m.value("name", "");
    if (s.contains("array")) {
      phase = ArrayPhases(s.at("array"));
      name += "[" + j.at("spec").value("array", "") + "]";
      reason = "array of " + Num(s.at("array").at("size")) + " jobs";
    }
    if (!wide && reason.size() > 60) reason = reason.substr(0, 57) + "...";
    if (wide) {
      t.rows.push_back({ListedId(j), name, m.value("project", ""), m.value("user", ""),
                        j.at("spec").value("priorityClass", ""), phase, GpuRequest(j.at("spec")),
                        Age(s.value("submittedAt", now), now), Num(s.at("generation")), reason});
    } else {
      t.rows.push_back({ListedId(j), name, m.value("project", ""), phase, GpuRequest(j.at("spec")),
                        Age(s.value("submittedAt", now), now), reason});
    }
  }
  return t;
}

// Liveness, then what operators asked of it, as kubectl writes "Ready,SchedulingDisabled":
// "Ready", "Ready,Cordoned", "Ready,Draining", "Lost,Drained"; declared nodes have no state.
std::string NodeState(const Json& n) {
  std::string state = n.value("state", n.value("schedulable", true) ? "Ready" : "Cordoned");
  std::string scheduling = n.contains("scheduling") && n.at("scheduling").is_string()
                               ? n.at("scheduling").get<std::string>()
                               : "";
  if (!scheduling.empty()) {
    scheduling[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(scheduling[0])));
    state += "," + scheduling;
  }
  // A node its back end will not take work on (a Slurm node drained or down in Slurm):
  // "Ready,Unavailable"; `describe node` says why.
  if (!n.value("unavailable", "").empty()) state += ",Unavailable";
  // GPUs that work outside Meridian holds (a Slurm user's own job): "Ready,4 GPUs unmanaged".
  int64_t unmanaged = 0;
  for (const Json& g : n.value("gpus", Json::array())) {
    unmanaged += g.is_object() && !g.value("unmanaged", "").empty() ? 1 : 0;
  }
  if (unmanaged > 0) {
    state += "," + std::to_string(unmanaged) + (unmanaged == 1 ? " GPU" : " GPUs") + " unmanaged";
  }
  // GPUs cordoned for a fault: "Ready,GPU 2 cordoned", "Ready,GPUs 0 1 cordoned,GPU 3 held".
  std::vector<std::string> cordoned, held;
  for (const Json& g : n.value("gpuHealth", Json::array())) {
    if (!g.is_object() || !g.value("cordoned", false)) continue;
    (g.value("held", false) ? held : cordoned).push_back(std::to_string(g.value("index", 0)));
  }
  for (auto [list, word] : {std::pair{&cordoned, " cordoned"}, std::pair{&held, " held"}}) {
    if (list->empty()) continue;
    state += list->size() == 1 ? ",GPU " : ",GPUs ";
    for (size_t i = 0; i < list->size(); ++i) state += (i ? " " : "") + (*list)[i];
    state += word;
  }
  // Node conditions (warnings before failures, a node failing jobs): "Ready,FailingJobs",
  // "Ready,2 warnings"; `describe node` lists them.
  int64_t warnings = 0;
  for (const Json& c : n.value("conditions", Json::array())) {
    if (!c.is_object()) continue;
    if (c.value("type", "") == "FailingJobs") {
      state += ",FailingJobs";
    } else {
      ++warnings;
    }
  }
  if (warnings > 0) {
    state += "," + std::to_string(warnings) + (warnings == 1 ? " warning" : " warnings");
  }
  return state;
}

Table NodesTable(const Json& items, bool wide) {
  Table t;
  t.headers = {"name", "cluster", "model", "gpus", "free", "cpu free", "state", "source"};
  if (wide) t.headers.insert(t.headers.begin() + 2, {"pool", "rack"});
  for (const Json& n : items) {
    int free = 0;
    for (const Json& g : n.at("gpus")) free += g.value("freeMilli", 0) == 1000 ? 1 : 0;
    // Registered nodes are Ready or Lost; GPUs an agent only simulates say so.
    std::string source = n.value("source", "");
    if (n.value("simulated", false)) source += " (simulated GPUs)";
    std::vector<std::string> row = {
        n.value("name", ""),  n.value("cluster", ""),
        n.value("model", ""), std::to_string(n.at("gpus").size()),
        std::to_string(free), Num(Json(n.value("cpuFreeMilli", 0) / 1000.0)),
        NodeState(n),         source};
    if (wide) row.insert(row.begin() + 2, {n.value("pool", ""), n.value("rack", "")});
    t.rows.push_back(row);
  }
  return t;
}

// Firing and pending alerts: what they are about is in their labels.
Table AlertsTable(const Json& items, double now) {
  Table t;
  t.headers = {"alert", "severity", "state", "about", "since", "summary"};
  for (const Json& a : items) {
    const Json labels = a.value("labels", Json::object());
    std::string about;
    for (const char* k : {"node", "gpu", "job_id", "project", "level", "scope"}) {
      if (!labels.contains(k)) continue;
      about += (about.empty() ? "" : " ") + std::string(k) + "=" + labels.value(k, "");
    }
    t.rows.push_back({labels.value("alertname", ""), labels.value("severity", ""),
                      a.value("state", ""), about, Age(a.value("activeSince", now), now),
                      a.value("annotations", Json::object()).value("summary", "")});
  }
  return t;
}

// Running jobs an IdlePolicy finds idle, and what is (or, in a dry run, would be) done.
Table IdleTable(const Json& items, double now) {
  Table t;
  t.headers = {"job", "name",     "project", "type",  "gpus",
               "use", "idle for", "policy",  "state", "stop in"};
  for (const Json& f : items) {
    const Json& u = f.contains("utilization") ? f["utilization"] : Json();
    char use[32] = "-";
    if (u.is_number()) std::snprintf(use, sizeof use, "%.1f%%", 100 * u.get<double>());
    char gpus[32];
    std::snprintf(gpus, sizeof gpus, "%g", f.value("gpus", 0.0));
    std::string stop = "-";
    if (f.contains("stopAt") && f["stopAt"].is_number()) {
      const double left = f["stopAt"].get<double>() - now;
      stop = left > 0 ? std::to_string(static_cast<int64_t>(left)) + "s" : "due";
    }
    t.rows.push_back({std::to_string(f.value("job", int64_t{0})), f.value("name", ""),
                      f.value("project", ""), f.value("type", ""), gpus, use,
                      Age(f.value("idleSince", now), now), f.value("policy", ""),
                      f.value("state", ""), stop});
  }
  return t;
}

Table BudgetsTable(const Json& items) {
  Table t;
  t.headers = {"name", "scope",    "period", "limit",   "spent",
               "used", "forecast", "action", "blocking"};
  auto money_and_hours = [](const Json& v, double amount, double hours) {
    std::string out;
    char buf[64];
    if (amount > 0) {
      std::snprintf(buf, sizeof buf, "%.2f", v.value("cost", 0.0));
      out = buf;
    }
    if (hours > 0) {
      std::snprintf(buf, sizeof buf, "%.1f GPU-h", v.value("gpuHours", 0.0));
      out += (out.empty() ? "" : ", ") + std::string(buf);
    }
    return out;
  };
  for (const Json& o : items) {
    const Json& spec = o.at("spec");
    std::string scope;
    for (const char* level : {"organization", "team", "project"}) {
      if (spec.contains(level)) scope = std::string(level) + " " + spec.value(level, "");
    }
    const double amount = spec.value("amount", -1.0);
    const double hours = spec.value("gpuHours", -1.0);
    std::string period = spec.value("period", "month");
    if (period == "rolling") {
      const double window = spec.value("window", 0.0);
      period = window >= 2 * 86400 ? "last " + std::to_string(std::llround(window / 86400)) + "d"
                                   : "last " + std::to_string(std::llround(window / 3600)) + "h";
    }
    const Json limit = {{"cost", amount}, {"gpuHours", hours}};
    const Json status = o.value("status", Json());
    std::vector<std::string> row = {o.at("metadata").value("name", ""), scope, period,
                                    money_and_hours(limit, amount, hours)};
    if (status.is_object()) {
      char used[32];
      std::snprintf(used, sizeof used, "%.0f%%", status.value("percent", 0.0));
      char forecast[32];
      std::snprintf(forecast, sizeof forecast, "%.0f%%", status["forecast"].value("percent", 0.0));
      const std::string blocking = status.value("blocking", "");
      row.insert(row.end(),
                 {money_and_hours(status["spent"], amount, hours), used, forecast,
                  spec.value("action", "block-bursts"), blocking.empty() ? "-" : blocking});
    } else {
      // Not evaluated yet (the server evaluates budgets every few seconds).
      row.insert(row.end(), {"-", "-", "-", spec.value("action", "block-bursts"), "-"});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

// Columns of each configuration kind: its name, then the spec fields people look for.
Table ObjectsTable(const std::string& resource, const Json& items, bool wide, double now) {
  static const std::map<std::string, std::vector<std::string>> kColumns = {
      {"organizations", {"description"}},
      {"teams", {"organization"}},
      {"projects", {"team", "weight"}},
      {"quotas", {"organization", "team", "project", "gpuModel", "guaranteedGpus", "limitGpus"}},
      {"priorityclasses", {"value", "preempting"}},
      {"clusters", {"type", "region", "backend"}},
      {"nodepools", {"cluster", "nodes", "gpusPerNode", "gpuModel", "purpose"}},
      {"policies", {"placement", "queueOrder", "preemption", "backfill"}},
      {"alertrules", {"condition", "enabled", "severity", "for", "threshold"}},
      {"alertreceivers", {"type", "url"}},
      {"identityproviders", {"issuer", "clientId"}},
      {"idlepolicies",
       {"project", "jobTypes", "action", "threshold", "idleFor", "grace", "dryRun"}},
      {"datasets", {"sizeGib", "pinnedIn"}},
      {"users", {"roles"}},
  };
  Table t;
  t.headers = {"name"};
  auto cols = kColumns.count(resource) ? kColumns.at(resource) : std::vector<std::string>{};
  for (const std::string& c : cols) t.headers.push_back(c);
  t.headers.push_back("age");
  if (wide) t.headers.insert(t.headers.end(), {"version", "updated by"});
  for (const Json& o : items) {
    std::vector<std::string> row = {o.at("metadata").value("name", "")};
    const Json& spec = o.at("spec");
    for (const std::string& c : cols) {
      if (c == "roles") {
        std::string roles;
        for (const Json& r : spec.value("roles", Json::array())) {
          std::string scope = r.value("organization", r.value("team", r.value("project", "")));
          roles +=
              (roles.empty() ? "" : ",") + r.value("role", "") + (scope.empty() ? "" : "@" + scope);
        }
        row.push_back(roles);
      } else if (c == "limitGpus" && spec.value("limitGpus", -1.0) < 0) {
        row.push_back("none");
      } else {
        row.push_back(spec.contains(c) ? Num(spec.at(c)) : "");
      }
    }
    row.push_back(Age(o.at("metadata").value("updatedAt", now), now));
    if (wide) {
      row.push_back(Num(o.at("metadata").value("resourceVersion", Json(0))));
      row.push_back(o.at("metadata").value("updatedBy", ""));
    }
    t.rows.push_back(row);
  }
  return t;
}

Table EventsTable(const Json& items, double now) {
  Table t;
  t.headers = {"seq", "age", "type", "object", "reason", "message"};
  for (const Json& e : items) {
    t.rows.push_back({Num(e.at("seq")), Age(e.value("at", now), now), e.value("type", ""),
                      e.value("objectKind", "") + "/" + e.value("object", ""),
                      e.value("reason", ""), e.value("message", "")});
  }
  return t;
}

Table TokensTable(const Json& items, double now) {
  Table t;
  t.headers = {"id", "user", "description", "age", "expires", "revoked"};
  for (const Json& k : items) {
    t.rows.push_back({k.value("id", ""), k.value("user", ""), k.value("description", ""),
                      Age(k.value("createdAt", now), now),
                      k.at("expiresAt").is_null() ? "never" : Age(now, k.value("expiresAt", now)),
                      k.value("revoked", false) ? "yes" : "no"});
  }
  return t;
}

namespace {

// The time a job's tasks started and ended (as its agents reported them; 0 when not known).
double StatusTime(const Json& status, const char* key) {
  return status.contains(key) && status.at(key).is_number() ? status.at(key).get<double>() : 0;
}

// The job's exit code: the first task's that is not 0, else 0 once every task has one; "" while
// none is known.
std::string ExitCodeColumn(const Json& status) {
  const Json tasks = status.value("tasks", Json::array());
  bool all = !tasks.empty();
  for (const Json& t : tasks) {
    if (!t.is_object() || !t.contains("exitCode") || !t.at("exitCode").is_number_integer()) {
      all = false;
      continue;
    }
    if (t.at("exitCode").get<int64_t>() != 0) return Num(t.at("exitCode"));
  }
  return all ? "0" : "";
}

}  // namespace

Table JobHistoryTable(const Json& items, double now) {
  Table t;
  t.headers = {"id", "name", "user", "project", "phase", "start", "end", "elapsed", "exit code"};
  for (const Json& j : items) {
    const Json& m = j.at("metadata");
    const Json& s = j.at("status");
    const double start = StatusTime(s, "startedAt");
    const double end = StatusTime(s, "finishedAt");
    // A running job's elapsed time runs to now; one that never started has none.
    const std::string elapsed =
        start > 0 ? base::FormatElapsed((end > 0 ? end : now) - start) : "00:00:00";
    t.rows.push_back({ListedId(j), m.value("name", ""), m.value("user", ""), m.value("project", ""),
                      s.value("phase", ""), UtcTimestamp(start), UtcTimestamp(end), elapsed,
                      ExitCodeColumn(s)});
  }
  return t;
}

}  // namespace meridian::cli
