// `meridian sim export` and `meridian plan --what-if`: a live server's history written as a replay
// trace, and proposed documents replayed on it beside the live ones (src/sim/history.h).
#include <time.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "apps/meridian/commands.h"
#include "base/clock.h"
#include "base/duration.h"
#include "cli/output.h"
#include "domain/documents.h"
#include "sim/history.h"

namespace {

using meridian::base::Result;
using meridian::base::Status;
using meridian::cli::Client;
using meridian::sim::Json;

// Every item of a listing, page after page.
Result<Json> Items(const Client& client, const std::string& path) {
  Json items = Json::array();
  const std::string sep = path.find('?') == std::string::npos ? "?" : "&";
  std::string page = path + sep + "limit=1000";
  for (;;) {
    auto r = client.Call("GET", page);
    if (!r.ok()) return r.status();
    if (r->status != 200) {
      return Status::Invalid(path + ": " + meridian::cli::ErrorMessage(*r) + " (HTTP " +
                             std::to_string(r->status) + ")");
    }
    for (Json& item : r->body.at("items")) items.push_back(std::move(item));
    const Json next = r->body.value("continue", Json());
    if (next.is_null()) return items;
    page = path + sep +
           "limit=1000&continue=" + (next.is_string() ? next.get<std::string>() : next.dump());
  }
}

// The configuration documents a replay uses, as the server holds them.
Result<Json> LiveDocuments(const Client& client) {
  Json docs = Json::array();
  for (const char* plural :
       {"clusters", "nodepools", "projects", "quotas", "priorityclasses", "policies"}) {
    auto items = Items(client, std::string("/api/v1/") + plural);
    if (!items.ok()) return items.status();
    for (Json& d : *items) docs.push_back(std::move(d));
  }
  return docs;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::Invalid(path + ": cannot write");
  return Status::Ok();
}

struct ExportFlags {
  std::string from = "7d";
  std::string to;
  std::string out;
};

int RunExport(const ExportFlags& f) {
  auto config = GlobalClientConfig();
  if (!config.ok()) return Fail(config.status());
  const Client client(*config);
  const double now = meridian::base::SystemClock().Now();
  auto from = ParseWhen("--from", f.from, now);
  if (!from.ok()) return Fail(from.status());
  double to = 0;
  if (!f.to.empty()) {
    auto t = ParseWhen("--to", f.to, now);
    if (!t.ok()) return Fail(t.status());
    to = *t;
  }
  meridian::sim::LiveState live;
  std::cerr << "export: reading nodes, documents and jobs from the server\n";
  auto nodes = Items(client, "/api/v1/nodes");
  if (!nodes.ok()) return Fail(nodes.status());
  live.nodes = std::move(*nodes);
  auto docs = LiveDocuments(client);
  if (!docs.ok()) return Fail(docs.status());
  live.documents = std::move(*docs);
  auto jobs = Items(client,
                    "/api/v1/jobs?phase=Pending,Placed,Running,Stopping,Succeeded,"
                    "Failed,Cancelled");
  if (!jobs.ok()) return Fail(jobs.status());
  live.jobs = std::move(*jobs);
  auto trace = meridian::sim::TraceOfHistory(live, *from, to, now);
  if (!trace.ok()) return Fail(trace.status());
  // Jobs are listed as the caller may read them: anyone but an admin sees part of the load.
  auto me = client.Call("GET", "/api/v1/whoami");
  bool admin = false;
  if (me.ok() && me->status == 200) {
    for (const Json& r : me->body.value("roles", Json::array())) {
      admin = admin || r.value("role", "") == "admin";
    }
  }
  if (!admin) {
    trace->notes.push_back(
        "only the jobs of the projects you may read are in the trace; the "
        "others' load on the estate is not");
  }
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) return Fail(Status::Invalid(f.out + ": " + ec.message()));
  const std::string cluster = (std::filesystem::path(f.out) / "cluster.yaml").string();
  const std::string jobs_csv = (std::filesystem::path(f.out) / "jobs.csv").string();
  std::string notes;
  for (const std::string& note : trace->notes) notes += note + "\n";
  for (const auto& [path, text] :
       {std::pair{cluster, meridian::sim::ReplayClusterYaml(trace->cluster)},
        std::pair{jobs_csv, meridian::sim::ReplayJobsCsv(trace->jobs)},
        std::pair{(std::filesystem::path(f.out) / "notes.txt").string(), notes}}) {
    if (Status s = WriteFile(path, text); !s.ok()) return Fail(s);
  }
  std::cout << "wrote " << jobs_csv << " (" << trace->jobs.size() << " jobs) and " << cluster
            << " (" << trace->cluster.nodes.size() << " nodes, " << trace->cluster.projects.size()
            << " projects)\n";
  for (const std::string& note : trace->notes) std::cout << "note: " << note << "\n";
  std::cout << "replay it: meridian sim replay --cluster " << cluster << " --jobs " << jobs_csv
            << "\n";
  return 0;
}

// The documents of `files` in canonical form; errors name file, line and field.
Result<Json> ProposedFromFiles(const Json& files) {
  Json docs = Json::array();
  meridian::domain::ErrorList errors;
  for (const Json& f : files) {
    auto sources = meridian::domain::ParseYamlDocuments(f.at("content"), f.at("name"), nullptr);
    if (!sources.ok()) return sources.status();
    for (const meridian::domain::SourceDoc& src : *sources) {
      auto doc = meridian::domain::ValidateDocument(src, &errors);
      if (doc) docs.push_back(doc->ToJson());
    }
  }
  if (!errors.empty()) return Status::Invalid(errors.ToString());
  return docs;
}

}  // namespace

