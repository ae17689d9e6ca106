#include "cli/verbs.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "base/strings.h"
#include "cli/output.h"
#include "domain/documents.h"

namespace meridian::cli {

namespace {

// Calls the API. On failure prints why and stores the exit code in *code.
std::optional<Json> Do(Context& c, const std::string& method, const std::string& path,
                       const Json* body, int* code) {
  auto r = c.client.Call(method, path, body);
  if (!r.ok()) {
    c.err << "meridian: " << r.status().message() << "\n";
    *code = r.status().code() == base::StatusCode::kInvalidArgument ? kExitUsage : kExitUnavailable;
    return std::nullopt;
  }
  if (r->status >= 300) {
    c.err << "meridian: " << ErrorMessage(*r) << "\n";
    *code = ExitCodeFor(r->status);
    return std::nullopt;
  }
  *code = kExitOk;
  return r->body;
}

bool Structured(const Context& c) { return c.output == "json" || c.output == "yaml"; }

void PrintStructured(Context& c, const Json& value) {
  if (c.output == "json") {
    c.out << value.dump(2) << "\n";
  } else {
    c.out << ToYaml(value);
  }
}

// `path` with the non-empty parameters as its query, each value encoded (a user named
// "a&phase=Failed" is one value).
std::string WithQuery(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& params) {
  httplib::Params given;
  for (const auto& [k, v] : params) {
    if (!v.empty()) given.emplace(k, v);
  }
  return httplib::append_query_params(path, given);
}

// Whether `text` is a job id; says so and returns false otherwise (job ids are numbers).
bool JobId(Context& c, const std::string& text) {
  long long id = 0;
  if (base::ParseInt64(text, &id) && id > 0) return true;
  c.err << "meridian: job \"" << text << "\": a job is named by its id, a number (meridian get "
        << "jobs lists them)\n";
  return false;
}

// The canonical resource name for what people type: "job", "jobs", "pc", ...
std::string Resource(std::string r) {
  static const std::map<std::string, std::string> kAliases = {
      {"job", "jobs"},
      {"node", "nodes"},
      {"cluster", "clusters"},
      {"project", "projects"},
      {"quota", "quotas"},
      {"event", "events"},
      {"team", "teams"},
      {"organization", "organizations"},
      {"org", "organizations"},
      {"orgs", "organizations"},
      {"priorityclass", "priorityclasses"},
      {"pc", "priorityclasses"},
      {"nodepool", "nodepools"},
      {"pool", "nodepools"},
      {"pools", "nodepools"},
      {"policy", "policies"},
      {"user", "users"},
      {"token", "tokens"},
      {"revision", "revisions"},
      {"alert", "alerts"},
      {"alertrule", "alertrules"},
      {"rule", "alertrules"},
      {"rules", "alertrules"},
      {"alertreceiver", "alertreceivers"},
      {"receiver", "alertreceivers"},
      {"receivers", "alertreceivers"},
  };
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char ch) { return std::tolower(ch); });
  auto it = kAliases.find(r);
  return it == kAliases.end() ? r : it->second;
}

const std::vector<std::string>& ConfigResources() {
  static const std::vector<std::string> kResources = {
      "organizations", "teams",     "projects", "quotas",     "priorityclasses",
      "clusters",      "nodepools", "policies", "alertrules", "alertreceivers"};
  return kResources;
}

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
    if (!wide && reason.size() > 60) reason = reason.substr(0, 57) + "...";
    if (wide) {
      t.rows.push_back({Num(j.at("id")), m.value("name", ""), m.value("project", ""),
                        m.value("user", ""), j.at("spec").value("priorityClass", ""),
                        s.value("phase", ""), GpuRequest(j.at("spec")),
                        Age(s.value("submittedAt", now), now), Num(s.at("generation")), reason});
    } else {
      t.rows.push_back({Num(j.at("id")), m.value("name", ""), m.value("project", ""),
                        s.value("phase", ""), GpuRequest(j.at("spec")),
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

// Reads the documents a -f names: a file, or every *.yaml/*.yml in a folder (sorted).
base::Result<Json> ReadFiles(const std::vector<std::string>& paths) {
  Json files = Json::array();
  for (const std::string& p : paths) {
    std::vector<std::string> names;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(p, ec)) {
        const std::string ext = entry.path().extension().string();
        if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
          names.push_back(entry.path().string());
        }
      }
      std::sort(names.begin(), names.end());
      if (names.empty()) return base::Status::Invalid(p + ": no .yaml or .yml files");
    } else {
      names.push_back(p);
    }
    for (const std::string& name : names) {
      std::ifstream in(name);
      if (!in) return base::Status::Invalid(name + ": cannot read");
      std::stringstream text;
      text << in.rdbuf();
      files.push_back({{"name", name}, {"content", text.str()}});
    }
  }
  return files;
}

