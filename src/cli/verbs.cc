#include "cli/verbs.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/entropy.h"
#include "base/strings.h"
#include "cli/output.h"
#include "cli/tables.h"
#include "domain/documents.h"
#include "domain/label_selector.h"

namespace meridian::cli {

namespace {

// The server's refusal of one field of a document read from a file, at the field's line there
// (the checks only the server can make: what the estate could hold); "" when it names no field.
std::string AtItsLine(const Response& r, const domain::SourceDoc& source) {
  if (r.status != 400 || !r.body.is_object() || !r.body.contains("error")) return "";
  const Json& e = r.body.at("error");
  if (e.value("field", "").empty() || e.value("details", Json::array()).size() > 1) return "";
  domain::ErrorList at;
  const std::string message = e.value("message", "");
  const std::string field = e.value("field", "");
  // The message starts with the field already ("spec.gpus: ..."): once is enough.
  at.Add(source, field,
         message.rfind(field + ": ", 0) == 0 ? message.substr(field.size() + 2) : message);
  return at.ToString();
}

// Calls the API. On failure prints why and stores the exit code in *code. With the `source` a
// body was read from, a refused field is shown at its line there.
// The answer's body, or nullopt with the error said and *code set.
std::optional<Json> Answered(Context& c, const base::Result<Response>& r, int* code,
                             const domain::SourceDoc* source) {
  if (!r.ok()) {
    c.err << "meridian: " << r.status().message() << "\n";
    *code = r.status().code() == base::StatusCode::kInvalidArgument ? kExitUsage : kExitUnavailable;
    return std::nullopt;
  }
  if (r->status >= 300) {
    const std::string at = source ? AtItsLine(*r, *source) : "";
    c.err << "meridian: " << (at.empty() ? ErrorMessage(*r) : at) << "\n";
    *code = ExitCodeFor(r->status);
    return std::nullopt;
  }
  *code = kExitOk;
  return r->body;
}

std::optional<Json> Do(Context& c, const std::string& method, const std::string& path,
                       const Json* body, int* code, const domain::SourceDoc* source = nullptr) {
  return Answered(c, c.client.Call(method, path, body), code, source);
}

// A POST that makes something, sent with an Idempotency-Key of its own and sent again (the same
// key) while the server cannot be reached or has no leader, for about 15 s: a server restart or
// a failover between the request and its answer leaves one result, never two.
std::optional<Json> DoOnce(Context& c, const std::string& path, const Json* body, int* code,
                           const domain::SourceDoc* source) {
  const std::map<std::string, std::string> key = {
      {"Idempotency-Key", base::Hex(base::SystemEntropy().Bytes(16))}};
  double pause = 0.25;
  for (int attempt = 1;; ++attempt) {
    auto r = c.client.Call("POST", path, body, key);
    const bool unreachable = !r.ok() && r.status().code() == base::StatusCode::kIoError;
    const bool leaderless = r.ok() && r->status == 503;
    if (!(unreachable || leaderless) || attempt == 7) return Answered(c, r, code, source);
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    pause *= 2;
  }
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

}  // namespace

// Whether `text` is a job id, or ID_INDEX for an array's element; says so and returns false
// otherwise (job ids are numbers).
bool JobId(Context& c, const std::string& text) {
  long long id = 0, index = 0;
  const size_t sep = text.find('_');
  if (sep == std::string::npos && base::ParseInt64(text, &id) && id > 0) return true;
  if (sep != std::string::npos && base::ParseInt64(text.substr(0, sep), &id) && id > 0 &&
      base::ParseInt64(text.substr(sep + 1), &index) && index >= 0) {
    return true;
  }
  c.err << "meridian: job \"" << text << "\": a job is named by its id, a number, or an array's "
        << "element by ID_INDEX (meridian get jobs lists them)\n";
  return false;
}

// The API's path for a job named by JobId's forms, with `sub` (e.g. "/events") after the job:
// ID_INDEX is /api/v1/jobs/ID<sub>?index=INDEX.
std::string JobPath(const std::string& text, const std::string& sub) {
  const size_t sep = text.find('_');
  if (sep == std::string::npos) return "/api/v1/jobs/" + text + sub;
  return "/api/v1/jobs/" + text.substr(0, sep) + sub + "?index=" + text.substr(sep + 1);
}

namespace {

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
      {"identityprovider", "identityproviders"},
      {"idp", "identityproviders"},
      {"idps", "identityproviders"},
      {"idlepolicy", "idlepolicies"},
      {"budget", "budgets"},
      {"dataset", "datasets"},
  };
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char ch) { return std::tolower(ch); });
  auto it = kAliases.find(r);
  return it == kAliases.end() ? r : it->second;
}

