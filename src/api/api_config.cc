// The desired state: configuration documents one by one, and plan / apply / rollback of the
// whole set as numbered revisions.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "api/api_internal.h"
#include "domain/quota_bounds.h"

namespace meridian::api {

using base::Status;

namespace {

bool IsConfigKind(const std::string& kind) {
  const auto& kinds = domain::ConfigKinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

size_t KindOrder(const std::string& kind) {
  const auto& kinds = domain::ConfigKinds();
  return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
}

using Key = std::pair<std::string, std::string>;  // kind, name

// Each field of `after` that differs from `before`, as {field, before, after} with a dotted
// path below spec ("prices.H100-80GB"); a field that is gone has after null, a new one before
// null. Mappings are compared key by key, anything else as a whole.
void FieldChanges(const std::string& path, const Json& before, const Json& after, Json* out) {
  if (before.is_object() && after.is_object()) {
    const std::string prefix = path.empty() ? "" : path + ".";
    for (const auto& [k, v] : after.items()) {
      FieldChanges(prefix + k, before.contains(k) ? before.at(k) : Json(), v, out);
    }
    for (const auto& [k, v] : before.items()) {
      if (!after.contains(k))
        out->push_back({{"field", prefix + k}, {"before", v}, {"after", nullptr}});
    }
    return;
  }
  if (before != after) out->push_back({{"field", path}, {"before", before}, {"after", after}});
}

// The changes that take the live state to the desired one: create, update and, when `mode`
// is kPrune, delete, in the order they must be applied (what others refer to is created first
// and deleted last).
Json Diff(const std::vector<store::Object>& live, const std::vector<domain::Document>& desired,
          const std::map<Key, Json>& last_applied, int64_t last_revision, ApplyMode mode) {
  std::map<Key, const store::Object*> now;
  for (const store::Object& o : live) {
    if (IsConfigKind(o.kind)) now[{o.kind, o.name}] = &o;
  }
  std::map<Key, const domain::Document*> want;
  for (const domain::Document& d : desired) want[{d.kind, d.name}] = &d;
  struct Change {
    size_t order;
    Json json;
  };
  std::vector<Change> changes;
  auto drifted = [&](const Key& k, const Json& spec) {
    auto it = last_applied.find(k);
    return last_revision > 0 && (it == last_applied.end() || it->second != spec);
  };
  for (const auto& [key, doc] : want) {
    auto it = now.find(key);
    if (it == now.end()) {
      changes.push_back({KindOrder(key.first) * 2,
                         {{"action", "create"},
                          {"kind", key.first},
                          {"name", key.second},
                          {"after", doc->spec}}});
    } else if (it->second->spec != doc->spec) {
      Json fields = Json::array();
      for (const auto& [k, v] : doc->spec.items()) {
        if (!it->second->spec.contains(k) || it->second->spec.at(k) != v) fields.push_back(k);
      }
      for (const auto& [k, v] : it->second->spec.items()) {
        if (!doc->spec.contains(k)) fields.push_back(k);
      }
      Json field_changes = Json::array();
      FieldChanges("", it->second->spec, doc->spec, &field_changes);
      changes.push_back({KindOrder(key.first) * 2,
                         {{"action", "update"},
                          {"kind", key.first},
                          {"name", key.second},
                          {"fields", fields},
                          {"fieldChanges", field_changes},
                          {"before", it->second->spec},
                          {"after", doc->spec},
                          {"drift", drifted(key, it->second->spec)},
                          {"lastRevision", last_revision},
                          {"liveVersion", it->second->version}}});
    }
  }
  for (const auto& [key, o] : now) {
    if (mode != ApplyMode::kPrune || want.count(key)) continue;
    // Deletions go in reverse kind order: projects before the teams they belong to.
    changes.push_back({(domain::ConfigKinds().size() - KindOrder(key.first)) * 2 + 1000,
                       {{"action", "delete"},
                        {"kind", key.first},
                        {"name", key.second},
                        {"before", o->spec},
                        {"drift", drifted(key, o->spec)},
                        {"lastRevision", last_revision},
                        {"liveVersion", o->version}}});
  }
  std::stable_sort(changes.begin(), changes.end(),
                   [](const Change& a, const Change& b) { return a.order < b.order; });
  Json out = Json::array();
  for (Change& c : changes) out.push_back(std::move(c.json));
  return out;
}

// Documents as stored in a revision.
Json DocumentsToJson(const std::vector<domain::Document>& docs) {
  Json out = Json::array();
  for (const domain::Document& d : docs)
    out.push_back({{"kind", d.kind}, {"name", d.name}, {"spec", d.spec}});
  return out;
}

std::vector<domain::Document> DocumentsFromJson(const Json& docs) {
  std::vector<domain::Document> out;
  for (const Json& d : docs) {
    domain::Document doc;
    doc.kind = d.at("kind");
    doc.name = d.at("name");
    doc.spec = d.at("spec");
    out.push_back(doc);
  }
  return out;
}

// Reads {files: [{name, content}], prune} and validates every document in it on its own; the
// references between documents are checked against the live state (CheckReferences).
std::optional<DesiredDocuments> DesiredState(Api::Call& call, const Json& body) {
  domain::ErrorList errors;
  DesiredDocuments desired;
  if (!body.is_object() || !body.contains("files") || !body.at("files").is_array()) {
    Fail(call, 400, "invalid_argument", "files: is required: [{name, content}]", "files");
    return std::nullopt;
  }
  if (body.contains("prune")) {
    if (!body.at("prune").is_boolean()) {
      Fail(call, 400, "invalid_argument", "prune: must be true or false", "prune");
      return std::nullopt;
    }
    if (body.at("prune").get<bool>()) desired.mode = ApplyMode::kPrune;
  }
  if (body.contains("message") && !body.at("message").is_string()) {
    Fail(call, 400, "invalid_argument", "message: must be a string", "message");
    return std::nullopt;
  }
  desired.message = body.value("message", "");
  for (const Json& f : body.at("files")) {
    if (!f.is_object() || !f.contains("content") || !f.at("content").is_string()) {
      Fail(call, 400, "invalid_argument", "files[].content: must be a string", "files");
      return std::nullopt;
    }
    const std::string name = f.contains("name") && f.at("name").is_string()
                                 ? f.at("name").get<std::string>()
                                 : "request";
    std::vector<domain::FieldError> syntax;
    auto parsed = domain::ParseYamlDocuments(f.at("content").get<std::string>(), name, &syntax);
    for (const domain::FieldError& e : syntax) errors.Add(e);
    if (!parsed.ok()) continue;
    for (const domain::SourceDoc& src : *parsed) {
      if (auto d = domain::ValidateDocument(src, &errors)) desired.docs.push_back(*d);
    }
  }
  if (!errors.empty()) {
    FailFields(call, errors);
    return std::nullopt;
  }
  return desired;
}

struct LiveState {
  std::vector<store::Object> objects;
  std::vector<domain::Document> last_documents;  // of the newest revision, in its order
  std::map<Key, Json> last_applied;              // the same, by kind and name
  int64_t last_revision = 0;
};

Status ReadLive(store::Tx& tx, LiveState* live) {
  auto objects = tx.ListObjects("");
  if (!objects.ok()) return objects.status();
  live->objects = std::move(objects.value());
  auto revisions = tx.ListRevisions(1);
  if (!revisions.ok()) return revisions.status();
  if (!revisions->empty()) {
    auto rev = tx.GetRevision(revisions->front().number);
    if (!rev.ok()) return rev.status();
    live->last_revision = rev->number;
    live->last_documents = DocumentsFromJson(rev->documents);
    for (const domain::Document& d : live->last_documents) {
      live->last_applied[{d.kind, d.name}] = d.spec;
    }
  }
  return Status::Ok();
}

// "a, b, c" of the first few names, then how many more.
std::string NameSome(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
}

// Refuses deletions that would orphan live objects: a Cluster or NodePool that registered
// nodes still belong to, a Project with jobs that are not finished. The scheduler would skip
// such nodes and jobs (they name what no longer exists), so the change is refused up front,
// naming what depends on each object; the operator drains or deletes those first. Ok when
// `changes` deletes nothing of the kind.
Status CheckDependents(store::Tx& tx, const Json& changes) {
  std::vector<std::string> problems;
  std::optional<std::vector<store::Object>> nodes;
  for (const Json& c : changes) {
    if (c.at("action") != "delete") continue;
    const std::string kind = c.at("kind"), name = c.at("name");
    if (kind == "Cluster" || kind == "NodePool") {
      if (!nodes) {
        auto listed = tx.ListObjects("Node");
        if (!listed.ok()) return listed.status();
        nodes = std::move(listed.value());
      }
      const char* field = kind == "Cluster" ? "cluster" : "pool";
      std::vector<std::string> names;
      for (const store::Object& n : *nodes) {
        if (n.spec.contains(field) && n.spec.at(field) == name) names.push_back(n.name);
      }
      if (names.empty()) continue;
      problems.push_back(
          (kind == "Cluster" ? "cluster \"" : "node pool \"") + name + "\": " +
          std::to_string(names.size()) + " registered node" + (names.size() == 1 ? "" : "s") +
          " still belong" + (names.size() == 1 ? "s" : "") + " to it (" + NameSome(names) +
          (names.size() == 1 ? "); delete or drain it first" : "); delete or drain them first"));
    } else if (kind == "Project") {
      store::JobFilter filter;
      filter.projects = {name};
      filter.phases = {"Pending", "Placed", "Running", "Stopping"};
      filter.limit = 1000;
      auto jobs = tx.ListJobs(filter);
      if (!jobs.ok()) return jobs.status();
      if (jobs->empty()) continue;
      std::vector<std::string> ids;
      for (const store::JobRecord& j : *jobs) ids.push_back(std::to_string(j.id));
      const std::string count = std::to_string(ids.size()) +
                                (ids.size() == static_cast<size_t>(filter.limit) ? " or more" : "");
      problems.push_back("project \"" + name + "\": " + count + " active job" +
                         (ids.size() == 1 ? " (" : "s (") + NameSome(ids) +
                         (ids.size() == 1 ? "); cancel it or let it finish first"
                                          : "); cancel them or let them finish first"));
    }
  }
  if (problems.empty()) return Status::Ok();
  std::string message = "refused: the change would orphan live objects: ";
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
  return Status::Conflict(message);
}

// Checks the quota bounds (domain/quota_bounds.h) that the desired documents' quotas would break
// in `all`. Only admins apply, and an admin's quota without a parent quota is bounded by nothing.
void CheckBounds(const std::vector<domain::Document>& all, const DesiredDocuments& desired,
                 domain::ErrorList* errors) {
  std::set<std::string> quotas;
  for (const domain::Document& d : desired.docs) {
    if (d.kind == "Quota") quotas.insert(d.name);
  }
  if (!quotas.empty()) domain::CheckQuotaBounds(all, quotas, domain::Unbounded::kAllowed, errors);
}

// Checks that the documents' references (a project's team, a pool's cluster, ...) hold in the
// state they would make: the documents alone under kPrune; under kMerge, the documents over
// the live configuration. Only the documents' own errors count: what was wrong in the live
// state before (a dangling reference left by an API delete) does not block an unrelated apply.
void CheckReferences(const LiveState& live, const DesiredDocuments& desired,
                     domain::ErrorList* errors) {
  if (desired.mode == ApplyMode::kPrune) {
    domain::ValidateDesiredState(desired.docs, errors);
    CheckBounds(desired.docs, desired, errors);
    return;
  }
  std::set<Key> given;
  for (const domain::Document& d : desired.docs) given.insert({d.kind, d.name});
  std::vector<domain::Document> all = desired.docs;
  for (const store::Object& o : live.objects) {
    if (IsConfigKind(o.kind) && !given.count({o.kind, o.name})) {
      all.push_back({o.kind, o.name, o.spec, "", 0});
    }
  }
  domain::ErrorList found;
  domain::ValidateDesiredState(all, &found);
  CheckBounds(all, desired, &found);
  for (const domain::FieldError& e : found.errors()) {
    if (!e.file.empty()) errors->Add(e);
  }
}

// What a new revision records: the whole desired state, so that a rollback to it restores
// everything. Under kPrune that is the documents; under kMerge, the previous revision's
// documents with these replacing or joining them.
std::vector<domain::Document> RevisionDocuments(const LiveState& live,
                                                const DesiredDocuments& desired) {
  if (desired.mode == ApplyMode::kPrune) return desired.docs;
  std::map<Key, const domain::Document*> given;
  for (const domain::Document& d : desired.docs) given[{d.kind, d.name}] = &d;
  std::vector<domain::Document> out;
  std::set<Key> placed;
  for (const domain::Document& d : live.last_documents) {
    auto it = given.find({d.kind, d.name});
    out.push_back(it == given.end() ? d : *it->second);
    placed.insert({d.kind, d.name});
  }
  for (const domain::Document& d : desired.docs) {
    if (!placed.count({d.kind, d.name})) out.push_back(d);
  }
  return out;
}

}  // namespace

namespace {

Scope QuotaScope(const Json& spec) {
  return {spec.value("organization", ""), spec.value("team", ""), spec.value("project", "")};
}

// Whether the caller may see a configuration object: the tenancy tree (organizations, teams,
// projects, quotas) as far as the caller's scopes reach; the rest of the configuration (classes,
// clusters, pools, the policy, alert rules) is the estate's and seen by everyone who may submit to
// it, except alert receivers, whose URLs may hold secrets.
bool Sees(const Access& access, const std::string& kind, const std::string& name,
          const Json& spec) {
  if (kind == "Organization") return access.SeesScope({name, "", ""});
  if (kind == "Team") return access.SeesScope({"", name, ""});
  if (kind == "Project") return access.SeesScope({"", "", name});
  if (kind == "Quota" || kind == "Budget") return access.SeesScope(QuotaScope(spec));
  // A receiver's URL is often its credential (a chat webhook's path is its secret): admins only.
  if (kind == "AlertReceiver") return access.IsAdmin();
  // Which groups hold which roles is the organisation's chart: admins only. What a client needs
  // to sign in (issuer, client id) is public at /api/v1/auth/providers.
  if (kind == "IdentityProvider") return access.IsAdmin();
  return true;
}

// Whether the caller may write a configuration object with this spec (stored or new): a Team
// within an organization the caller manages, a Project within a team it manages, a Quota below a
// scope it manages; everything else is for admins.
bool Manages(const Access& access, const std::string& kind, const Json& spec) {
  if (kind == "Team") return access.ManagesWithin({spec.value("organization", ""), "", ""});
  if (kind == "Project") return access.ManagesWithin({"", spec.value("team", ""), ""});
  // A budget is set by who may set the scope's quota: from above it, never by its own members.
  if (kind == "Quota" || kind == "Budget") return access.CanManageQuota(QuotaScope(spec));
  return access.IsAdmin();
}

// Checks a write of `kind` `name` against what is stored (`stored`, null when there is none) and
// what it becomes (`after`, null for a delete): both must lie within what the caller manages.
// An object the caller may not see is not found, as jobs are.
Status CheckWrite(const Access& access, const std::string& kind, const std::string& name,
                  const Json* stored, const Json* after) {
  if (stored && !Sees(access, kind, name, *stored)) {
    return Status::NotFound(kind + " \"" + name + "\" not found");
  }
  const std::string verb = after ? "change" : "delete";
  if (stored && !Manages(access, kind, *stored)) {
    return Status(base::StatusCode::kPermissionDenied,
                  access.user() + " may not " + verb + " " + kind + " \"" + name +
                      "\": it lies outside the scopes " + access.user() + " manages");
  }
  if (after && !Manages(access, kind, *after)) {
    std::string where;
    if (kind == "Quota") where = " for " + QuotaScope(*after).ToString();
    if (kind == "Project") where = " in team " + after->value("team", "");
    if (kind == "Team") where = " in organization " + after->value("organization", "");
    return Status(base::StatusCode::kPermissionDenied,
                  access.user() + " may not " + (stored ? "change " : "create ") + kind + " \"" +
                      name + "\"" + where + ": it lies outside the scopes " + access.user() +
                      " manages");
  }
  return Status::Ok();
}

}  // namespace

Json Api::WithStatus(const Access& access, const store::Object& o) {
  Json out = ObjectToJson(o);
  if (o.kind == "Budget" && budgets_ && !access.IsAdmin()) {
    auto config = Config();
    const Scope scope = QuotaScope(o.spec);
    for (const auto& [project, team] : config->tenancy.team_of_project) {
      if (config->tenancy.Contains(scope, project) && !access.CanRead(project)) return out;
    }
  }
  if (o.kind == "Budget" && budgets_) {
    Json status = budgets_->BudgetStatus(o.name);
    if (!status.is_null()) out["status"] = std::move(status);
  }
  return out;
}

void Api::ListObjects(Call& call, const std::string& kind) {
  auto objects_read =
      store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListObjects(kind); });
  if (!objects_read.ok()) return Fail(call, objects_read.status());
  std::vector<store::Object> objects = std::move(objects_read.value());
  Json items = Json::array();
  for (const store::Object& o : objects) {
    if (Sees(call.access, kind, o.name, o.spec)) items.push_back(WithStatus(call.access, o));
  }
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

void Api::GetObject(Call& call, const std::string& kind) {
  auto object_read =
      store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject(kind, call.Arg(1)); });
  if (!object_read.ok()) return Fail(call, object_read.status());
  store::Object object = std::move(object_read.value());
  if (!Sees(call.access, kind, object.name, object.spec)) {
    return Fail(call, 404, "not_found", kind + " \"" + object.name + "\" not found");
  }
  Respond(call, 200, WithStatus(call.access, object));
}