// A field's value in a plan: JSON, compact; absent as "(none)".
std::string FieldValue(const Json& v) { return v.is_null() ? "(none)" : v.dump(); }

void PrintChanges(Context& c, const Json& changes) {
  int create = 0, update = 0, remove = 0;
  for (const Json& ch : changes) {
    const std::string action = ch.at("action");
    const std::string what = ch.value("kind", "") + " " + ch.value("name", "");
    if (action == "create") {
      ++create;
      c.out << "  + " << what << "\n";
    } else if (action == "update") {
      ++update;
      std::string fields;
      for (const Json& f : ch.value("fields", Json::array())) {
        fields += (fields.empty() ? "" : ", ") + f.get<std::string>();
      }
      c.out << "  ~ " << what << ": " << fields;
      if (ch.value("drift", false)) {
        c.out << " (changed through the API since revision " << Num(ch.at("lastRevision")) << ")";
      }
      c.out << "\n";
      // Old -> new, one line per field, as Terraform shows a plan.
      for (const Json& f : ch.value("fieldChanges", Json::array())) {
        c.out << "      " << f.value("field", "") << ": " << FieldValue(f.at("before")) << " -> "
              << FieldValue(f.at("after")) << "\n";
      }
    } else {
      ++remove;
      c.out << "  - " << what;
      if (ch.value("drift", false)) c.out << " (created through the API, not in the documents)";
      c.out << "\n";
    }
  }
  if (changes.empty()) {
    c.out << "No changes: the live state matches the documents.\n";
  } else {
    c.out << "Plan: " << create << " to create, " << update << " to update, " << remove
          << " to delete.\n";
  }
}

}  // namespace

int Login(Context& c, bool save) {
  int code = 0;
  auto me = Do(c, "GET", "/api/v1/whoami", nullptr, &code);
  if (!me) return code;
  if (save) {
    if (base::Status s = SaveConfig(c.config_path, c.client.config()); !s.ok()) {
      c.err << "meridian: " << s.message() << "\n";
      return kExitError;
    }
  }
  c.out << "Logged in to " << c.client.config().server << " as " << me->value("user", "")
        << (save ? " (saved in " + c.config_path + ")" : "") << ".\n";
  return kExitOk;
}