const std::vector<std::string>& ConfigResources() {
  static const std::vector<std::string> kResources = {
      "organizations",     "teams",        "projects", "quotas",     "priorityclasses",
      "clusters",          "nodepools",    "policies", "alertrules", "alertreceivers",
      "identityproviders", "idlepolicies", "budgets",  "datasets"};
  return kResources;
}

// Reads the documents a -f names: a file, or every *.yaml/*.yml in a folder (sorted).

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

// What `get -w` watches, and where its list left off.
struct WatchArgs {
  std::string resource;  // jobs, nodes or events
  std::string name;      // one of them, or "" for all the list selected
  GetFlags flags;
  int64_t after = 0;           // the last event before the list was read
  std::vector<size_t> widths;  // the list's columns, for the lines that follow
};

// Whether a job the watch has read again is one the list selected: project, user and labels
// (not phase: a job that ends is a change to see, as kubectl shows it).
bool Selected(const Json& job, const GetFlags& f, const domain::LabelSelector& selector) {
  const Json& m = job.at("metadata");
  if (!f.user.empty() && m.value("user", "") != f.user) return false;
  if (!f.project.empty()) {
    bool in = false;
    for (std::string_view p : base::Split(f.project, ','))
      in |= base::Trim(p) == m.value("project", "");
    if (!in) return false;
  }
  return selector.Matches(domain::LabelsOf(job.at("spec").value("labels", Json::object())));
}

