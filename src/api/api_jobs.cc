// Jobs, their events and explanations, and watching for changes.
#include <algorithm>
#include <cctype>
#include <chrono>

#include "api/api_internal.h"
#include "api/job_life.h"
#include "api/job_mentions.h"
#include "base/strings.h"
#include "domain/label_selector.h"
#include "domain/lifecycle.h"

namespace meridian::api {

using base::Status;

namespace {

constexpr size_t kMaxElementsShown = 10000;

// An array's counts by phase, from the store: {size, maxRunning, phases: {Running: 3, ...}}.
base::Result<Json> ArraySummary(store::Tx& tx, const store::JobRecord& first) {
  auto counts = tx.CountArrayByPhase(first.array_id);
  if (!counts.ok()) return counts.status();
  Json phases = Json::object();
  int64_t size = 0;
  for (const auto& [phase, n] : *counts) {
    phases[phase] = n;
    size += n;
  }
  auto spec = SpecOf(first);
  const int64_t max_running = spec.ok() && spec->array ? spec->array->max_running : 0;
  return Json{{"size", size}, {"maxRunning", max_running}, {"phases", std::move(phases)}};
}

std::vector<std::string> CommaList(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view part : base::Split(text, ',')) {
    part = base::Trim(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

// Each job a dependency names must exist and be readable by the caller; aftercorr must name an
// array. A refusal names the entry in `*field` (spec.dependencies[i]).
Status CheckDependencies(const Api::Call& call, store::Tx& tx, const domain::JobSpec& spec,
                         std::string* field) {
  for (size_t i = 0; i < spec.dependencies.size(); ++i) {
    const domain::Dependency& d = spec.dependencies[i];
    for (int64_t id : d.jobs) {
      const std::string entry = "spec.dependencies[" + std::to_string(i) + "]";
      auto target = tx.GetJob(id);
      if (!target.ok() && target.status().code() != base::StatusCode::kNotFound) {
        return target.status();
      }
      if (!target.ok() || !call.access.CanRead(target->project)) {
        *field = entry;
        return Status::Invalid(entry + ": job " + std::to_string(id) + " not found");
      }
      if (d.kind == domain::DependencyKind::kAfterCorr && !spec.array) {
        *field = entry;
        return Status::Invalid(entry + ": aftercorr is for an array (spec.array) on an array");
      }
      if (d.kind == domain::DependencyKind::kAfterCorr && target->array_id != id) {
        *field = entry;
        return Status::Invalid(entry + ": aftercorr needs an array, and job " + std::to_string(id) +
                               " is not one");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

bool ValidIdempotencyKey(const std::string& key) {
  return !key.empty() && key.size() <= 255 &&
         std::all_of(key.begin(), key.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; });
}

}  // namespace

void Api::SubmitJob(Call& call) {
  auto body = JsonBody(call);
  if (!body) return;
  domain::SourceDoc src{*body, "", {}};
  domain::ErrorList errors;
  auto doc = domain::ValidateJobDocument(src, &errors);
  if (!doc) return FailFields(call, errors);
  call.project = doc->project;
  auto config = Config();
  const bool exists = std::count(config->projects.begin(), config->projects.end(), doc->project);
  if (!exists || !call.access.CanRead(doc->project)) {
    return Fail(call, 404, "not_found", "project \"" + doc->project + "\" not found",
                "metadata.project");
  }
  if (!call.access.CanSubmit(doc->project)) {
    return Fail(call, 403, "permission_denied",
                call.access.user() + " may not submit jobs to project " + doc->project);
  }
  const std::string& priority = doc->typed.priority_class;
  if (!priority.empty()) {
    auto cls = config->priority_classes.find(priority);
    if (cls == config->priority_classes.end()) {
      return Fail(call, 400, "invalid_argument",
                  "spec.priorityClass: PriorityClass \"" + priority + "\" does not exist",
                  "spec.priorityClass");
    }
    if (std::string refusal = call.access.ClassRefusal(cls->second, doc->project);
        !refusal.empty()) {
      return Fail(call, 403, "permission_denied", refusal, "spec.priorityClass");
    }
  }
  for (size_t i = 0; i < doc->typed.datasets.size(); ++i) {
    const std::string& name = doc->typed.datasets[i];
    if (!config->datasets.count(name)) {
      const std::string field = "spec.datasets[" + std::to_string(i) + "]";
      return Fail(call, 400, "invalid_argument",
                  field + ": Dataset \"" + name + "\" does not exist", field);
    }
  }
  // What nothing could ever run is refused now, with its field, rather than left to wait.
  if (std::optional<domain::FieldError> never = hooks_->NeverHeld(doc->typed)) {
    domain::ErrorList errors;
    errors.Add(src, never->field, never->message);
    return FailFields(call, errors);
  }
  store::JobRecord job;
  job.name = doc->name;
  job.project = doc->project;
  job.user = call.access.user();
  job.spec = doc->spec;
  job.reason = "submitted";
  job.submitted_at = job.updated_at = call.started;
  job.version = 1;
  // An array's elements are jobs of one spec, each with its index, written in one transaction
  // (ADR 0023): the first element's id is the array's.
  std::vector<int64_t> indices;
  if (doc->typed.array) indices = doc->typed.array->Indices();
  // A client that may retry (its connection cut before the answer) names the submission: the
  // same key from the same user returns the job it made, never a second one.
  const std::string key = call.req.get_header_value("Idempotency-Key");
  if (call.req.has_header("Idempotency-Key") && !ValidIdempotencyKey(key)) {
    return Fail(call, 400, "invalid_argument",
                "Idempotency-Key: 1 to 255 visible ASCII characters, unique per submission (a "
                "UUID)",
                "Idempotency-Key");
  }
  int64_t replayed = 0;
  int64_t seq = 0;
  std::string refused_field;
  Status s = store_->Write([&](store::Tx& tx) {
    if (!key.empty()) {
      auto earlier = tx.FindSubmission(job.user, key, call.started);
      if (earlier.ok()) {
        replayed = *earlier;
        return Status::Ok();
      }
      if (earlier.status().code() != base::StatusCode::kNotFound) return earlier.status();
    }
    if (Status d = CheckDependencies(call, tx, doc->typed, &refused_field); !d.ok()) return d;
    const size_t n = indices.empty() ? 1 : indices.size();
    for (size_t i = 0; i < n; ++i) {
      store::JobRecord element = job;
      if (!indices.empty()) {
        element.array_id = i == 0 ? store::kNewArray : job.id;
        element.array_index = indices[i];
      }
      auto id = tx.InsertJob(element);
      if (!id.ok()) return id.status();
      if (i == 0) {
        job.id = *id;
        if (!indices.empty()) {
          job.array_id = *id;
          job.array_index = indices[0];
        }
      }
      auto e = tx.AppendEvent({0, call.started, "Job", std::to_string(*id), job.project, "Normal",
                               "Submitted", "submitted by " + job.user});
      if (!e.ok()) return e.status();
      seq = *e;
    }
    if (!key.empty()) {
      if (Status k = tx.PutSubmission(job.user, key, job.id, call.started); !k.ok()) return k;
    }
    const std::string what =
        indices.empty() ? "job " + std::to_string(job.id)
                        : "array " + std::to_string(job.id) + " of " + std::to_string(n) + " jobs";
    store::AuditEntry a{0,           call.started, job.user, "POST",    call.req.path,
                        call.action, job.project,  201,      "allowed", what};
    return tx.AppendAudit(a).status();
  });
  if (!refused_field.empty()) {
    return Fail(call, 400, "invalid_argument", s.message(), refused_field);
  }
  if (!s.ok()) return Fail(call, s);
  if (replayed > 0) return ReplaySubmission(call, replayed, key, *doc);
  call.audited = true;
  Changed(seq, false);
  Json out = JobToJson(job);
  if (!indices.empty()) {
    out["status"]["array"] = {{"size", indices.size()},
                              {"maxRunning", doc->typed.array->max_running},
                              {"phases", {{"Pending", indices.size()}}}};
  }
  Respond(call, 201, out);
}

void Api::ListJobs(Call& call) {
  store::JobFilter filter;
  auto limit = IntParam(call, "limit", 100, 1, options_.max_page);
  if (!limit) return;
  auto after = IntParam(call, "continue", 0, 0, INT64_MAX);
  if (!after) return;
  filter.limit = static_cast<int32_t>(*limit);
  filter.phases = CommaList(call.req.get_param_value("phase"));
  for (const std::string& phase : filter.phases) {
    if (!domain::ParsePhase(phase)) {
      return Fail(call, 400, "invalid_argument",
                  "phase: \"" + phase +
                      "\" is not a phase (Pending, Placed, Running, Stopping, Succeeded, Failed, "
                      "Cancelled)",
                  "phase");
    }
  }
  filter.user = call.req.get_param_value("user");
  auto newest = NewestFirst(call);
  if (!newest) return;
  filter.newest_first = *newest;
  // Oldest first, a page continues after the last id it listed; newest first, before it.
  (filter.newest_first ? filter.before_id : filter.after_id) = *after;
  bool ended_by_bytes = false;
  filter.max_bytes = options_.max_answer_bytes;
  filter.ended_by_bytes = &ended_by_bytes;
  auto config = Config();
  std::vector<std::string> wanted = CommaList(call.req.get_param_value("project"));
  for (const std::string& p : wanted) {
    if (!std::count(config->projects.begin(), config->projects.end(), p) ||
        !call.access.CanRead(p)) {
      return Fail(call, 404, "not_found", "project \"" + p + "\" not found", "project");
    }
  }
  if (wanted.empty() && !call.access.IsAdmin()) {
    wanted = call.access.Readable(config->projects);
    if (wanted.empty())
      return Respond(call, 200, {{"items", Json::array()}, {"continue", nullptr}});
  }
  filter.projects = wanted;
  // An array is one line (its first element, with its elements' counts by phase) unless its
  // elements are asked for (?array=ID) or a phase is: then the elements in it are listed.
  auto array = IntParam(call, "array", 0, 0, INT64_MAX);
  if (!array) return;
  filter.array_id = *array;
  // ?arrays=whole: one line per array with a phase too (one shown when any element is in it).
  const std::string arrays = call.req.get_param_value("arrays");
  if (!arrays.empty() && arrays != "whole" && arrays != "elements") {
    return Fail(call, 400, "invalid_argument",
                "arrays: \"" + arrays + "\" is neither whole nor elements", "arrays");
  }
  filter.arrays_as_one =
      *array == 0 && (arrays == "whole" || (arrays.empty() && filter.phases.empty()));
  auto selector = domain::LabelSelector::Parse(call.req.get_param_value("labelSelector"));
  if (!selector.ok()) {
    return Fail(call, 400, "invalid_argument", "labelSelector: " + selector.status().message(),
                "labelSelector");
  }
  // ?name=: a part of the name, in any case; ?cluster=: placed on, or ran on, one of these.
  std::string name_part = call.req.get_param_value("name");
  for (char& ch : name_part) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (name_part.size() > 253) {
    return Fail(call, 400, "invalid_argument", "name: longer than any job name (253)", "name");
  }
  const std::vector<std::string> clusters = CommaList(call.req.get_param_value("cluster"));
  for (const std::string& c : clusters) {
    if (!std::count(config->clusters.begin(), config->clusters.end(), c)) {
      return Fail(call, 400, "invalid_argument", "cluster: \"" + c + "\" is not a cluster",
                  "cluster");
    }
  }
  auto keep = [&](const store::JobRecord& j) {
    if (!name_part.empty()) {
      std::string name = j.name;
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (name.find(name_part) == std::string::npos) return false;
    }
    if (!clusters.empty()) {
      bool in = false;
      for (const Json& a : j.allocation.is_array() ? j.allocation : Json::array()) {
        in = in || std::count(clusters.begin(), clusters.end(), a.value("cluster", ""));
      }
      if (!in) return false;
    }
    return selector->Matches(domain::LabelsOf(j.spec.value("labels", Json::object())));
  };
  const bool filtered = !selector->empty() || !name_part.empty() || !clusters.empty();
  std::vector<store::JobRecord> jobs;
  std::map<int64_t, Json> summaries;
  Json next;
  // The store pages by id; labels live in the spec and placements in the allocation, so a
  // selector, a name or a cluster is applied here, reading further pages until this one is
  // full. A bounded number of store pages is read per request: the answer may then hold fewer
  // jobs, and its continue token goes on after the last one read.
  constexpr int kMaxStorePages = 16;
  for (int page = 0; page < kMaxStorePages; ++page) {
    std::vector<store::JobRecord> read;
    Status st = store_->Read([&](store::Tx& tx) {
      auto r = tx.ListJobs(filter);
      if (!r.ok()) return r.status();
      read = std::move(r.value());
      for (const store::JobRecord& j : read) {
        if (!filter.arrays_as_one || j.array_id != j.id) continue;
        auto summary = ArraySummary(tx, j);
        if (!summary.ok()) return summary.status();
        summaries[j.id] = std::move(summary.value());
      }
      return Status::Ok();
    });
    if (!st.ok()) return Fail(call, st);
    // A full page, or one the byte bound ended, continues from its last job.
    const bool more =
        !read.empty() && (read.size() == static_cast<size_t>(filter.limit) || ended_by_bytes);
    next = more ? Json(read.back().id) : Json();
    if (!filtered) {
      jobs = std::move(read);
      break;
    }
    for (store::JobRecord& j : read) {
      if (keep(j)) jobs.push_back(std::move(j));
    }
    if (!more || jobs.size() >= static_cast<size_t>(*limit)) break;
    (filter.newest_first ? filter.before_id : filter.after_id) = read.back().id;
    filter.limit = static_cast<int32_t>(*limit - static_cast<int64_t>(jobs.size()));
    ended_by_bytes = false;
  }
  Json items = Json::array();
  for (store::JobRecord& j : jobs) {
    if (j.phase == "Pending") {
      std::string why = hooks_->PendingReason(j.id);
      if (!why.empty()) j.reason = why;
    }
    const int64_t id = j.id;
    items.push_back(JobToJson(std::move(j)));
    if (summaries.count(id)) items.back()["status"]["array"] = std::move(summaries[id]);
  }
  JobMentions(call.access, store_).Hide(&items);
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

std::optional<store::JobRecord> ReadableJob(Api::Call& call, store::Store* store) {
  const auto parsed = IdArg(call, 1, "job");
  if (!parsed) return std::nullopt;
  const int64_t id = *parsed;
  // ?index=N: element N of array `id` (the CLI's ID_N).
  auto index = IntParam(call, "index", -1, 0, domain::kMaxArrayIndex);
  if (!index) return std::nullopt;
  store::JobRecord job;
  Status s = store->Read([&](store::Tx& tx) {
    if (*index >= 0) {
      store::JobFilter f;
      f.array_id = id;
      f.array_index = *index;
      f.limit = 1;
      auto r = tx.ListJobs(f);
      if (!r.ok()) return r.status();
      if (r->empty()) {
        return Status::NotFound("job " + std::to_string(id) + "_" + std::to_string(*index));
      }
      job = r->front();
      return Status::Ok();
    }
    auto r = tx.GetJob(id);
    if (!r.ok()) return r.status();
    job = *r;
    return Status::Ok();
  });
  if (!s.ok() || !call.access.CanRead(job.project)) {
    if (s.ok() || s.code() == base::StatusCode::kNotFound) {
      Fail(call, 404, "not_found",
           "job " + std::to_string(id) + (*index >= 0 ? "_" + std::to_string(*index) : "") +
               " not found");
    } else {
      Fail(call, s);
    }
    return std::nullopt;
  }
  call.project = job.project;
  return job;
}

void Api::GetJob(Call& call) {
  auto job = ReadableJob(call, store_);
  if (!job) return;
  if (job->phase == "Pending") {
    std::string why = hooks_->PendingReason(job->id);
    if (!why.empty()) job->reason = why;
  }
  Json out = JobToJson(*job);
  // The array's first element, asked for as the array (not as ID_0): its counts, and with
  // ?elements=true its elements.
  if (job->array_id == job->id && call.req.get_param_value("index").empty()) {
    const bool elements = call.req.get_param_value("elements") == "true";
    Status s = store_->Read([&](store::Tx& tx) {
      auto summary = ArraySummary(tx, *job);
      if (!summary.ok()) return summary.status();
      out["status"]["array"] = std::move(summary.value());
      if (!elements) return Status::Ok();
      store::JobFilter f;
      f.array_id = job->id;
      f.limit = static_cast<int32_t>(kMaxElementsShown);
      auto r = tx.ListJobs(f);
      if (!r.ok()) return r.status();
      Json list = Json::array();
      for (const store::JobRecord& e : *r) {
        list.push_back({{"id", e.id},
                        {"index", e.array_index},
                        {"phase", e.phase},
                        {"reason", e.phase == "Pending" && !hooks_->PendingReason(e.id).empty()
                                       ? hooks_->PendingReason(e.id)
                                       : e.reason}});
      }
      out["status"]["array"]["elements"] = std::move(list);
      return Status::Ok();
    });
    if (!s.ok()) return Fail(call, s);
  }
  JobMentions(call.access, store_).Hide(&out);
  Respond(call, 200, out);
}

void Api::ReplaySubmission(Call& call, int64_t id, const std::string& key,
                           const domain::JobDocument& doc) {
  auto job = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetJob(id); });
  if (!job.ok()) return Fail(call, job.status());
  // The same key for another submission is the client's mistake, said rather than hidden.
  if (job->name != doc.name || job->project != doc.project) {
    return Fail(call, 409, "conflict",
                "Idempotency-Key " + key + " was used for job " + std::to_string(id) + " (" +
                    job->name + " in project " + job->project +
                    "); a new submission needs a new key",
                "Idempotency-Key");
  }
  call.res.set_header("Idempotent-Replayed", "true");
  Respond(call, 200, JobToJson(*job));
}

void Api::CancelJob(Call& call) {
  auto job = ReadableJob(call, store_);
  if (!job) return;
  if (!call.access.CanManageJob(job->project, job->user)) {
    return Fail(
        call, 403, "permission_denied",
        call.access.user() + " may not cancel job " + std::to_string(job->id) + " of " + job->user);
  }
  // The array asked for as the array (its first element's id, without ?index) cancels every
  // element that has not ended, in one transaction; ID_N (or any other job) only itself.
  const bool whole_array = job->array_id == job->id && call.req.get_param_value("index").empty();
  int64_t seq = 0;
  int64_t cancelled = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    std::vector<store::JobRecord> targets;
    if (whole_array) {
      store::JobFilter f;
      f.array_id = job->id;
      f.phases = {"Pending", "Placed", "Running", "Stopping"};
      f.limit = 100000;
      auto r = tx.ListJobs(f);
      if (!r.ok()) return r.status();
      targets = std::move(r.value());
    } else {
      auto current = tx.GetJob(job->id);
      if (!current.ok()) return current.status();
      targets.push_back(std::move(current.value()));
    }
    for (store::JobRecord& target : targets) {
      auto life = LifeOf(target);
      if (!life.ok()) return life.status();
      // A job that holds devices goes through Stopping: they stay taken until its tasks have
      // been seen to stop. A spec that no longer decodes (a damaged row) gets the default
      // grace: such a job can still be cancelled.
      auto spec = SpecOf(target);
      const double grace = spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period;
      auto t = domain::lifecycle::Cancel(*life, call.access.user(), grace, call.started);
      if (!t.ok()) {
        return Status(t.status().code(),
                      "job " + std::to_string(target.id) + ": " + t.status().message());
      }
      if (t->events.empty()) continue;  // already being cancelled: nothing to do
      auto e = CommitTransition(tx, *t, call.started, &target);
      if (!e.ok()) return e.status();
      seq = *e;
      ++cancelled;
    }
    if (!whole_array) *job = targets.front();
    if (cancelled == 0) return Status::Ok();
    store::AuditEntry a{0,
                        call.started,
                        call.access.user(),
                        "POST",
                        call.req.path,
                        call.action,
                        job->project,
                        200,
                        "allowed",
                        whole_array ? "array " + std::to_string(job->id) + ": " +
                                          std::to_string(cancelled) + " jobs"
                                    : "job " + std::to_string(job->id)};
    return tx.AppendAudit(a).status();
  });
  if (!s.ok()) return Fail(call, s);
  call.audited = seq > 0;  // a repeated cancel changed nothing and is audited as any call
  Changed(seq, false);
  if (whole_array) {
    auto current = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetJob(job->id); });
    if (current.ok()) *job = std::move(current.value());
  }
  Json out = JobToJson(*job);
  if (whole_array) out["status"]["cancelledElements"] = cancelled;
  JobMentions(call.access, store_).Hide(&out);
  Respond(call, 200, out);
}

void Api::ExplainJob(Call& call) {
  auto job = ReadableJob(call, store_);
  if (!job) return;
  if (job->phase != "Pending") {
    return Respond(call, 200,
                   {{"job", job->id},
                    {"phase", job->phase},
                    {"message", "job is " + job->phase + ", not pending"}});
  }
  auto e = hooks_->Explain(job->id);
  if (!e.ok()) {
    return Respond(call, 200,
                   {{"job", job->id},
                    {"phase", job->phase},
                    {"message", "the scheduler has not considered this job yet"}});
  }
  Json out = *e;
  out["job"] = job->id;
  out["phase"] = job->phase;
  JobMentions(call.access, store_).Hide(&out);
  Respond(call, 200, out);
}

void Api::JobEvents(Call& call) {
  auto job = ReadableJob(call, store_);
  if (!job) return;
  store::EventFilter f;
  f.object_kind = "Job";
  f.object_name = std::to_string(job->id);
  f.limit = options_.max_page;
  auto newest = NewestFirst(call);
  if (!newest) return;
  f.newest_first = *newest;
  auto events_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListEvents(f); });
  if (!events_read.ok()) return Fail(call, events_read.status());
  std::vector<store::Event> events = std::move(events_read.value());
  Json items = Json::array();
  for (const store::Event& e : events) items.push_back(EventToJson(e));
  JobMentions(call.access, store_).Hide(&items);
  Json next;
  if (!PageWhole(call, &items, &next, 0, options_.max_page)) return;
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