void Api::PutObject(Call& call, const std::string& kind) {
  const std::string name = call.Arg(1);
  auto body = JsonBody(call);
  if (!body) return;
  if (body->is_object() && !body->contains("kind")) (*body)["kind"] = kind;
  domain::SourceDoc src{*body, "", {}};
  domain::ErrorList errors;
  auto doc = domain::ValidateDocument(src, &errors);
  if (!doc) return FailFields(call, errors);
  if (doc->kind != kind || doc->name != name) {
    return Fail(call, 400, "invalid_argument",
                "the body is " + doc->kind + " \"" + doc->name + "\" but the path names " + kind +
                    " \"" + name + "\"",
                doc->kind != kind ? "kind" : "metadata.name");
  }
  if (kind == "Project") call.project = name;
  int64_t expected = store::kAnyVersion;
  if (body->contains("metadata") && body->at("metadata").contains("resourceVersion")) {
    const Json& v = body->at("metadata").at("resourceVersion");
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Fail(call, 400, "invalid_argument",
                  "metadata.resourceVersion: must be a non-negative integer",
                  "metadata.resourceVersion");
    }
    expected = v.get<int64_t>();
  }
  store::Object stored{kind, name, doc->spec, 0, call.started, call.access.user()};
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    // Who may write is decided on what is stored as well as on what it becomes, in the
    // transaction that writes it: a team lead may not take over another team's object by
    // naming its own team in the body.
    auto existing = tx.GetObject(kind, name);
    if (!existing.ok() && existing.status().code() != base::StatusCode::kNotFound) {
      return existing.status();
    }
    if (Status w = CheckWrite(call.access, kind, name, existing.ok() ? &existing->spec : nullptr,
                              &doc->spec);
        !w.ok()) {
      return w;
    }
    // The document must fit the rest of the live state (its team exists, ...).
    auto live = tx.ListObjects("");
    if (!live.ok()) return live.status();
    std::vector<domain::Document> all;
    for (const store::Object& o : *live) {
      if (IsConfigKind(o.kind) && !(o.kind == kind && o.name == name)) {
        all.push_back({o.kind, o.name, o.spec, "", 0});
      }
    }
    domain::Document mine = *doc;
    mine.file = "request";
    all.push_back(mine);
    domain::ErrorList refs;
    domain::ValidateDesiredState(all, &refs);
    if (kind == "Quota") {
      domain::CheckQuotaBounds(all, {name},
                               call.access.IsAdmin() ? domain::Unbounded::kAllowed
                                                     : domain::Unbounded::kGuaranteesNothing,
                               &refs);
    }
    for (const domain::FieldError& e : refs.errors()) {
      if (e.file == "request") return Status::Invalid(e.field + ": " + e.message);
    }
    auto v = tx.PutObject(stored, expected);
    if (!v.ok()) return v.status();
    stored.version = *v;
    auto e =
        tx.AppendEvent({0, call.started, kind, name, kind == "Project" ? name : "", "Normal",
                        stored.version == 1 ? "Created" : "Updated",
                        kind + " " + name + " changed through the API by " + call.access.user()});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return Fail(call, s);
  Changed(seq, true);
  Respond(call, stored.version == 1 ? 201 : 200, ObjectToJson(stored));
}

