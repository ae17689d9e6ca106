// Whole-store operations on real servers' state: `meridian store migrate` from a real server's
// SQLite data dir into a real PostgreSQL, which a real `meridian server --store` then serves;
// `meridian admin backup` of a server that is taking submissions, and `admin restore`.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/testing/temp_dir.h"
#include "store/testing/postgres_server.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 1, gpusPerNode: 8, gpuModel: H100-80GB}
)";

Json JobBody(const std::string& name, Json spec) {
  if (!spec.contains("command")) spec["command"] = {"true"};
  return {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
}

// Every job the server lists, by id (elements of arrays included).
std::map<int64_t, Json> AllJobs(const ServerProcess& s, const std::string& token) {
  std::map<int64_t, Json> out;
  const Json list = Http(s, "GET", "/api/v1/jobs?limit=1000&arrays=elements", token).body;
  for (const Json& j : list.value("items", Json::array())) out[j.value("id", int64_t{0})] = j;
  return out;
}

// The events of the estate, oldest first: {seq, reason, object name}.
std::vector<std::tuple<int64_t, std::string, std::string>> AllEvents(const ServerProcess& s,
                                                                     const std::string& token) {
  std::vector<std::tuple<int64_t, std::string, std::string>> out;
  const Json list = Http(s, "GET", "/api/v1/events?limit=1000", token).body;
  for (const Json& e : list.value("items", Json::array())) {
    out.emplace_back(e.value("seq", int64_t{0}), e.value("reason", ""), e.value("object", ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class StoreMigrate : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg_.Start(), "");
    std::string error;
    ASSERT_NE(pg_.Database("target", &error), "") << error;
    url_ = "postgresql://postgres@/target?host=" + pg_.socket_dir();
  }
  CliResult Migrate(const std::string& from, const std::string& to, const std::string& extra = "") {
    return Cli(kBinary, "store migrate --from " + from + " --to '" + to + "' " + extra, "", "");
  }

  base::testing::TempDir dir_;
  store::testing::PostgresServer pg_;
  std::string url_;
};

TEST_F(StoreMigrate, MovesAnEstateFromSqliteToPostgresWithItsIdsTokensAndEvents) {
  const std::string data = dir_.File("data");
  ServerProcess sqlite(kBinary, data);
  ASSERT_TRUE(sqlite.Start()) << ReadFile(data + ".log");
  const std::string admin = sqlite.admin_token();
  CliResult applied =
      Cli(kBinary, "apply -f " + WriteTestFile(dir_.File("e.yaml"), kEstate), sqlite.url(), admin);
  ASSERT_EQ(applied.code, 0) << applied.output;
  Json member = {
      {"spec", {{"roles", Json::array({{{"role", "member"}, {"project", "research"}}})}}}};
  ASSERT_EQ(Http(sqlite, "PUT", "/api/v1/users/ann", admin, member.dump()).status, 201);
  HttpResult t = Http(sqlite, "POST", "/api/v1/tokens", admin,
                      Json{{"user", "ann"}, {"description", "ann's laptop"}}.dump());
  ASSERT_EQ(t.status, 201) << t.text;
  const std::string ann = t.body.value("token", "");

  // Jobs in several phases: placed on the declared node, waiting for a zone no node has,
  // cancelled; and an array of four.
  std::vector<int64_t> ids;
  for (const Json& body :
       {JobBody("placed", {{"gpus", 2}}),
        JobBody("waits", {{"gpus", 1}, {"nodeSelector", {{"zone", "none"}}}}),
        JobBody("cancelled", {{"gpus", 1}, {"nodeSelector", {{"zone", "none"}}}}),
        JobBody("sweep",
                {{"cpuMilli", 100}, {"array", "0-3"}, {"nodeSelector", {{"zone", "none"}}}})}) {
    HttpResult r = Http(sqlite, "POST", "/api/v1/jobs", ann, body.dump());
    ASSERT_EQ(r.status, 201) << r.text;
    ids.push_back(r.body["id"]);
  }
  ASSERT_EQ(Http(sqlite, "POST", "/api/v1/jobs/" + std::to_string(ids[2]) + "/cancel", ann).status,
            200);
  ASSERT_TRUE(Eventually([&] { return JobPhase(sqlite, admin, ids[0]) != "Pending"; }))
      << GetJob(sqlite, admin, ids[0]).dump();
  ASSERT_TRUE(Eventually([&] { return JobPhase(sqlite, admin, ids[2]) == "Cancelled"; }));
  const std::map<int64_t, Json> before = AllJobs(sqlite, admin);
  ASSERT_EQ(before.size(), 7u);  // three jobs and four elements
  std::set<std::string> phases;
  for (const auto& [id, j] : before) phases.insert(j["status"].value("phase", ""));
  EXPECT_GE(phases.size(), 3u) << "phases: " << phases.size();
  const auto events = AllEvents(sqlite, admin);
  ASSERT_GE(events.size(), 7u);
  const int64_t audit_before =
      static_cast<int64_t>(Http(sqlite, "GET", "/api/v1/audit?limit=1000", admin)
                               .body.value("items", Json::array())
                               .size());

  // Refused while the server runs on the data dir.
  CliResult busy = Migrate("sqlite:" + data, url_);
  EXPECT_NE(busy.code, 0);
  EXPECT_NE(busy.output.find("is in use by another meridian server"), std::string::npos)
      << busy.output;
  sqlite.Stop();

  CliResult moved = Migrate("sqlite:" + data, url_, "--batch 2");
  ASSERT_EQ(moved.code, 0) << moved.output;
  EXPECT_NE(moved.output.find("jobs: 2/7"), std::string::npos) << moved.output;
  EXPECT_NE(moved.output.find("jobs: 7/7"), std::string::npos) << moved.output;
  EXPECT_NE(moved.output.find("verified:"), std::string::npos) << moved.output;
  EXPECT_NE(moved.output.find("jobs 7 (next id " + std::to_string(before.rbegin()->first + 1)),
            std::string::npos)
      << moved.output;

  // Again, into what is now not empty: refused, saying which table holds rows.
  CliResult again = Migrate("sqlite:" + data, url_);
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_NE(again.output.find("the target database is not empty: table"), std::string::npos)
      << again.output;

  // The server on PostgreSQL, on the same data dir (its admin token and logs): the same jobs,
  // events and audit, the old tokens, and ids after the old ones.
  ServerProcess postgres(kBinary, data, {"--store", url_});
  ASSERT_TRUE(postgres.Start()) << ReadFile(data + ".log");
  const std::map<int64_t, Json> after = AllJobs(postgres, ann);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [id, j] : before) {
    ASSERT_TRUE(after.count(id)) << id;
    EXPECT_EQ(after.at(id)["metadata"], j["metadata"]) << id;
    EXPECT_EQ(after.at(id)["spec"], j["spec"]) << id;
  }
  EXPECT_EQ(after.at(ids[2])["status"].value("phase", ""), "Cancelled");
  EXPECT_EQ(after.at(ids[1])["status"].value("phase", ""), "Pending");
  const auto events_after = AllEvents(postgres, admin);
  ASSERT_GE(events_after.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events_after[i], events[i]) << i;
  EXPECT_GE(static_cast<int64_t>(Http(postgres, "GET", "/api/v1/audit?limit=1000", admin)
                                     .body.value("items", Json::array())
                                     .size()),
            audit_before);
  HttpResult fresh =
      Http(postgres, "POST", "/api/v1/jobs", ann,
           JobBody("fresh", {{"gpus", 1}, {"nodeSelector", {{"zone", "none"}}}}).dump());
  ASSERT_EQ(fresh.status, 201) << fresh.text;
  EXPECT_EQ(fresh.body.value("id", int64_t{0}), before.rbegin()->first + 1);
  const auto newest = AllEvents(postgres, admin);
  EXPECT_GT(std::get<0>(newest.back()), std::get<0>(events.back()));
  CliResult got = Cli(kBinary, "get job " + std::to_string(ids[1]), postgres.url(), ann);
  EXPECT_EQ(got.code, 0) << got.output;
  EXPECT_NE(got.output.find("waits"), std::string::npos) << got.output;
}

TEST_F(StoreMigrate, RefusesASourceNewerThanTheBinaryAndBadArguments) {
  const std::string data = dir_.File("data");
  ServerProcess sqlite(kBinary, data);
  ASSERT_TRUE(sqlite.Start()) << ReadFile(data + ".log");
  sqlite.Stop();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((data + "/meridian.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_migrations (version) VALUES (99)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  CliResult newer = Migrate("sqlite:" + data, url_);
  EXPECT_EQ(newer.code, 1) << newer.output;
  EXPECT_NE(newer.output.find("schema version 99 is newer than this meridian knows"),
            std::string::npos)
      << newer.output;

  CliResult wrong = Migrate("postgres:" + data, url_);
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("--from: expected sqlite:DIR"), std::string::npos) << wrong.output;
  CliResult missing = Migrate("sqlite:" + dir_.File("nothing"), url_);
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("no meridian.db there"), std::string::npos) << missing.output;
  CliResult to = Migrate("sqlite:" + data, "mysql://x");
  EXPECT_EQ(to.code, 2) << to.output;
  EXPECT_NE(to.output.find("--to: expected a postgresql:// URL"), std::string::npos) << to.output;
}

// `bench api --store`: the same benchmark against a server on SQLite and one on PostgreSQL, in one
// run, each with durable submissions and their latencies.
TEST_F(StoreMigrate, BenchApiMeasuresSqliteAndPostgresInOneRun) {
  CliResult r = RunToExit(
      kBinary, {"bench", "api", "--clients", "2", "--seconds", "1", "--json", "--store", url_},
      dir_.File("bench.log"), 120);
  ASSERT_EQ(r.code, 0) << r.output;
  const Json j = Json::parse(r.output.substr(r.output.find('{')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  for (const char* store : {"sqlite", "postgresql"}) {
    ASSERT_TRUE(j.contains(store)) << r.output;
    EXPECT_GT(j[store].value("submissions", int64_t{0}), 0) << store << r.output;
    EXPECT_EQ(j[store].value("errors", int64_t{-1}), 0) << store << r.output;
    EXPECT_GT(j[store].value("p99_ms", 0.0), 0) << store << r.output;
  }
  // Every submission the PostgreSQL run counted is a row of that database.
  std::string error;
  PGconn* c = PQconnectdb(pg_.Database("target", &error).c_str());
  ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
  PGresult* rows = PQexec(c, "SELECT COUNT(*) FROM jobs");
  ASSERT_EQ(PQresultStatus(rows), PGRES_TUPLES_OK) << PQresultErrorMessage(rows);
  EXPECT_EQ(std::stoll(PQgetvalue(rows, 0, 0)), j["postgresql"].value("submissions", int64_t{0}));
  PQclear(rows);
  PQfinish(c);
  CliResult refused =
      RunToExit(kBinary, {"bench", "api", "--store", "mysql://x"}, dir_.File("refused.log"), 10);
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--store: expected a postgresql:// URL"), std::string::npos)
      << refused.output;
}

// A backup taken while clients submit holds every job acknowledged before it began; restored
// into a new data dir, a server serves them.
TEST(AdminBackup, KeepsEveryJobAcknowledgedBeforeItBeganWhileTheServerWrites) {
  base::testing::TempDir dir;
  const std::string data = dir.File("data");
  // No write limit: the submissions go on at the store's pace all through the backup.
  ServerProcess server(kBinary, data, {"--write-rate", "0"});
  ASSERT_TRUE(server.Start()) << ReadFile(data + ".log");
  const std::string admin = server.admin_token();
  ASSERT_EQ(
      Cli(kBinary, "apply -f " + WriteTestFile(dir.File("e.yaml"), kEstate), server.url(), admin)
          .code,
      0);
  std::mutex mu;
  std::vector<int64_t> acknowledged;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; !stop; ++i) {
        HttpResult r = Http(server, "POST", "/api/v1/jobs", admin,
                            JobBody("c" + std::to_string(c) + "-" + std::to_string(i),
                                    {{"cpuMilli", 100}, {"nodeSelector", {{"zone", "none"}}}})
                                .dump());
        if (r.status == 201) {
          std::lock_guard<std::mutex> lock(mu);
          acknowledged.push_back(r.body.value("id", int64_t{0}));
        }
      }
    });
  }
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return acknowledged.size() >= 100;
  }));
  std::vector<int64_t> before;
  {
    std::lock_guard<std::mutex> lock(mu);
    before = acknowledged;
  }
  const std::string file = dir.File("meridian.backup");
  CliResult backup = Cli(kBinary, "admin backup --data " + data + " --to " + file, "", "");
  size_t after_backup = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    after_backup = acknowledged.size();
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  ASSERT_EQ(backup.code, 0) << backup.output;
  EXPECT_GT(after_backup, before.size()) << "the clients went on submitting during the backup";
  CliResult twice = Cli(kBinary, "admin backup --data " + data + " --to " + file, "", "");
  EXPECT_NE(twice.code, 0);
  EXPECT_NE(twice.output.find("exists: a backup does not overwrite"), std::string::npos)
      << twice.output;
  // Restore refuses the data dir of a running server.
  CliResult busy = Cli(kBinary, "admin restore --from " + file + " --data " + data, "", "");
  EXPECT_NE(busy.code, 0);
  EXPECT_NE(busy.output.find("is in use by another meridian server"), std::string::npos)
      << busy.output;
  server.Stop();

  const std::string restored = dir.File("restored");
  CliResult restore = Cli(kBinary, "admin restore --from " + file + " --data " + restored, "", "");
  ASSERT_EQ(restore.code, 0) << restore.output;
  ServerProcess back(kBinary, restored);
  ASSERT_TRUE(back.Start()) << ReadFile(restored + ".log");
  std::set<int64_t> present;
  for (std::string next = "0"; !next.empty();) {
    const Json page = Http(back, "GET", "/api/v1/jobs?limit=1000&continue=" + next, admin).body;
    for (const Json& j : page.value("items", Json::array()))
      present.insert(j.value("id", int64_t{0}));
    next = page.contains("continue") && page["continue"].is_number()
               ? std::to_string(page["continue"].get<int64_t>())
               : "";
  }
  size_t missing = 0;
  for (int64_t id : before) missing += present.count(id) == 0;
  EXPECT_EQ(missing, 0u) << "of " << before.size() << " acknowledged before the backup; "
                         << present.size() << " restored";
  std::printf(
      "[figure] backup during submissions: %zu acknowledged before it began, %zu when it "
      "ended, %zu in the restored store\n",
      before.size(), after_backup, present.size());

  // A file that is not a database is refused before anything is replaced.
  CliResult junk = Cli(kBinary,
                       "admin restore --from " + WriteTestFile(dir.File("junk"), "not sqlite") +
                           " --data " + dir.File("other"),
                       "", "");
  EXPECT_NE(junk.code, 0);
  EXPECT_NE(junk.output.find("not a whole meridian backup"), std::string::npos) << junk.output;
}

}  // namespace
}  // namespace meridian::testing
