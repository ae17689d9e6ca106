// Jobs, their events and explanations, and watching for changes.
#include <algorithm>
#include <chrono>

#include "api/api_internal.h"
#include "api/job_life.h"
#include "api/job_mentions.h"
#include "base/strings.h"
#include "domain/lifecycle.h"

namespace meridian::api {

using base::Status;

namespace {

std::vector<std::string> CommaList(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view part : base::Split(text, ',')) {
    part = base::Trim(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
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
  store::JobRecord job;
  job.name = doc->name;
  job.project = doc->project;
  job.user = call.access.user();
  job.spec = doc->spec;
  job.reason = "submitted";
  job.submitted_at = job.updated_at = call.started;
  job.version = 1;
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto id = tx.InsertJob(job);
    if (!id.ok()) return id.status();
    job.id = *id;
    auto e = tx.AppendEvent({0, call.started, "Job", std::to_string(job.id), job.project, "Normal",
                             "Submitted", "submitted by " + job.user});
    if (!e.ok()) return e.status();
    seq = *e;
    store::AuditEntry a{
        0,           call.started, job.user, "POST",    call.req.path,
        call.action, job.project,  201,      "allowed", "job " + std::to_string(job.id)};
    return tx.AppendAudit(a).status();
  });
  if (!s.ok()) return Fail(call, s);
  call.audited = true;
  Changed(seq, false);
  Respond(call, 201, JobToJson(job));
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
  auto jobs_read = store::ReadValue(*store_, [&](store::Tx& tx) { return tx.ListJobs(filter); });
  if (!jobs_read.ok()) return Fail(call, jobs_read.status());
  std::vector<store::JobRecord> jobs = std::move(jobs_read.value());
  // A full page, or one the byte bound ended, continues from its last job.
  Json next = !jobs.empty() && (jobs.size() == static_cast<size_t>(filter.limit) || ended_by_bytes)
                  ? Json(jobs.back().id)
                  : Json();
  Json items = Json::array();
  for (store::JobRecord& j : jobs) {
    if (j.phase == "Pending") {
      std::string why = hooks_->PendingReason(j.id);
      if (!why.empty()) j.reason = why;
    }
    items.push_back(JobToJson(std::move(j)));
  }
  JobMentions(call.access, store_).Hide(&items);
  Respond(call, 200, {{"items", std::move(items)}, {"continue", std::move(next)}});
}

std::optional<store::JobRecord> ReadableJob(Api::Call& call, store::Store* store) {
  const auto parsed = IdArg(call, 1, "job");
  if (!parsed) return std::nullopt;
  const int64_t id = *parsed;
  store::JobRecord job;
  Status s = store->Read([&](store::Tx& tx) {
    auto r = tx.GetJob(id);
    if (!r.ok()) return r.status();
    job = *r;
    return Status::Ok();
  });
  if (!s.ok() || !call.access.CanRead(job.project)) {
    if (s.ok() || s.code() == base::StatusCode::kNotFound) {
      Fail(call, 404, "not_found", "job " + std::to_string(id) + " not found");
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
  JobMentions(call.access, store_).Hide(&out);
  Respond(call, 200, out);
}

void Api::CancelJob(Call& call) {
  auto job = ReadableJob(call, store_);
  if (!job) return;
  if (!call.access.CanManageJob(job->project, job->user)) {
    return Fail(
        call, 403, "permission_denied",
        call.access.user() + " may not cancel job " + std::to_string(job->id) + " of " + job->user);
  }
  int64_t seq = 0;
  Status s = store_->Write([&](store::Tx& tx) {
    auto current = tx.GetJob(job->id);
    if (!current.ok()) return current.status();
    *job = *current;
    auto life = LifeOf(*job);
    if (!life.ok()) return life.status();
    // A job that holds devices goes through Stopping: they stay taken until its tasks have
    // been seen to stop. A spec that no longer decodes (a damaged row) gets the default grace:
    // such a job can still be cancelled.
    auto spec = SpecOf(*job);
    const double grace = spec.ok() ? spec->grace_period : domain::JobSpec{}.grace_period;
    auto t = domain::lifecycle::Cancel(*life, call.access.user(), grace, call.started);
    if (!t.ok()) {
      return Status(t.status().code(),
                    "job " + std::to_string(job->id) + ": " + t.status().message());
    }
    if (t->events.empty()) return Status::Ok();  // already being cancelled: nothing to do
    auto e = CommitTransition(tx, *t, call.started, &*job);
    if (!e.ok()) return e.status();
    seq = *e;
    store::AuditEntry a{0,
                        call.started,
                        call.access.user(),
                        "POST",
                        call.req.path,
                        call.action,
                        job->project,
                        200,
                        "allowed",
                        "job " + std::to_string(job->id)};
    return tx.AppendAudit(a).status();
  });
  if (!s.ok()) return Fail(call, s);
  call.audited = seq > 0;  // a repeated cancel changed nothing and is audited as any call
  Changed(seq, false);
  Json out = JobToJson(*job);
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
  Respond(call, 200, {{"items", std::move(items)}});
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
  // after=latest: only what comes next (a dashboard that has just read the current state).
  const bool latest = call.req.get_param_value("after") == "latest";
  auto after = latest ? std::optional<int64_t>(0) : IntParam(call, "after", 0, 0, INT64_MAX);
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
  Respond(call, 200, {{"items", std::move(items)}, {"last", last}});
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
      "text/event-stream",
      [store, bus, f, deadline, access, pinned](size_t, httplib::DataSink& sink) mutable {
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