void Api::DeleteObject(Call& call, const std::string& kind) {
  const std::string name = call.Arg(1);
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto existing = tx.GetObject(kind, name);
    if (!existing.ok()) return existing.status();
    if (Status w = CheckWrite(call.access, kind, name, &existing->spec, nullptr); !w.ok()) {
      return w;
    }
    const Json deletion = Json::array({{{"action", "delete"}, {"kind", kind}, {"name", name}}});
    if (Status d = CheckDependents(tx, deletion); !d.ok()) return d;
    if (Status d = tx.DeleteObject(kind, name, existing->version); !d.ok()) return d;
    auto e = tx.AppendEvent(
        {0, call.started, kind, name, kind == "Project" ? name : "", "Normal", "Deleted",
         kind + " " + name + " deleted through the API by " + call.access.user()});
    if (!e.ok()) return e.status();
    seq = *e;
    return Status::Ok();
  });
  if (!s.ok()) return Fail(call, s);
  Changed(seq, true);
  Respond(call, 200, {{"deleted", {{"kind", kind}, {"name", name}}}});
}

void Api::Plan(Call& call) {
  if (!call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not plan changes");
  }
  auto body = JsonBody(call);
  if (!body) return;
  auto desired = DesiredState(call, *body);
  if (!desired) return;
  LiveState live;
  domain::ErrorList errors;
  Json changes;
  Status s = store_->Read([&](store::Tx& tx) {
    if (Status r = ReadLive(tx, &live); !r.ok()) return r;
    errors = domain::ErrorList();
    CheckReferences(live, *desired, &errors);
    if (!errors.empty()) return Status::Ok();
    changes =
        Diff(live.objects, desired->docs, live.last_applied, live.last_revision, desired->mode);
    return CheckDependents(tx, changes);
  });
  if (!errors.empty()) return FailFields(call, errors);
  if (!s.ok()) return Fail(call, s);
  Respond(call, 200,
          {{"changes", std::move(changes)},
           {"prune", desired->mode == ApplyMode::kPrune},
           {"revision", live.last_revision}});
}