// After the list: a long poll of the events, and for each batch a line per object changed (its
// row as the list printed it; JSON or YAML with -o json|yaml), until the process is stopped.
int Watch(Context& c, const WatchArgs& w) {
  auto selector = domain::LabelSelector::Parse(w.flags.selector);
  if (!selector.ok()) return kExitUsage;  // Get checked it
  const bool wide = c.output == "wide";
  int64_t after = w.after;
  int code = 0;
  c.out << std::flush;  // the list, before the first wait
  for (;;) {
    auto batch =
        Do(c, "GET", "/api/v1/events?after=" + std::to_string(after) + "&wait=25&limit=500",
           nullptr, &code);
    if (!batch) return code;
    after = std::max(after, batch->value("last", after));
    // Ages of the rows that follow are from now, not from when the list was printed.
    c.now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // Each object changed once per batch, in the order of its first event.
    std::vector<std::string> changed;
    Json rows = Json::array();
    for (const Json& e : batch->value("items", Json::array())) {
      const std::string kind = e.value("objectKind", ""), object = e.value("object", "");
      if (w.resource == "events") {
        if (!w.flags.job.empty() && (kind != "Job" || object != w.flags.job)) continue;
        rows.push_back(e);
        continue;
      }
      const bool ours =
          (w.resource == "jobs" && kind == "Job") || (w.resource == "nodes" && kind == "Node");
      if (!ours || (!w.name.empty() && object != w.name)) continue;
      if (std::find(changed.begin(), changed.end(), object) == changed.end()) {
        changed.push_back(object);
      }
    }
    for (const std::string& object : changed) {
      const std::string path = (w.resource == "jobs" ? "/api/v1/jobs/" : "/api/v1/nodes/") +
                               httplib::detail::encode_query_param(object);
      auto r = c.client.Call("GET", path);
      if (!r.ok() || r->status != 200) continue;  // gone (a deleted node), or not ours to see
      if (w.resource == "jobs" && !Selected(r->body, w.flags, *selector)) continue;
      if (w.resource == "nodes") {
        if (!selector->Matches(domain::LabelsOf(r->body.value("labels", Json::object())))) continue;
      }
      rows.push_back(r->body);
    }
    if (rows.empty()) continue;
    if (c.output == "json") {
      for (const Json& row : rows) c.out << row.dump() << "\n";
    } else if (c.output == "yaml") {
      for (const Json& row : rows) c.out << "---\n" << ToYaml(row);
    } else if (w.resource == "jobs") {
      (w.flags.all && wide ? JobHistoryTable(rows, c.now) : JobsTable(rows, wide, c.now))
          .PrintRows(c.out, w.widths);
    } else if (w.resource == "nodes") {
      NodesTable(rows, wide).PrintRows(c.out, w.widths);
    } else {
      EventsTable(rows, c.now).PrintRows(c.out, w.widths);
    }
    c.out << std::flush;
  }
}

}  // namespace

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
  if (f.watch && resource != "jobs" && resource != "nodes" && resource != "events") {
    c.err << "meridian: -w: only jobs, nodes and events can be watched\n";
    return kExitUsage;
  }
  if (!f.selector.empty() && (resource != "jobs" && resource != "nodes")) {
    c.err << "meridian: -l: only jobs and nodes have labels to select on\n";
    return kExitUsage;
  }
  if (auto selector = domain::LabelSelector::Parse(f.selector); !selector.ok()) {
    c.err << "meridian: -l: " << selector.status().message() << "\n";
    return kExitUsage;
  }
  // A watch prints the changes after the list: those after the newest event now.
  int64_t watch_after = 0;
  if (f.watch) {
    auto latest = Do(c, "GET", "/api/v1/events?after=latest&limit=1", nullptr, &code);
    if (!latest) return code;
    watch_after = latest->value("last", int64_t{0});
  }
  // Listings show the newest first: the jobs and events people ask about are the recent ones.
  if (resource == "jobs") {
    if (!name.empty()) {
      path = JobPath(name);
      if (f.elements) path += name.find('_') == std::string::npos ? "?elements=true" : "";
    } else {
      // What runs or waits, as squeue and kubectl show it; --all (or --phase) for the rest.
      const std::string phase = !f.phase.empty() ? f.phase
                                : f.all          ? ""
                                                 : "Pending,Placed,Running,Stopping";
      path =
          WithQuery("/api/v1/jobs", {{"project", f.project},
                                     {"phase", phase},
                                     {"user", f.user},
                                     {"array", f.array},
                                     {"arrays", f.phase.empty() && f.array.empty() ? "whole" : ""},
                                     {"labelSelector", f.selector},
                                     {"limit", std::to_string(f.limit)},
                                     {"order", f.array.empty() ? "newest" : "oldest"}});
    }
  } else if (resource == "events") {
    path = f.job.empty() ? WithQuery("/api/v1/events",
                                     {{"limit", std::to_string(f.limit)}, {"order", "newest"}})
                         : WithQuery("/api/v1/jobs/" + f.job + "/events", {{"order", "newest"}});
  } else if (resource == "nodes") {
    path = name.empty() ? WithQuery("/api/v1/nodes", {{"labelSelector", f.selector}})
                        : "/api/v1/nodes/" + httplib::detail::encode_query_param(name);
  } else if (resource == "users" || resource == "tokens") {
    path = "/api/v1/" + resource;
  } else if (resource == "alerts") {
    path = "/api/v1/alerts";
  } else if (resource == "idle") {
    path = WithQuery("/api/v1/idle", {{"project", f.project}});
  } else if (std::count(ConfigResources().begin(), ConfigResources().end(), resource)) {
    path = "/api/v1/" + resource + (name.empty() ? "" : "/" + name);
  } else {
    c.err << "meridian: unknown resource \"" << resource_in
          << "\" (jobs, nodes, events, alerts, idle, clusters, nodepools, projects, teams, "
             "organizations, quotas, priorityclasses, policies, alertrules, alertreceivers, "
             "identityproviders, idlepolicies, budgets, datasets, users, tokens)\n";
    return kExitUsage;
  }
  auto body = Do(c, "GET", path, nullptr, &code);
  if (!body) return code;
  Json items = body->contains("items") ? body->at("items") : Json::array({*body});
  if (!name.empty() && (resource == "users" || resource == "tokens")) {
    // Listed whole by the API: the one named, or none.
    Json named = Json::array();
    for (const Json& item : items) {
      const std::string key = resource == "tokens"        ? item.value("id", "")
                              : item.contains("metadata") ? item["metadata"].value("name", "")
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
  if (resource == "events") {
    for (const Json& e : items) watch_after = std::max(watch_after, e.value("seq", int64_t{0}));
  }
  std::vector<size_t> widths;
  if (Structured(c)) {
    PrintStructured(c, name.empty() ? Json{{"items", items}} : items.at(0));
  } else if (resource == "jobs") {
    // `--all -o wide` is the accounting view (sacct's): when each ran, for how long, how it ended.
    widths = f.all && wide ? JobHistoryTable(items, c.now).Print(c.out)
                           : JobsTable(items, wide, c.now).Print(c.out);
    if (items.size() == 1 && items[0].at("status").contains("array") &&
        items[0]["status"]["array"].contains("elements")) {
      c.out << "\n";
      ElementsTable(items[0]["status"]["array"]["elements"], items[0].at("id")).Print(c.out);
    }
  } else if (resource == "nodes") {
    widths = NodesTable(items, wide).Print(c.out);
  } else if (resource == "events") {
    widths = EventsTable(items, c.now).Print(c.out);
  } else if (resource == "tokens") {
    TokensTable(items, c.now).Print(c.out);
  } else if (resource == "alerts") {
    AlertsTable(items, c.now).Print(c.out);
  } else if (resource == "idle") {
    IdleTable(items, c.now).Print(c.out);
  } else if (resource == "budgets") {
    BudgetsTable(items).Print(c.out);
  } else {
    ObjectsTable(resource, items, wide, c.now).Print(c.out);
  }
  if (f.watch) return Watch(c, {resource, name, f, watch_after, widths});
  return kExitOk;
}

int Describe(Context& c, const std::string& resource_in, const std::string& name,
             const GetFlags& f) {
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
  if (!JobId(c, name)) return kExitUsage;
  const bool element = name.find('_') != std::string::npos;
  auto job = Do(c, "GET", JobPath(name) + (f.elements && !element ? "?elements=true" : ""), nullptr,
                &code);
  if (!job) return code;
  auto events = Do(c, "GET", JobPath(name, "/events"), nullptr, &code);
  if (!events) return code;
  auto why = Do(c, "GET", JobPath(name, "/explanation"), nullptr, &code);
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
  if (m.contains("arrayId")) {
    c.out << "Array:        " << Num(m.at("arrayId")) << " [" << job->at("spec").value("array", "")
          << "], element " << Num(m.at("arrayIndex")) << "\n";
  }
  if (s.contains("array")) {
    c.out << "Elements:     " << ArrayPhases(s.at("array")) << " (of "
          << Num(s.at("array").at("size")) << ")\n";
    if (s.at("array").contains("elements")) {
      ElementsTable(s.at("array").at("elements"), job->at("id")).Print(c.out);
    }
  }
  for (const Json& d : job->at("spec").value("dependencies", Json::array())) {
    c.out << "Dependency:   " << d.get<std::string>() << "\n";
  }
  for (const Json& port : job->at("spec").value("ports", Json::array())) {
    c.out << "Port:         " << Num(port) << " (reach it: meridian port-forward "
          << Num(job->at("id")) << " " << Num(port) << ":" << Num(port)
          << "; a shell: meridian exec -it " << Num(job->at("id")) << " -- sh)\n";
  }
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
      // Each GPU, with its MIG instance ("0 [MIG 3g.40gb@4]") or its share and how the pool
      // shares it ("1 [0.25, mps]").
      std::string gpus;
      for (const Json& d : t.at("devices")) {
        std::string detail;
        if (d.contains("mig") && d.at("mig").is_object()) {
          detail = "MIG " + d.at("mig").value("profile", "") + "@" +
                   Num(d.at("mig").value("start", Json(0)));
        } else if (d.value("milli", 1000) < 1000) {
          detail = Num(Json(d.value("milli", 1000) / 1000.0)) +
                   (d.contains("sharing") ? ", " + d.value("sharing", "") : "");
        }
        gpus += (gpus.empty() ? "" : ",") + Num(d.at("gpu")) +
                (detail.empty() ? "" : " [" + detail + "]");
      }
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
      if (cl.contains("data")) c.out << "    data: " << cl.value("data", "") << "\n";
    }
    if (why->contains("estimatedStart") && !why->at("estimatedStart").is_null()) {
      c.out << "  estimated start: in " << Age(c.now, why->at("estimatedStart").get<double>());
      if (why->value("stagingSeconds", 0.0) > 0) {
        c.out << " (of which " << Age(0, why->value("stagingSeconds", 0.0))
              << " staging its datasets)";
      }
      c.out << "\n";
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
  std::optional<domain::SourceDoc> source;  // the file's, for the lines of refused fields
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
    source = std::move(docs->front());
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
    if (!f.ports.empty()) spec["ports"] = f.ports;
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
  // Slurm's flags, checked by the server (which names spec.array or spec.dependencies[i]).
  if (!f.array.empty()) doc["spec"]["array"] = f.array;
  if (!f.dependency.empty()) {
    Json deps = Json::array();
    for (std::string_view d : base::Split(f.dependency, ',')) deps.push_back(std::string(d));
    doc["spec"]["dependencies"] = deps;
  }
  int code = 0;
  auto job = DoOnce(c, "/api/v1/jobs", &doc, &code, source ? &*source : nullptr);
  if (!job) return code;
  if (Structured(c)) {
    PrintStructured(c, *job);
  } else if (job->at("status").contains("array")) {
    c.out << "array " << Num(job->at("id")) << " of " << Num(job->at("status")["array"]["size"])
          << " jobs submitted to " << job->at("metadata").value("project", "") << "\n";
  } else {
    c.out << "job " << Num(job->at("id")) << " submitted to "
          << job->at("metadata").value("project", "") << "\n";
    // What it serves (a notebook, a shell server), and how to reach it once it runs.
    for (const Json& port : job->at("spec").value("ports", Json::array())) {
      c.out << "reach port " << Num(port) << " once it runs: meridian port-forward "
            << Num(job->at("id")) << " " << Num(port) << ":" << Num(port) << "\n";
    }
  }
  return kExitOk;
}

int Cancel(Context& c, const std::string& id) {
  if (!JobId(c, id)) return kExitUsage;
  int code = 0;
  auto job = Do(c, "POST", JobPath(id, "/cancel"), nullptr, &code);
  if (!job) return code;
  if (job->at("status").contains("cancelledElements")) {
    c.out << "array " << id << " cancelled (" << Num(job->at("status")["cancelledElements"])
          << " jobs)\n";
    return kExitOk;
  }
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

int InjectFault(Context& c, const std::string& node, int gpu, int xid, const std::string& warning) {
  Json body = warning.empty() ? Json{{"xid", xid}} : Json{{"warning", warning}};
  int code = 0;
  auto r = Do(c, "POST", "/api/v1/nodes/" + node + "/gpus/" + std::to_string(gpu) + "/faults",
              &body, &code);
  if (!r) return code;
  if (!warning.empty()) {
    c.out << "warning " << warning << " injected into GPU " << gpu << " of node " << node
          << " (a warning: nothing is cordoned for it)\n";
    return kExitOk;
  }
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

namespace {

// One object deleted: a job (cancelled, as `cancel` does), a node, or a configuration object.
int DeleteOne(Context& c, const std::string& resource_in, const std::string& name, bool force) {
  const std::string resource = Resource(resource_in);
  std::string path;
  if (resource == "jobs") {
    if (!JobId(c, name)) return kExitUsage;
    int code = 0;
    if (!Do(c, "POST", "/api/v1/jobs/" + name + "/cancel", nullptr, &code)) return code;
    c.out << "job " << name << " deleted (cancelled)\n";
    return kExitOk;
  }
  if (resource == "nodes") {
    path =
        "/api/v1/nodes/" + httplib::detail::encode_query_param(name) + (force ? "?force=true" : "");
  } else if (std::count(ConfigResources().begin(), ConfigResources().end(), resource)) {
    path = "/api/v1/" + resource + "/" + httplib::detail::encode_query_param(name);
  } else {
    c.err << "meridian: cannot delete \"" << resource_in
          << "\" (a job, a node, or a configuration kind: clusters, nodepools, projects, ...)\n";
    return kExitUsage;
  }
  int code = 0;
  auto r = Do(c, "DELETE", path, nullptr, &code);
  if (!r) return code;
  c.out << resource_in << " " << name << " deleted\n";
  return kExitOk;
}

}  // namespace

int Delete(Context& c, const DeleteFlags& f) {
  if (f.files.empty()) {
    if (f.resource.empty() || f.name.empty()) {
      c.err << "meridian: delete KIND NAME, or delete -f FILE\n";
      return kExitUsage;
    }
    return DeleteOne(c, f.resource, f.name, f.force);
  }
  if (!f.resource.empty()) {
    c.err << "meridian: delete -f: the file names what to delete; give no KIND or NAME\n";
    return kExitUsage;
  }
  // Every document's kind and name is checked before anything is deleted, as kubectl does.
  auto files = ReadFiles(f.files);
  if (!files.ok()) {
    c.err << "meridian: " << files.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<std::pair<std::string, std::string>> targets;  // kind, name
  bool bad = false;
  for (const Json& file : *files) {
    const std::string path = file.value("name", "");
    std::vector<domain::FieldError> syntax;
    auto docs = domain::ParseYamlDocuments(file.value("content", ""), path, &syntax);
    for (const domain::FieldError& e : syntax) {
      c.err << "meridian: " << e.ToString() << "\n";
      bad = true;
    }
    if (!docs.ok()) continue;
    for (const domain::SourceDoc& d : *docs) {
      const Json& v = d.value;
      const std::string kind = v.is_object() ? v.value("kind", "") : "";
      const Json meta = v.is_object() ? v.value("metadata", Json::object()) : Json::object();
      const std::string name = meta.is_object() ? meta.value("name", "") : "";
      const auto mark = d.marks.find("metadata.name");
      const auto at = mark != d.marks.end() ? mark->second : std::pair<int, int>{0, 0};
      const std::string where = path + (at.first > 0 ? ":" + std::to_string(at.first) : "");
      if (kind.empty() || kind == "Job") {
        c.err << "meridian: " << where
              << ": a job document names no job; delete a job by its id (meridian delete job ID)"
              << "\n";
        bad = true;
      } else if (name.empty()) {
        c.err << "meridian: " << where << ": " << kind << ": metadata.name is required\n";
        bad = true;
      } else {
        targets.emplace_back(kind, name);
      }
    }
  }
  if (bad) return kExitUsage;
  if (targets.empty()) {
    c.err << "meridian: delete -f: the files hold no documents\n";
    return kExitUsage;
  }
  // In the files' reverse order: documents define what others refer to first (a team before
  // its projects), so what refers is deleted before what it refers to.
  std::reverse(targets.begin(), targets.end());
  int worst = kExitOk;
  for (const auto& [kind, name] : targets) {
    const int code = DeleteOne(c, kind, name, f.force);  // Resource() reads "PriorityClass"
    if (worst == kExitOk) worst = code;  // the first failure's code; the rest are still tried
  }
  return worst;
}

int Version(Context& c, const std::string& client_version) {
  Json out = {{"client", {{"version", client_version}}}};
  auto r = c.client.Call("GET", "/api/v1/version");
  int code = kExitOk;
  std::string why;
  if (!r.ok()) {
    why = r.status().message();
    code = kExitUnavailable;
  } else if (r->status != 200) {
    why = ErrorMessage(*r);
    code = ExitCodeFor(r->status);
  } else {
    out["server"] = r->body;
  }
  if (Structured(c)) {
    PrintStructured(c, out);
  } else {
    c.out << "Client Version: " << client_version << "\n";
    if (out.contains("server")) {
      c.out << "Server Version: " << out["server"].value("version", "") << " (API "
            << out["server"].value("api", "") << ", " << c.client.config().server << ")\n";
    }
  }
  // The client's version is printed either way; the server's absence is said, and is an error.
  if (code != kExitOk) c.err << "meridian: server version: " << why << "\n";
  return code;
}

int Logs(Context& c, const std::string& id, int task, bool follow) {
  int64_t offset = 0;
  int quiet_after_end = 0;
  for (;;) {
    const std::string path = JobPath(id, "/logs");  // ID_INDEX: an array's element
    auto r = c.client.Raw("GET",
                          path + (path.find('?') == std::string::npos ? "?" : "&") +
                              "task=" + std::to_string(task) + "&offset=" + std::to_string(offset),
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
  // Allocated is Meridian's; unmanaged is held by work outside it (a Slurm user's own job), which
  // is occupied capacity all the same.
  struct Row {
    int nodes = 0;
    double gpus = 0, free = 0, unmanaged = 0;
  };
  std::map<std::string, Row> clusters;
  for (const Json& n : nodes->at("items")) {
    Row& r = clusters[n.value("cluster", "") + "\t" + n.value("model", "")];
    r.nodes += 1;
    for (const Json& g : n.at("gpus")) {
      r.gpus += 1;
      r.free += g.value("freeMilli", 0) / 1000.0;
      r.unmanaged += g.value("unmanaged", "").empty() ? 0 : 1;
    }
  }
  if (Structured(c)) {
    PrintStructured(c, {{"nodes", nodes->at("items")}, {"usage", usage->at("items")}});
    return kExitOk;
  }
  Table estate;
  estate.headers = {"cluster", "model", "nodes", "gpus", "allocated", "unmanaged", "free", "use"};
  double all = 0, used = 0, foreign = 0;
  for (const auto& [key, r] : clusters) {
    const size_t tab = key.find('\t');
    const double alloc = r.gpus - r.free - r.unmanaged;
    const double occupied = alloc + r.unmanaged;
    all += r.gpus;
    used += alloc;
    foreign += r.unmanaged;
    estate.rows.push_back(
        {key.substr(0, tab), key.substr(tab + 1), std::to_string(r.nodes), Num(Json(r.gpus)),
         Num(Json(alloc)), Num(Json(r.unmanaged)), Num(Json(r.free)),
         r.gpus > 0 ? Num(Json(std::round(100 * occupied / r.gpus))) + "%" : "-"});
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
  c.out << "\n" << Num(Json(used)) << " of " << Num(Json(all)) << " GPUs allocated";
  if (foreign > 0) c.out << ", " << Num(Json(foreign)) << " held by work outside Meridian";
  c.out << "\n";
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

namespace {

// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. A name that
// starts as a spreadsheet formula would (=, +, -, @) is written after a ' so that it stays text.
std::string CsvField(std::string text) {
  if (!text.empty() && std::string("=+-@").find(text[0]) != std::string::npos) text = "'" + text;
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

int ReportUsage(Context& c, const UsageReportFlags& f) {
  int code = 0;
  auto r =
      Do(c, "GET",
         WithQuery("/api/v1/reports/usage", {{"from", f.from > 0 ? std::to_string(f.from) : ""},
                                             {"to", f.to > 0 ? std::to_string(f.to) : ""},
                                             {"by", f.by}}),
         nullptr, &code);
  if (!r) return code;
  if (Structured(c)) {
    PrintStructured(c, *r);
    return kExitOk;
  }
  Table t;
  t.headers = {f.by, "jobs", "runs", "gpu-hours", "cpu-core-hours", "memory-gib-hours", "cost"};
  auto row = [&](const std::string& key, const Json& v) {
    t.rows.push_back({key, Num(v.at("jobs")), Num(v.at("runs")), Num(v.at("gpuHours")),
                      Num(v.at("cpuCoreHours")), Num(v.at("memoryGibHours")), Num(v.at("cost"))});
  };
  for (const Json& v : r->at("rows")) row(v.value("key", ""), v);
  if (c.output == "csv") {
    auto line = [&](const std::vector<std::string>& cells) {
      std::string text;
      for (const std::string& cell : cells) text += (text.empty() ? "" : ",") + CsvField(cell);
      c.out << text << "\r\n";
    };
    line(t.headers);
    for (const auto& cells : t.rows) line(cells);
    return kExitOk;
  }
  row("TOTAL", r->at("total"));
  c.out << "Usage from " << UtcTimestamp(r->value("from", 0.0)) << " to "
        << UtcTimestamp(r->value("to", 0.0)) << " (UTC), by " << f.by << "\n";
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
  if (f.expires_in == 0) {
    c.err << "meridian: --expires-in: a token must live longer than 0s\n";
    return kExitUsage;
  }
  if (f.expires_in > 0) body["expiresIn"] = f.expires_in;
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