namespace {

store::EventFilter VisibleEvents(const Access& access, const std::vector<std::string>& projects) {
  store::EventFilter f;
  if (!access.IsAdmin()) {
    f.all_projects = false;
    f.projects = access.Readable(projects);
  }
  return f;
}

}  // namespace

void Api::ListEvents(Call& call) {
  // ?continue, the answer's, as on every list; ?after, its old name, still works. latest: only
  // what comes next (a dashboard that has just read the current state).
  const char* from = call.req.has_param("continue") ? "continue" : "after";
  const bool latest = call.req.get_param_value(from) == "latest";
  auto after = latest ? std::optional<int64_t>(0) : IntParam(call, from, 0, 0, INT64_MAX);
  if (!after) return;
  auto limit = IntParam(call, "limit", 100, 1, options_.max_page);
  if (!limit) return;
  auto wait = IntParam(call, "wait", 0, 0, static_cast<int64_t>(options_.watch_timeout));
  if (!wait) return;
  auto newest = NewestFirst(call);
  if (!newest) return;
  store::EventFilter f = VisibleEvents(call.access, Config()->projects);
  f.after_seq = *after;
  f.limit = static_cast<int32_t>(*limit);
  f.newest_first = *newest;
  // ?objectKind=Node&object=NAME: the events of one object (a node's page).
  f.object_kind = call.req.get_param_value("objectKind");
  f.object_name = call.req.get_param_value("object");
  if (!f.object_name.empty() && f.object_kind.empty()) {
    return Fail(call, 400, "invalid_argument", "object: needs objectKind (Job, Node, ...)",
                "object");
  }
  if (latest) {
    auto seq = store::ReadValue(*store_, [](store::Tx& tx) { return tx.LatestEventSeq(); });
    if (!seq.ok()) return Fail(call, seq.status());
    f.after_seq = *seq;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(static_cast<int>(*wait));
  std::vector<store::Event> events;
  // A long poll: with ?wait=N the call returns as soon as there is something to see.
  for (;;) {
    // Events up to `seen` are covered by the read that follows; wait only for later ones (some
    // events are of projects this caller cannot see, and must not wake it over and over).
    const int64_t seen = bus_->latest();
    Status s = store_->Read([&](store::Tx& tx) {
      auto r = tx.ListEvents(f);
      if (!r.ok()) return r.status();
      events = std::move(r.value());
      return Status::Ok();
    });
    if (!s.ok()) return Fail(call, s);
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (!events.empty() || left <= 0 || !bus_->Wait(seen, left)) break;
  }
  Json items = Json::array();
  for (const store::Event& e : events) items.push_back(EventToJson(e));
  JobMentions(call.access, store_).Hide(&items);
  const int64_t last =
      events.empty() ? f.after_seq : std::max(events.front().seq, events.back().seq);
  // A feed: there is always a next page to ask for (a long poll waits for it).
  Respond(call, 200, {{"items", std::move(items)}, {"last", last}, {"continue", last}});
}

void Api::Watch(Call& call) {
  // Server-sent events: each event is sent as "id: <seq>", "event: <reason>", "data: <json>",
  // and a client that reconnects with Last-Event-ID (or ?after=) misses nothing.
  int64_t after = 0;
  const std::string last_id = call.req.get_header_value("Last-Event-ID");
  if (!last_id.empty()) {
    long long v = 0;
    if (base::ParseInt64(last_id, &v) && v >= 0) after = v;
  }
  auto from = IntParam(call, "after", after, 0, INT64_MAX);
  if (!from) return;
  store::EventFilter f = VisibleEvents(call.access, Config()->projects);
  f.after_seq = *from;
  f.limit = 500;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(options_.watch_timeout * 1000));
  store::Store* store = store_;
  EventBus* bus = bus_;
  // The stream outlives this call: it keeps its own copy of the caller's access, and the view
  // of the tenancy that the access points into.
  auto access = std::make_shared<const Access>(call.access);
  std::shared_ptr<const void> pinned = call.pinned;
  call.res.set_header("Cache-Control", "no-cache");
  call.res.set_chunked_content_provider(
      "text/event-stream", [store, bus, f, deadline, access, pinned](net::Sink& sink) mutable {
        std::vector<store::Event> events;
        const int64_t seen = bus->latest();
        Status s = store->Read([&](store::Tx& tx) {
          auto r = tx.ListEvents(f);
          if (!r.ok()) return r.status();
          events = std::move(r.value());
          return Status::Ok();
        });
        if (!s.ok()) return false;
        std::string out;
        JobMentions mentions(*access, store);
        for (const store::Event& e : events) {
          Json data = EventToJson(e);
          mentions.Hide(&data);
          out += "id: " + std::to_string(e.seq) + "\nevent: " + e.reason +
                 "\ndata: " + data.dump() + "\n\n";
          f.after_seq = e.seq;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (std::chrono::steady_clock::now() >= deadline) {
          sink.done();
          return true;
        }
        if (events.empty()) {
          if (!bus->Wait(seen, 1.0)) {
            sink.done();
            return true;
          }
          // A comment line keeps proxies from closing an idle stream, and finds a client gone.
          if (bus->latest() == seen && !sink.write(": keep-alive\n\n", 14)) return false;
        }
        return true;
      });
}

}  // namespace meridian::api