base::Result<int64_t> Api::ApplyDocuments(Call& call, const DesiredDocuments& desired,
                                          Json* changes, domain::ErrorList* errors) {
  int64_t revision = 0;
  int64_t seq = 0;
  const std::string& message = desired.message;
  Status s = store_->Write([&](store::Tx& tx) {
    LiveState live;
    if (Status r = ReadLive(tx, &live); !r.ok()) return r;
    *errors = domain::ErrorList();  // a store that retries the transaction starts afresh
    if (desired.check_references) {
      CheckReferences(live, desired, errors);
      if (!errors->empty()) return Status::Invalid("the documents do not fit the live state");
    }
    *changes =
        Diff(live.objects, desired.docs, live.last_applied, live.last_revision, desired.mode);
    if (Status d = CheckDependents(tx, *changes); !d.ok()) return d;
    if (changes->empty()) {
      revision = live.last_revision;
      return Status::Ok();
    }
    for (const Json& c : *changes) {
      const std::string kind = c.at("kind"), name = c.at("name"), action = c.at("action");
      const int64_t expected = c.value("liveVersion", store::kMustNotExist);
      if (action == "delete") {
        if (Status d = tx.DeleteObject(kind, name, expected); !d.ok()) return d;
      } else {
        store::Object o{kind, name, c.at("after"), 0, call.started, call.access.user()};
        if (auto v = tx.PutObject(o, expected); !v.ok()) return v.status();
      }
    }
    store::Revision rev;
    rev.created_at = call.started;
    rev.author = call.access.user();
    rev.message = message;
    rev.documents = DocumentsToJson(RevisionDocuments(live, desired));
    auto n = tx.AddRevision(rev);
    if (!n.ok()) return n.status();
    revision = *n;
    for (const Json& c : *changes) {
      const std::string kind = c.at("kind"), name = c.at("name"), action = c.at("action");
      const std::string reason = action == "create"   ? "Created"
                                 : action == "update" ? "Updated"
                                                      : "Deleted";
      auto e = tx.AppendEvent(
          {0, call.started, kind, name, kind == "Project" ? name : "", "Normal", reason,
           kind + " " + name + " " + action + "d by revision " + std::to_string(revision)});
      if (!e.ok()) return e.status();
    }
    auto e = tx.AppendEvent(
        {0, call.started, "Revision", std::to_string(revision), "", "Normal", "Applied",
         "revision " + std::to_string(revision) + " applied by " + call.access.user() + ": " +
             std::to_string(changes->size()) + " change(s)"});
    if (!e.ok()) return e.status();
    seq = *e;
    store::AuditEntry a{0,
                        call.started,
                        call.access.user(),
                        call.req.method,
                        call.req.path,
                        call.action,
                        "",
                        200,
                        "allowed",
                        "revision " + std::to_string(revision) + ": " + message};
    return tx.AppendAudit(a).status();
  });
  if (!s.ok()) return s;
  if (seq > 0) call.audited = true;
  Changed(seq, true);
  return revision;
}