int Get(Context& c, const std::string& resource_in, const std::string& name, const GetFlags& f) {
  const std::string resource = Resource(resource_in);
  const bool wide = c.output == "wide";
  int code = 0;
  std::string path;
  if ((resource == "jobs" && !name.empty() && !JobId(c, name)) ||
      (!f.job.empty() && !JobId(c, f.job))) {
    return kExitUsage;
  }
  // Listings show the newest first: the jobs and events people ask about are the recent ones.
  if (resource == "jobs") {
    if (!name.empty()) {
      path = "/api/v1/jobs/" + name;
    } else {
      path = WithQuery("/api/v1/jobs", {{"project", f.project},
                                        {"phase", f.phase},
                                        {"user", f.user},
                                        {"limit", std::to_string(f.limit)},
                                        {"order", "newest"}});
    }
  } else if (resource == "events") {
    path = f.job.empty() ? WithQuery("/api/v1/events",
                                     {{"limit", std::to_string(f.limit)}, {"order", "newest"}})
                         : WithQuery("/api/v1/jobs/" + f.job + "/events", {{"order", "newest"}});
  } else if (resource == "nodes") {
    path = "/api/v1/nodes" + (name.empty() ? "" : "/" + httplib::detail::encode_query_param(name));
  } else if (resource == "users" || resource == "tokens") {
    path = "/api/v1/" + resource;
  } else if (resource == "alerts") {
    path = "/api/v1/alerts";
  } else if (std::count(ConfigResources().begin(), ConfigResources().end(), resource)) {
    path = "/api/v1/" + resource + (name.empty() ? "" : "/" + name);
  } else {
    c.err << "meridian: unknown resource \"" << resource_in
          << "\" (jobs, nodes, events, alerts, clusters, nodepools, projects, teams, "
             "organizations, quotas, priorityclasses, policies, alertrules, alertreceivers, "
             "users, tokens)\n";
    return kExitUsage;
  }
  auto body = Do(c, "GET", path, nullptr, &code);
  if (!body) return code;
  Json items = body->contains("items") ? body->at("items") : Json::array({*body});
  if (!name.empty() && (resource == "users" || resource == "tokens")) {
    // Listed whole by the API: the one named, or none.
    Json named = Json::array();
    for (const Json& item : items) {
      const std::string key = resource == "tokens" ? item.value("id", "")
                              : item.contains("metadata")
                                  ? item["metadata"].value("name", "")
                                  : item.value("name", "");
      if (key == name) named.push_back(item);
    }
    if (named.empty()) {
      c.err << "meridian: " << resource.substr(0, resource.size() - 1) << " \"" << name
            << "\" not found\n";
      return kExitNotFound;
    }
    items = std::move(named);
  }
  // Events read in the order they happened: the newest `limit` of them, oldest first.
  if (resource == "events") std::reverse(items.begin(), items.end());
  // --all pages through jobs with the continue token.
  while (resource == "jobs" && name.empty() && f.all && body->contains("continue") &&
         !body->at("continue").is_null()) {
    body = Do(c, "GET", path + "&continue=" + std::to_string(body->at("continue").get<int64_t>()),
              nullptr, &code);
    if (!body) return code;
    for (const Json& j : body->at("items")) items.push_back(j);
  }
  if (Structured(c)) {
    PrintStructured(c, name.empty() ? Json{{"items", items}} : items.at(0));
    return kExitOk;
  }
  if (resource == "jobs") {
    JobsTable(items, wide, c.now).Print(c.out);
  } else if (resource == "nodes") {
    NodesTable(items, wide).Print(c.out);
  } else if (resource == "events") {
    EventsTable(items, c.now).Print(c.out);
  } else if (resource == "tokens") {
    TokensTable(items, c.now).Print(c.out);
  } else if (resource == "alerts") {
    AlertsTable(items, c.now).Print(c.out);
  } else {
    ObjectsTable(resource, items, wide, c.now).Print(c.out);
  }
  return kExitOk;
}