meridian::base::Result<double> ParseWhen(const std::string& flag, const std::string& text,
                                         double now) {
  if (text.empty()) return Status::Invalid(flag + ": empty");
  char* end = nullptr;
  const double unix_seconds = std::strtod(text.c_str(), &end);
  if (end && *end == '\0' && unix_seconds >= 1e9) return unix_seconds;
  for (const char* format : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"}) {
    struct tm tm = {};
    const char* end = strptime(text.c_str(), format, &tm);
    if (end && *end == '\0') return static_cast<double>(timegm(&tm));
  }
  auto ago = meridian::base::ParseDuration(text);
  if (ago.ok()) return now - *ago;
  return Status::Invalid(flag + ": \"" + text +
                         "\" is neither Unix seconds, a UTC date (2026-11-30, "
                         "2026-11-30T08:00:00Z) nor a duration before now (7d, 36h)");
}

void AddSimExport(CLI::App* sim, int* rc) {
  static ExportFlags f;
  CLI::App* cmd = sim->add_subcommand(
      "export", "Write a live server's job history as a replay trace (cluster.yaml, jobs.csv)");
  cmd->add_option("--from", f.from,
                  "jobs submitted from: Unix seconds, a UTC date (2026-11-30, "
                  "2026-11-30T08:00:00Z) or a duration before now (default 7d)");
  cmd->add_option("--to", f.to, "until (same forms; default: now)");
  cmd->add_option("--out", f.out, "directory to write into")->required();
  cmd->callback([rc] { *rc = RunExport(f); });
}

int RunWhatIf(meridian::cli::Context& c, const meridian::cli::ConfigFlags& f,
              const std::string& trace_dir) {
  namespace fs = std::filesystem;
  auto cluster = meridian::sim::ReadReplayCluster((fs::path(trace_dir) / "cluster.yaml").string());
  if (!cluster.ok()) return Fail(cluster.status());
  auto jobs = meridian::sim::ReadReplayJobs((fs::path(trace_dir) / "jobs.csv").string());
  if (!jobs.ok()) return Fail(jobs.status());
  auto files = meridian::cli::ReadFiles(f.files);
  if (!files.ok()) return Fail(files.status());
  auto changes = ProposedFromFiles(*files);
  if (!changes.ok()) return Fail(changes.status());
  auto live = LiveDocuments(c.client);
  if (!live.ok()) return Fail(live.status());
  const Json proposed = meridian::sim::ProposedDocuments(*live, *changes, f.prune);
  const meridian::sim::ReplaySetup now = meridian::sim::SetupOfDocuments(*cluster, *live);
  const meridian::sim::ReplaySetup then = meridian::sim::SetupOfDocuments(*cluster, proposed);
  // -o json or yaml: the plan's changes go into the one object, and the server checks the files
  // before anything is replayed.
  const bool structured = c.output == "json" || c.output == "yaml";
  Json changes_planned = Json::array();
  if (structured) {
    const Json body = {{"files", *files}, {"prune", f.prune}};
    auto plan = c.client.Call("POST", "/api/v1/config/plan", &body);
    if (!plan.ok()) return Fail(plan.status());
    if (plan->status != 200) {
      c.err << "meridian: " << meridian::cli::ErrorMessage(*plan) << "\n";
      return meridian::cli::ExitCodeFor(plan->status);
    }
    changes_planned = plan->body.value("changes", Json::array());
  }

  c.err << "what-if: replaying " << jobs->size() << " jobs of " << trace_dir
        << " under the live and the proposed documents\n";
  std::mutex mu;
  int shown = 0;  // under mu
  double done[2] = {0, 0};
  auto progress = [&](int which) {
    return [&, which](double d) {
      std::lock_guard<std::mutex> lock(mu);
      done[which] = d;
      const int pct = static_cast<int>(std::floor(100 * std::min(done[0], done[1])));
      if (pct >= shown + 25) {
        shown = pct - pct % 25;
        c.err << "what-if: " << shown << "%\n";
      }
    };
  };
  Result<meridian::sim::ReplayResult> results[2] = {Status::Invalid("not run"),
                                                    Status::Invalid("not run")};
  const meridian::sim::ReplaySetup* setups[2] = {&now, &then};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      meridian::sim::ReplayOptions o = setups[i]->options;
      o.progress = progress(i);
      results[i] = meridian::sim::RunReplay(setups[i]->cluster, *jobs, o);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) {
    if (!r.ok()) return Fail(r.status());
  }
  // The trace's own notes (what the export approximated), then the documents'.
  std::vector<std::string> notes;
  std::ifstream trace_notes(fs::path(trace_dir) / "notes.txt");
  for (std::string line; std::getline(trace_notes, line);) {
    if (!line.empty()) notes.push_back(line);
  }
  for (const auto* s : setups) {
    for (const std::string& n : s->notes) {
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
    }
  }
  if (structured) {
    Json out = meridian::sim::WhatIfJson(*results[0], *results[1]);
    out["changes"] = changes_planned;
    out["trace"] = trace_dir;
    out["notes"] = notes;
    c.out << (c.output == "yaml" ? meridian::cli::ToYaml(out) : out.dump(2) + "\n");
    return 0;
  }
  const meridian::sim::WhatIfText text = meridian::sim::WhatIfTable(*results[0], *results[1]);
  c.out << "\nWhat if (" << jobs->size() << " jobs of " << trace_dir
        << " replayed; live -> proposed):\n";
  meridian::cli::Table{text.headers, text.rows}.Print(c.out);
  c.out << "\n" << text.estate << "\n";
  for (const std::string& n : notes) c.out << "note: " << n << "\n";
  return 0;
}