void Api::Apply(Call& call) {
  if (!call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not apply changes");
  }
  auto body = JsonBody(call);
  if (!body) return;
  auto desired = DesiredState(call, *body);
  if (!desired) return;
  Json changes;
  domain::ErrorList errors;
  auto revision = ApplyDocuments(call, *desired, &changes, &errors);
  if (!errors.empty()) return FailFields(call, errors);
  if (!revision.ok()) return Fail(call, revision.status());
  Respond(call, 200,
          {{"revision", *revision},
           {"changes", changes},
           {"prune", desired->mode == ApplyMode::kPrune}});
}

void Api::Rollback(Call& call) {
  if (!call.access.IsAdmin()) {
    return Fail(call, 403, "permission_denied", call.access.user() + " may not roll back");
  }
  auto body = JsonBody(call);
  if (!body) return;
  if (!body->is_object() || !body->contains("to") || !body->at("to").is_number_integer()) {
    return Fail(call, 400, "invalid_argument", "to: must be a revision number", "to");
  }
  const int64_t to = body->at("to");
  auto target_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetRevision(to); });
  if (!target_read.ok()) return Fail(call, target_read.status());
  store::Revision target = std::move(target_read.value());
  // A revision is a whole desired state: restoring it deletes what it does not hold.
  DesiredDocuments desired;
  desired.docs = DocumentsFromJson(target.documents);
  desired.mode = ApplyMode::kPrune;
  desired.message = "rollback to revision " + std::to_string(to);
  desired.check_references = false;
  Json changes;
  domain::ErrorList errors;
  auto revision = ApplyDocuments(call, desired, &changes, &errors);
  if (!revision.ok()) return Fail(call, revision.status());
  Respond(call, 200, {{"revision", *revision}, {"changes", changes}, {"restored", to}});
}