int Describe(Context& c, const std::string& resource_in, const std::string& name) {
  const std::string resource = Resource(resource_in);
  int code = 0;
  if (resource != "jobs") {
    if (name.empty()) {
      c.err << "meridian: describe needs a name\n";
      return kExitUsage;
    }
    // One node is its row of the node list (with its operator state and GPU health).
    auto body = Do(c, "GET", "/api/v1/" + resource + "/" + name, nullptr, &code);
    if (!body) return code;
    if (Structured(c)) {
      PrintStructured(c, *body);
    } else {
      c.out << ToYaml(*body);
    }
    return kExitOk;
  }
  auto job = Do(c, "GET", "/api/v1/jobs/" + name, nullptr, &code);
  if (!job) return code;
  auto events = Do(c, "GET", "/api/v1/jobs/" + name + "/events", nullptr, &code);
  if (!events) return code;
  auto why = Do(c, "GET", "/api/v1/jobs/" + name + "/explanation", nullptr, &code);
  if (!why) return code;
  if (Structured(c)) {
    PrintStructured(c, {{"job", *job}, {"events", events->at("items")}, {"explanation", *why}});
    return kExitOk;
  }
  const Json& m = job->at("metadata");
  const Json& s = job->at("status");
  c.out << "Job:          " << Num(job->at("id")) << " (" << m.value("name", "") << ")\n"
        << "Project:      " << m.value("project", "") << "\n"
        << "User:         " << m.value("user", "") << "\n"
        << "Phase:        " << s.value("phase", "") << "\n"
        << "Reason:       " << s.value("reason", "") << "\n"
        << "Request:      " << GpuRequest(job->at("spec")) << " GPU(s)\n"
        << "Submitted:    " << Age(s.value("submittedAt", c.now), c.now) << " ago\n";
  if (s.contains("cause")) c.out << "Cause:        " << s.value("cause", "") << "\n";
  // Each task's end, as its agent diagnosed it (killed for memory, a missing command, ...).
  const Json tasks = s.value("tasks", Json::array());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Json& t = tasks[i];
    if (!t.is_object() || !t.contains("cause")) continue;
    c.out << "  task " << i << ": " << t.value("cause", "") << ": " << t.value("message", "")
          << "\n";
  }
  if (!s.at("allocation").empty()) {
    c.out << "Allocation:\n";
    for (const Json& t : s.at("allocation")) {
      std::string gpus;
      for (const Json& d : t.at("devices")) gpus += (gpus.empty() ? "" : ",") + Num(d.at("gpu"));
      c.out << "  task " << Num(t.at("task")) << ": " << t.value("cluster", "") << "/"
            << t.value("node", "") << " GPUs " << (gpus.empty() ? "-" : gpus) << "\n";
    }
  }
  if (s.value("phase", "") == "Pending") {
    c.out << "Why pending:\n";
    if (why->contains("quota") && !why->at("quota").is_null()) {
      c.out << "  quota: " << why->at("quota").get<std::string>() << "\n";
    }
    for (const Json& cl : why->value("clusters", Json::array())) {
      c.out << "  " << cl.value("name", "") << ": " << cl.value("reason", "") << "\n";
    }
    if (why->contains("estimatedStart") && !why->at("estimatedStart").is_null()) {
      c.out << "  estimated start: in " << Age(c.now, why->at("estimatedStart").get<double>())
            << "\n";
    } else {
      c.out << "  estimated start: unknown (no runtime estimates cover it)\n";
    }
  }
  c.out << "Events:\n";
  EventsTable(events->at("items"), c.now).Print(c.out);
  return kExitOk;
}