void Api::Revisions(Call& call) {
  // A revision is the whole estate's desired state, every team's documents in it, and only
  // admins make them: to anyone else there are none, as there are no jobs of projects it may
  // not read.
  if (!call.access.IsAdmin()) {
    return Respond(call, 200, {{"items", Json::array()}, {"continue", nullptr}});
  }
  // The newest max_page, paged here: 50 to a page unless ?limit says otherwise.
  auto revisions_read = store::ReadValue(*store_, [&](store::Tx& tx) {
    return tx.ListRevisions(static_cast<int32_t>(options_.max_page));
  });
  if (!revisions_read.ok()) return Fail(call, revisions_read.status());
  std::vector<store::Revision> revisions = std::move(revisions_read.value());
  Json items = Json::array();
  for (const store::Revision& r : revisions) {
    items.push_back({{"number", r.number},
                     {"createdAt", r.created_at},
                     {"author", r.author},
                     {"message", r.message}});
  }
  Json next;
  if (!PageWhole(call, &items, &next, 50, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

void Api::RevisionDetail(Call& call) {
  auto number = IdArg(call, 1, "revision");
  if (!number) return;
  if (!call.access.IsAdmin()) {
    return Fail(call, 404, "not_found", "revision " + call.Arg(1) + " not found");
  }
  auto rev_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetRevision(*number); });
  if (!rev_read.ok()) return Fail(call, rev_read.status());
  store::Revision rev = std::move(rev_read.value());
  Respond(call, 200,
          {{"number", rev.number},
           {"createdAt", rev.created_at},
           {"author", rev.author},
           {"message", rev.message},
           {"documents", rev.documents}});
}

}  // namespace meridian::api