int Submit(Context& c, const SubmitFlags& f) {
  Json doc;
  if (!f.file.empty()) {
    std::ifstream in(f.file);
    if (!in) {
      c.err << "meridian: " << f.file << ": cannot read\n";
      return kExitUsage;
    }
    std::stringstream text;
    text << in.rdbuf();
    // The server checks the same rules; checking here first points at the line in the file.
    std::vector<domain::FieldError> syntax;
    auto docs = domain::ParseYamlDocuments(text.str(), f.file, &syntax);
    domain::ErrorList errors;
    for (const domain::FieldError& e : syntax) errors.Add(e);
    if (docs.ok() && docs->size() != 1) {
      errors.Add({f.file, 0, 0, "", "expected one job document"});
    } else if (docs.ok()) {
      domain::ValidateJobDocument(docs->front(), &errors);
    }
    if (!errors.empty()) {
      c.err << "meridian: " << errors.ToString() << "\n";
      return kExitUsage;
    }
    doc = docs->front().value;
  } else {
    Json spec = {{"tasks", f.tasks}};
    if (f.gpus > 0) spec["gpus"] = f.gpus;
    if (f.gpu_milli > 0) spec["gpuMilli"] = f.gpu_milli;
    if (!f.mig_profile.empty()) spec["migProfile"] = f.mig_profile;
    if (f.cpu_milli > 0) spec["cpuMilli"] = f.cpu_milli;
    if (f.memory_mib > 0) spec["memoryMib"] = f.memory_mib;
    if (f.runtime_estimate > 0) spec["runtimeEstimate"] = f.runtime_estimate;
    if (f.runtime_limit > 0) spec["runtimeLimit"] = f.runtime_limit;
    if (!f.priority_class.empty()) spec["priorityClass"] = f.priority_class;
    if (!f.gpu_models.empty()) spec["gpuModels"] = f.gpu_models;
    if (!f.clusters.empty()) spec["clusters"] = f.clusters;
    if (!f.image.empty()) spec["image"] = f.image;
    if (!f.command.empty()) spec["command"] = f.command;
    if (!f.type.empty()) spec["type"] = f.type;
    if (f.grace_period >= 0) spec["gracePeriod"] = f.grace_period;
    // KEY=VALUE flags: a missing '=' is an error for --selector and --env; a toleration may name
    // a key alone (any value).
    auto pairs = [&](const std::vector<std::string>& items, const char* flag, bool value_optional,
                     Json* out) {
      for (const std::string& item : items) {
        const size_t eq = item.find('=');
        if ((eq == std::string::npos && !value_optional) || eq == 0) {
          c.err << "meridian: " << flag << " " << item << ": expected KEY=VALUE\n";
          return false;
        }
        out->push_back({item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1)});
      }
      return true;
    };
    Json selector = Json::array(), tolerations = Json::array(), env = Json::array();
    if (!pairs(f.selector, "--selector", false, &selector) ||
        !pairs(f.tolerations, "--toleration", true, &tolerations) ||
        !pairs(f.env, "--env", false, &env)) {
      return kExitUsage;
    }
    for (const Json& kv : selector) spec["nodeSelector"][kv[0].get<std::string>()] = kv[1];
    for (const Json& kv : env) spec["env"][kv[0].get<std::string>()] = kv[1];
    for (const Json& kv : tolerations) {
      Json t = {{"key", kv[0]}};
      if (!kv[1].get<std::string>().empty()) t["value"] = kv[1];
      spec["tolerations"].push_back(t);
    }
    doc = {{"metadata", {{"name", f.name}, {"project", f.project}}}, {"spec", spec}};
  }
  int code = 0;
  auto job = Do(c, "POST", "/api/v1/jobs", &doc, &code);
  if (!job) return code;
  if (Structured(c)) {
    PrintStructured(c, *job);
  } else {
    c.out << "job " << Num(job->at("id")) << " submitted to "
          << job->at("metadata").value("project", "") << "\n";
  }
  return kExitOk;
}

int Cancel(Context& c, const std::string& id) {
  int code = 0;
  auto job = Do(c, "POST", "/api/v1/jobs/" + id + "/cancel", nullptr, &code);
  if (!job) return code;
  c.out << "job " << id << " cancelled\n";
  return kExitOk;
}

int Cordon(Context& c, const std::string& node, bool cordoned) {
  int code = 0;
  auto r =
      Do(c, "POST", "/api/v1/nodes/" + node + (cordoned ? "/cordon" : "/uncordon"), nullptr, &code);
  if (!r) return code;
  c.out << "node " << node << (cordoned ? " cordoned" : " uncordoned") << "\n";
  return kExitOk;
}

int UncordonGpu(Context& c, const std::string& node, int gpu) {
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/nodes/" + node + "/gpus/" + std::to_string(gpu) + "/uncordon",
              nullptr, &code);
  if (!r) return code;
  c.out << "GPU " << gpu << " of node " << node << " uncordoned\n";
  return kExitOk;
}

int InjectFault(Context& c, const std::string& node, int gpu, int xid) {
  Json body = {{"xid", xid}};
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/nodes/" + node + "/gpus/" + std::to_string(gpu) + "/faults",
              &body, &code);
  if (!r) return code;
  c.out << "XID " << xid << " (" << r->value("meaning", "") << ") injected into GPU " << gpu
        << " of node " << node << "; its scope: " << r->value("scope", "") << "\n";
  return kExitOk;
}

int Drain(Context& c, const std::string& node, const DrainFlags& f) {
  Json body = Json::object();
  if (f.timeout >= 0) body["deadline"] = f.timeout;
  if (!f.reason.empty()) body["reason"] = f.reason;
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/nodes/" + node + "/drain", &body, &code);
  if (!r) return code;
  const Json stopping = r->value("stopping", Json::array());
  c.out << "node " << node << " cordoned; " << stopping.size() << " job"
        << (stopping.size() == 1 ? "" : "s") << " asked to stop";
  for (size_t i = 0; i < stopping.size(); ++i) c.out << (i ? ", " : " (") << Num(stopping[i]);
  c.out << (stopping.empty() ? "" : ")") << "\n";
  if (!f.wait) return kExitOk;
  // Until every job has left it: their tasks stop by the deadline, then a minute for the
  // agent to say so.
  const Json& drain = r->at("drain");
  const double within =
      drain.is_object() ? drain.value("deadline", 0.0) - drain.value("at", 0.0) : 0.0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(within + 60);
  for (;;) {
    auto nodes = Do(c, "GET", "/api/v1/nodes", nullptr, &code);
    if (!nodes) return code;
    std::string scheduling;
    for (const Json& n : nodes->value("items", Json::array())) {
      if (n.value("name", "") == node && n.contains("scheduling") && n["scheduling"].is_string()) {
        scheduling = n["scheduling"];
      }
    }
    if (scheduling == "drained") break;
    if (scheduling != "draining") {
      c.err << "meridian: node " << node << " is no longer draining\n";
      return kExitError;
    }
    if (std::chrono::steady_clock::now() > until) {
      c.err << "meridian: node " << node << " still has jobs on it; see `meridian get jobs`\n";
      return kExitError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  c.out << "node " << node << " drained\n";
  return kExitOk;
}

int Delete(Context& c, const std::string& resource_in, const std::string& name, bool force) {
  const std::string resource = Resource(resource_in);
  std::string path;
  if (resource == "nodes") {
    path = "/api/v1/nodes/" + name + (force ? "?force=true" : "");
  } else if (std::count(ConfigResources().begin(), ConfigResources().end(), resource)) {
    path = "/api/v1/" + resource + "/" + name;
  } else {
    c.err << "meridian: cannot delete \"" << resource_in
          << "\" (nodes, or a configuration kind: clusters, nodepools, projects, ...)\n";
    return kExitUsage;
  }
  int code = 0;
  auto r = Do(c, "DELETE", path, nullptr, &code);
  if (!r) return code;
  c.out << resource_in << " " << name << " deleted\n";
  return kExitOk;
}

int Logs(Context& c, const std::string& id, int task, bool follow) {
  int64_t offset = 0;
  int quiet_after_end = 0;
  for (;;) {
    auto r = c.client.Raw("GET",
                          "/api/v1/jobs/" + id + "/logs?task=" + std::to_string(task) +
                              "&offset=" + std::to_string(offset),
                          "", "text/plain");
    if (!r.ok()) {
      c.err << "meridian: " << r.status().message() << "\n";
      return kExitUnavailable;
    }
    if (r->status != 200) {
      Response error{r->status, Json::parse(r->body, nullptr, false)};
      c.err << "meridian: " << ErrorMessage(error) << "\n";
      return ExitCodeFor(r->status);
    }
    c.out << r->body << std::flush;
    auto next = r->headers.find("X-Meridian-Log-Offset");
    if (next != r->headers.end()) offset = std::stoll(next->second);
    if (!follow) return kExitOk;
    const std::string phase =
        r->headers.count("X-Meridian-Job-Phase") ? r->headers.at("X-Meridian-Job-Phase") : "";
    const bool ended = phase == "Succeeded" || phase == "Failed" || phase == "Cancelled";
    // The agent uploads the last output just after it reports the end: read a little longer.
    quiet_after_end = ended && r->body.empty() ? quiet_after_end + 1 : 0;
    if (quiet_after_end >= 4) return kExitOk;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int Top(Context& c) {
  int code = 0;
  auto nodes = Do(c, "GET", "/api/v1/nodes", nullptr, &code);
  if (!nodes) return code;
  auto usage = Do(c, "GET", "/api/v1/usage", nullptr, &code);
  if (!usage) return code;
  struct Row {
    int nodes = 0;
    double gpus = 0, free = 0;
  };
  std::map<std::string, Row> clusters;
  for (const Json& n : nodes->at("items")) {
    Row& r = clusters[n.value("cluster", "") + "\t" + n.value("model", "")];
    r.nodes += 1;
    for (const Json& g : n.at("gpus")) {
      r.gpus += 1;
      r.free += g.value("freeMilli", 0) / 1000.0;
    }
  }
  if (Structured(c)) {
    PrintStructured(c, {{"nodes", nodes->at("items")}, {"usage", usage->at("items")}});
    return kExitOk;
  }
  Table estate;
  estate.headers = {"cluster", "model", "nodes", "gpus", "allocated", "free", "use"};
  double all = 0, used = 0;
  for (const auto& [key, r] : clusters) {
    const size_t tab = key.find('\t');
    const double alloc = r.gpus - r.free;
    all += r.gpus;
    used += alloc;
    estate.rows.push_back({key.substr(0, tab), key.substr(tab + 1), std::to_string(r.nodes),
                           Num(Json(r.gpus)), Num(Json(alloc)), Num(Json(r.free)),
                           r.gpus > 0 ? Num(Json(std::round(100 * alloc / r.gpus))) + "%" : "-"});
  }
  estate.Print(c.out);
  c.out << "\n";
  Table queues;
  queues.headers = {"scope", "parent", "used gpus", "guaranteed", "limit", "pending"};
  for (const Json& u : usage->at("items")) {
    queues.rows.push_back({u.value("name", ""),
                           u.at("parent").is_null() ? "-" : Num(u.at("parent")),
                           Num(u.at("usedGpus")), Num(u.at("guaranteedGpus")),
                           u.at("limitGpus").is_null() ? "none" : Num(u.at("limitGpus")),
                           u.contains("pending") ? Num(u.at("pending")) : ""});
  }
  queues.Print(c.out);
  c.out << "\n" << Num(Json(used)) << " of " << Num(Json(all)) << " GPUs allocated\n";
  return kExitOk;
}

int Quota(Context& c, const std::string& scope) {
  int code = 0;
  auto usage = Do(c, "GET", "/api/v1/usage", nullptr, &code);
  if (!usage) return code;
  Json items = Json::array();
  for (const Json& u : usage->at("items")) {
    if (scope.empty() || u.value("name", "") == scope) items.push_back(u);
  }
  if (!scope.empty() && items.empty()) {
    c.err << "meridian: no organization, team or project named \"" << scope << "\"\n";
    return kExitNotFound;
  }
  if (Structured(c)) {
    PrintStructured(c, {{"items", items}});
    return kExitOk;
  }
  Table t;
  t.headers = {"scope", "parent", "weight", "guaranteed", "limit", "used", "borrowing"};
  for (const Json& u : items) {
    t.rows.push_back({u.value("name", ""), u.at("parent").is_null() ? "-" : Num(u.at("parent")),
                      Num(u.at("weight")), Num(u.at("guaranteedGpus")),
                      u.at("limitGpus").is_null() ? "none" : Num(u.at("limitGpus")),
                      Num(u.at("usedGpus")), u.value("borrowing", false) ? "yes" : "no"});
  }
  t.Print(c.out);
  return kExitOk;
}

int Plan(Context& c, const ConfigFlags& f) {
  auto files = ReadFiles(f.files);
  if (!files.ok()) {
    c.err << "meridian: " << files.status().message() << "\n";
    return kExitUsage;
  }
  Json body = {{"files", *files}, {"prune", f.prune}};
  int code = 0;
  auto plan = Do(c, "POST", "/api/v1/config/plan", &body, &code);
  if (!plan) return code;
  if (Structured(c)) {
    PrintStructured(c, *plan);
    return kExitOk;
  }
  PrintChanges(c, plan->at("changes"));
  return kExitOk;
}

int Apply(Context& c, const ConfigFlags& f) {
  auto files = ReadFiles(f.files);
  if (!files.ok()) {
    c.err << "meridian: " << files.status().message() << "\n";
    return kExitUsage;
  }
  Json body = {{"files", *files}, {"message", f.message}, {"prune", f.prune}};
  int code = 0;
  auto applied = Do(c, "POST", "/api/v1/config/apply", &body, &code);
  if (!applied) return code;
  if (Structured(c)) {
    PrintStructured(c, *applied);
    return kExitOk;
  }
  PrintChanges(c, applied->at("changes"));
  if (!applied->at("changes").empty()) {
    c.out << "Applied as revision " << Num(applied->at("revision")) << ".\n";
  }
  return kExitOk;
}

int Rollback(Context& c, int64_t to) {
  Json body = {{"to", to}};
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/config/rollback", &body, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  PrintChanges(c, r->at("changes"));
  if (!r->at("changes").empty()) {
    c.out << "Restored revision " << to << " as revision " << Num(r->at("revision")) << ".\n";
  }
  return kExitOk;
}

int History(Context& c) {
  int code = 0;
  auto r = Do(c, "GET", "/api/v1/config/revisions", nullptr, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  Table t;
  t.headers = {"revision", "age", "author", "message"};
  for (const Json& rev : r->at("items")) {
    t.rows.push_back({Num(rev.at("number")), Age(rev.value("createdAt", c.now), c.now),
                      rev.value("author", ""), rev.value("message", "")});
  }
  t.Print(c.out);
  return kExitOk;
}

int Audit(Context& c, const AuditFlags& f) {
  int code = 0;
  auto r =
      Do(c, "GET",
         WithQuery("/api/v1/audit",
                   {{"user", f.user}, {"result", f.result}, {"limit", std::to_string(f.limit)}}),
         nullptr, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  Table t;
  t.headers = {"seq", "age", "user", "action", "code", "result", "message"};
  for (const Json& a : r->at("items")) {
    t.rows.push_back({Num(a.at("seq")), Age(a.value("at", c.now), c.now), a.value("user", ""),
                      a.value("action", ""), Num(a.at("code")), a.value("result", ""),
                      a.value("message", "")});
  }
  t.Print(c.out);
  return kExitOk;
}

int TokenCreate(Context& c, const TokenFlags& f) {
  Json body = Json::object();
  if (!f.user.empty()) body["user"] = f.user;
  if (!f.description.empty()) body["description"] = f.description;
  if (!f.expires_in.empty()) {
    double seconds = 0;
    char unit = 's';
    std::string text = f.expires_in;
    if (!text.empty() && std::isalpha(static_cast<unsigned char>(text.back()))) {
      unit = text.back();
      text.pop_back();
    }
    try {
      size_t used = 0;
      seconds = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      seconds = -1;
    }
    const double scale = unit == 'd'   ? 86400
                         : unit == 'h' ? 3600
                         : unit == 'm' ? 60
                         : unit == 's' ? 1
                                       : -1;
    if (seconds <= 0 || scale < 0) {
      c.err << "meridian: --expires-in: \"" << f.expires_in
            << "\" is not a duration (30d, 12h, 90m)\n";
      return kExitUsage;
    }
    body["expiresIn"] = seconds * scale;
  }
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/tokens", &body, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  c.out << r->value("token", "") << "\n";
  c.err << "token " << r->value("id", "") << " for " << r->value("user", "")
        << ": shown once, keep it now\n";
  return kExitOk;
}

int TokenList(Context& c, const std::string& user) {
  int code = 0;
  auto r = Do(c, "GET", WithQuery("/api/v1/tokens", {{"user", user}}), nullptr, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  TokensTable(r->at("items"), c.now).Print(c.out);
  return kExitOk;
}

int TokenRevoke(Context& c, const std::string& id) {
  int code = 0;
  auto r = Do(c, "DELETE", "/api/v1/tokens/" + id, nullptr, &code);
  if (!r) return code;
  c.out << "token " << id << " revoked\n";
  return kExitOk;
}

}  // namespace meridian::cli
