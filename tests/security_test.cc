// The attacks of issue 13 that the API and the server's start-up must stop, each tried against a
// real `meridian server` process on loopback with a temporary data dir, and asserted to fail.
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/testing/raw_connection.h"
#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

// A 16-GPU estate: two nodes of 8 H100. The organization is given all 16 GPUs; each team half.
const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
---
kind: Project
metadata: {name: language}
spec: {team: product}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 2, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
---
kind: Quota
metadata: {name: acme}
spec: {organization: acme, guaranteedGpus: 16, limitGpus: 16}
---
kind: Quota
metadata: {name: product}
spec: {team: product, guaranteedGpus: 8, limitGpus: 16}
---
kind: Quota
metadata: {name: lab}
spec: {team: lab, guaranteedGpus: 8, limitGpus: 16}
---
kind: Quota
metadata: {name: vision}
spec: {project: vision, guaranteedGpus: 4, limitGpus: 8}
)";

// The same tree on one 8-GPU node, without quotas: a preemption across projects.
const char* kSmallEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 1, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
)";

// A GET with the Authorization header exactly as given.
HttpResult GetWithAuthorization(const ServerProcess& s, const std::string& path,
                                const std::string& authorization) {
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get(path, httplib::Headers{{"Authorization", authorization}});
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.text = r->body;
  out.body = Json::parse(r->body, nullptr, false);
  return out;
}

class SecurityTest : public ::testing::Test {
 protected:
  void Start(const std::string& name, const char* estate = kEstate,
             std::vector<std::string> flags = {}) {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File(name), std::move(flags));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File(name + ".log"));
    admin_ = server_->admin_token();
    ASSERT_FALSE(admin_.empty());
    if (estate) {
      const std::string path = WriteTestFile(dir_.File(name + "-estate.yaml"), estate);
      CliResult r = Cli(kBinary, "apply -f " + path, server_->url(), admin_);
      ASSERT_EQ(r.code, 0) << r.output;
    }
  }
  HttpResult Do(const std::string& method, const std::string& path, const std::string& token,
                const Json& body = nullptr) {
    return Http(*server_, method, path, token, body.is_null() ? "" : body.dump());
  }
  std::string User(const std::string& name, const Json& role) {
    Json body = {{"spec", {{"roles", Json::array({role})}}}};
    EXPECT_EQ(Do("PUT", "/api/v1/users/" + name, admin_, body).status, 201);
    HttpResult t = Do("POST", "/api/v1/tokens", admin_, {{"user", name}});
    EXPECT_EQ(t.status, 201) << t.text;
    return t.body.value("token", "");
  }
  static Json Quota(const std::string& name, const Json& spec) {
    return {{"kind", "Quota"}, {"metadata", {{"name", name}}}, {"spec", spec}};
  }
  Json Stored(const std::string& plural, const std::string& name) {
    return Do("GET", "/api/v1/" + plural + "/" + name, admin_).body;
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
};

// Row 1 and row 8 of the issue's table: a team lead overwrote and deleted the quotas of another
// team and of the organization, and set its own team's guarantee to 100,000 GPUs on 16 GPUs.
TEST_F(SecurityTest, ATeamLeadWritesOnlyWithinItsTeamAndWithinItsTeamsQuota) {
  Start("data");
  const std::string lena = User("lena", {{"role", "team-lead"}, {"team", "product"}});
  const Json lab_before = Stored("quotas", "lab"), acme_before = Stored("quotas", "acme");
  // The attack as reported: the body names lena's own team, the stored quota is lab's.
  HttpResult overwrite = Do("PUT", "/api/v1/quotas/lab", lena,
                            Quota("lab", {{"team", "product"}, {"guaranteedGpus", 1}}));
  EXPECT_EQ(overwrite.status, 404) << overwrite.text;  // lab's quota is not lena's to see
  EXPECT_EQ(Do("DELETE", "/api/v1/quotas/lab", lena).status, 404);
  HttpResult org = Do("PUT", "/api/v1/quotas/acme", lena,
                      Quota("acme", {{"team", "product"}, {"guaranteedGpus", 16}}));
  EXPECT_EQ(org.status, 403) << org.text;
  EXPECT_EQ(org.body["error"]["message"],
            "lena may not change Quota \"acme\": it lies outside the scopes lena manages");
  EXPECT_EQ(Do("DELETE", "/api/v1/quotas/acme", lena).status, 403);
  // Its own team's quota is handed to it from above: not lena's to raise.
  HttpResult raise = Do("PUT", "/api/v1/quotas/product", lena,
                        Quota("product", {{"team", "product"}, {"guaranteedGpus", 100000}}));
  EXPECT_EQ(raise.status, 403) << raise.text;
  // A quota for another team's project, or a project moved out of or into its team.
  EXPECT_EQ(Do("PUT", "/api/v1/quotas/mine", lena,
               Quota("mine", {{"project", "research"}, {"guaranteedGpus", 1}}))
                .status,
            403);
  HttpResult take = Do(
      "PUT", "/api/v1/projects/research", lena,
      {{"kind", "Project"}, {"metadata", {{"name", "research"}}}, {"spec", {{"team", "product"}}}});
  EXPECT_EQ(take.status, 404) << take.text;
  HttpResult give =
      Do("PUT", "/api/v1/projects/vision", lena,
         {{"kind", "Project"}, {"metadata", {{"name", "vision"}}}, {"spec", {{"team", "lab"}}}});
  EXPECT_EQ(give.status, 403) << give.text;
  EXPECT_EQ(Stored("quotas", "lab"), lab_before);
  EXPECT_EQ(Stored("quotas", "acme"), acme_before);
  EXPECT_EQ(Stored("projects", "research")["spec"]["team"], "lab");
  EXPECT_EQ(Stored("projects", "vision")["spec"]["team"], "product");

  // What lena does manage: the projects of product, within product's 8 guaranteed, 16 limit.
  HttpResult weight = Do("PUT", "/api/v1/projects/vision", lena,
                         {{"kind", "Project"},
                          {"metadata", {{"name", "vision"}}},
                          {"spec", {{"team", "product"}, {"weight", 3}}}});
  EXPECT_EQ(weight.status, 200) << weight.text;
  EXPECT_EQ(Do("PUT", "/api/v1/quotas/vision", lena,
               Quota("vision", {{"project", "vision"}, {"guaranteedGpus", 6}, {"limitGpus", 16}}))
                .status,
            200);
  HttpResult beyond = Do("PUT", "/api/v1/quotas/language", lena,
                         Quota("language", {{"project", "language"}, {"guaranteedGpus", 4}}));
  EXPECT_EQ(beyond.status, 400) << beyond.text;
  EXPECT_NE(beyond.text.find("the guarantees within team product would sum to 10 GPUs"),
            std::string::npos)
      << beyond.text;
  HttpResult over_limit =
      Do("PUT", "/api/v1/quotas/vision", lena,
         Quota("vision", {{"project", "vision"}, {"guaranteedGpus", 6}, {"limitGpus", 100}}));
  EXPECT_EQ(over_limit.status, 400) << over_limit.text;
  EXPECT_NE(over_limit.text.find("exceeds the limit of team product (16 GPUs"), std::string::npos)
      << over_limit.text;
  EXPECT_EQ(Stored("quotas", "vision")["spec"]["guaranteedGpus"], 6);
  EXPECT_EQ(Do("DELETE", "/api/v1/quotas/vision", lena).status, 200);
  // Admins too are held to the parent's quota: 100,000 GPUs within an organization given 16.
  HttpResult admin = Do("PUT", "/api/v1/quotas/product", admin_,
                        Quota("product", {{"team", "product"}, {"guaranteedGpus", 100000}}));
  EXPECT_EQ(admin.status, 400) << admin.text;
  EXPECT_NE(admin.text.find("beyond its own guarantee of 16 GPUs"), std::string::npos)
      << admin.text;

  // The table's "a team lead rewrote the admin user's description".
  const Json admin_user = {{"spec", {{"description", "pwned"}, {"roles", Json::array()}}}};
  EXPECT_EQ(Do("PUT", "/api/v1/users/admin", lena, admin_user).status, 200);
  const Json users = Do("GET", "/api/v1/users", admin_).body;
  for (const Json& u : users["items"]) {
    if (u["metadata"]["name"] != "admin") continue;
    EXPECT_EQ(u["spec"]["description"], "created at first start") << u.dump();
    EXPECT_EQ(u["spec"]["roles"][0]["role"], "admin") << u.dump();
  }
}

// Item 6: /metrics names every project's queue and quota use; it needs a scraper's token.
TEST_F(SecurityTest, MetricsNeedTheMetricsRole) {
  Start("data", nullptr);
  const std::string scraper = User("prometheus", {{"role", "metrics"}});
  const std::string bob = User("bob", {{"role", "viewer"}, {"organization", "acme"}});
  EXPECT_EQ(Do("GET", "/metrics", "").status, 401);
  HttpResult member = Do("GET", "/metrics", bob);
  EXPECT_EQ(member.status, 403) << member.text;
  EXPECT_EQ(member.text.find("meridian_"), std::string::npos);
  HttpResult scraped = Do("GET", "/metrics", scraper);
  EXPECT_EQ(scraped.status, 200);
  EXPECT_NE(scraped.text.find("meridian_api_requests_total"), std::string::npos);
  EXPECT_EQ(Do("GET", "/metrics", admin_).status, 200);
  // A scraper reads metrics and nothing of the tenancy.
  EXPECT_EQ(Do("GET", "/api/v1/jobs", scraper).body["items"].size(), 0u);
  EXPECT_EQ(Do("GET", "/api/v1/audit", scraper).status, 403);
}

TEST_F(SecurityTest, DevModeLeavesMetricsOpenAndSaysSo) {
  server_ = std::make_unique<ServerProcess>(
      kBinary, dir_.File("dev"), std::vector<std::string>{"--dev", "--dev-slurm", "off"});
  // The dev estate's agents are stopped by the server's SIGTERM, not by a SIGKILL.
  struct StopGently {
    ServerProcess* s;
    ~StopGently() { s->Stop(SIGTERM); }
  } stop{server_.get()};
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("dev.log"));
  HttpResult open = Do("GET", "/metrics", "");
  EXPECT_EQ(open.status, 200);
  EXPECT_NE(open.text.find("meridian_api_requests_total"), std::string::npos);
  EXPECT_NE(ReadFile(dir_.File("dev.log")).find("dev mode: /metrics answers without a token"),
            std::string::npos)
      << ReadFile(dir_.File("dev.log"));
}

// Item 7: a member sees the projects, quotas and revisions within its scopes, and 404 for the
// rest, as for jobs.
TEST_F(SecurityTest, AMemberSeesOnlyTheTenancyWithinItsScopes) {
  Start("data");
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  auto names = [&](const std::string& plural) {
    std::set<std::string> out;
    HttpResult r = Do("GET", "/api/v1/" + plural, bob);
    EXPECT_EQ(r.status, 200) << r.text;
    for (const Json& o : r.body["items"]) {
      out.insert(o["metadata"]["name"].get<std::string>());
    }
    return out;
  };
  EXPECT_EQ(names("projects"), (std::set<std::string>{"research"}));
  EXPECT_EQ(names("teams"), (std::set<std::string>{"lab"}));
  EXPECT_EQ(names("organizations"), (std::set<std::string>{"acme"}));
  EXPECT_EQ(names("quotas"), (std::set<std::string>{"acme", "lab"}));
  for (const char* path :
       {"/api/v1/projects/vision", "/api/v1/teams/product", "/api/v1/quotas/product",
        "/api/v1/quotas/vision", "/api/v1/config/revisions/1"}) {
    HttpResult r = Do("GET", path, bob);
    EXPECT_EQ(r.status, 404) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("guaranteedGpus"), std::string::npos) << path;
  }
  EXPECT_EQ(Do("GET", "/api/v1/projects/research", bob).status, 200);
  EXPECT_EQ(Do("GET", "/api/v1/config/revisions", bob).body["items"].size(), 0u);
  EXPECT_EQ(Do("GET", "/api/v1/config/revisions/1", admin_).status, 200);
  EXPECT_EQ(Do("DELETE", "/api/v1/quotas/product", bob).status, 404);
  EXPECT_EQ(Do("DELETE", "/api/v1/quotas/lab", bob).status, 403);
}

// Item 7, the reasons: bob's job is preempted by a job of another project; what bob reads of
// his job names no other project's job id, while an admin reads it as it is.
TEST_F(SecurityTest, ReasonsShownToAMemberNameNoOtherProjectsJob) {
  Start("data", kSmallEstate);
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  auto submit = [&](const std::string& project, const std::string& token, const Json& extra) {
    Json spec = {{"gpus", 8}, {"runtimeEstimate", 3600}, {"command", {"true"}}};
    spec.update(extra);
    HttpResult r = Do("POST", "/api/v1/jobs", token,
                      {{"metadata", {{"name", "j"}, {"project", project}}}, {"spec", spec}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  };
  const int64_t mine = submit("research", bob, Json::object());
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, bob, mine) == "Placed"; }, 20));
  const int64_t theirs = submit("vision", admin_, {{"priorityClass", "high"}});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, admin_, theirs) == "Placed"; }, 20));
  const std::regex names_theirs("job " + std::to_string(theirs) + "\\b");
  // The admin's view names the preemptor: the test exercises the reason that would leak.
  const std::string admin_events =
      Do("GET", "/api/v1/jobs/" + std::to_string(mine) + "/events", admin_).text;
  ASSERT_TRUE(std::regex_search(admin_events, names_theirs)) << admin_events;
  const std::string id = std::to_string(mine);
  bool told = false;
  for (const std::string& path :
       {"/api/v1/jobs/" + id, "/api/v1/jobs/" + id + "/events",
        "/api/v1/jobs/" + id + "/explanation", std::string("/api/v1/jobs"),
        std::string("/api/v1/events?limit=1000")}) {
    HttpResult r = Do("GET", path, bob);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_FALSE(std::regex_search(r.text, names_theirs)) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("\"for\":" + std::to_string(theirs)), std::string::npos) << r.text;
    told = told || r.text.find("a higher-priority job in another project") != std::string::npos;
  }
  EXPECT_TRUE(told) << "bob is told why his job stopped";
}

// Item 8: a damaged database, an empty one beside an admin.token, and a data dir open to others
// are refused at start-up with what to do; nothing is changed on disk.
TEST_F(SecurityTest, StartUpRefusesADamagedOrEmptyDatabaseAndAnOpenDataDir) {
  Start("data");
  ASSERT_EQ(Do("POST", "/api/v1/jobs", admin_,
               {{"metadata", {{"name", "j"}, {"project", "vision"}}},
                {"spec", {{"gpus", 1}, {"command", {"true"}}}}})
                .status,
            201);
  const std::string token = server_->admin_token();
  const std::string data = dir_.File("data"), db = data + "/meridian.db";
  // A crash that leaves the WAL without its index is no damage: the check must not refuse it.
  server_->Stop(SIGKILL);
  std::filesystem::remove(db + "-shm");
  ASSERT_TRUE(server_->Start()) << ReadFile(data + ".log");
  EXPECT_EQ(Do("GET", "/api/v1/jobs", admin_).body["items"].size(), 1u);
  server_->Stop(SIGTERM);
  auto start = [&](const std::string& dir) {
    return RunToExit(kBinary, {"server", "--data-dir", dir, "--listen", "127.0.0.1:0"},
                     dir_.File("refused.log"), 30);
  };
  // Random bytes over pages 2 to 4, as the issue's test wrote them.
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  {
    ASSERT_GT(std::filesystem::file_size(db), 4u * 4096);
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    std::mt19937 random(13);
    for (int i = 0; i < 3 * 4096; ++i) f.put(static_cast<char>(random()));
  }
  CliResult damaged = start(data);
  EXPECT_EQ(damaged.code, 1) << damaged.output;
  EXPECT_NE(damaged.output.find("fails SQLite's integrity check"), std::string::npos)
      << damaged.output;
  EXPECT_NE(damaged.output.find("Restore it from a backup"), std::string::npos);
  // A 0-byte database beside the admin token is not a first start.
  std::filesystem::resize_file(db, 0);
  CliResult empty = start(data);
  EXPECT_EQ(empty.code, 1) << empty.output;
  EXPECT_NE(empty.output.find("is empty (0 bytes) but"), std::string::npos) << empty.output;
  EXPECT_EQ(ReadFile(data + "/admin.token"), token);
  EXPECT_EQ(std::filesystem::file_size(db), 0u);
  // A data dir others may read: refused, its mode left as it is.
  const std::string open = dir_.File("open");
  ASSERT_EQ(mkdir(open.c_str(), 0755), 0);
  chmod(open.c_str(), 0755);
  CliResult refused = start(open);
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("has mode 0755"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("chmod 700"), std::string::npos) << refused.output;
  struct stat st {};
  ASSERT_EQ(stat(open.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  EXPECT_FALSE(std::filesystem::exists(open + "/meridian.db"));
  // A new data dir is made 0700.
  const std::string fresh = dir_.File("fresh");
  ServerProcess first(kBinary, fresh);
  ASSERT_TRUE(first.Start()) << ReadFile(fresh + ".log");
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// Item 8: an audit entry the store refuses is logged, counted, held and written later.
TEST_F(SecurityTest, AnAuditWriteThatFailsIsHeldAndWrittenLater) {
  Start("data", nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.File("data/meridian.db").c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  auto exec = [&](const char* sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
    const std::string message = error ? error : "";
    sqlite3_free(error);
    return rc == SQLITE_OK ? std::string() : message;
  };
  // The audit table refuses every insert, as a full disk or a broken file would.
  ASSERT_EQ(exec("CREATE TRIGGER audit_down BEFORE INSERT ON audit "
                 "BEGIN SELECT RAISE(ABORT, 'the audit table is down'); END"),
            "");
  EXPECT_EQ(Do("PUT", "/api/v1/users/held", admin_, {{"spec", Json::object()}}).status, 201);
  EXPECT_NE(ReadFile(dir_.File("data.log")).find("meridian: audit: cannot write to the store"),
            std::string::npos)
      << ReadFile(dir_.File("data.log"));
  HttpResult health = Do("GET", "/healthz", "");
  EXPECT_EQ(health.body["status"], "degraded") << health.text;
  EXPECT_NE(health.text.find("audit entries could not be written"), std::string::npos);
  EXPECT_NE(Do("GET", "/metrics", admin_).text.find("meridian_audit_write_failures_total 1"),
            std::string::npos);
  ASSERT_EQ(exec("DROP TRIGGER audit_down"), "");
  sqlite3_close(db);
  EXPECT_EQ(Do("PUT", "/api/v1/users/after", admin_, {{"spec", Json::object()}}).status, 201);
  const Json audit = Do("GET", "/api/v1/audit?limit=1000", admin_).body;
  std::set<std::string> paths;
  for (const Json& a : audit["items"]) paths.insert(a["path"].get<std::string>());
  EXPECT_TRUE(paths.count("/api/v1/users/held")) << audit.dump();
  EXPECT_TRUE(paths.count("/api/v1/users/after")) << audit.dump();
  EXPECT_EQ(Do("GET", "/healthz", "").body["status"], "ok");
}

// Item 9: duplicate keys, overflowing ids, the bearer scheme's case, and tokens that do not work
// answering alike; failed authentications in the audit log a row per address and minute.
TEST_F(SecurityTest, InputIsDecodedStrictlyAndBadTokensAnswerAlike) {
  Start("data");
  const std::string twice =
      R"({"metadata": {"name": "j", "project": "research", "project": "vision"},
          "spec": {"gpus": 1}})";
  HttpResult dup = Http(*server_, "POST", "/api/v1/jobs", admin_, twice);
  EXPECT_EQ(dup.status, 400) << dup.text;
  EXPECT_NE(dup.text.find("metadata.project: the key appears twice"), std::string::npos)
      << dup.text;
  EXPECT_EQ(Do("GET", "/api/v1/jobs", admin_).body["items"].size(), 0u);
  for (const char* path :
       {"/api/v1/jobs/99999999999999999999", "/api/v1/jobs/99999999999999999999/events",
        "/api/v1/jobs/99999999999999999999/explanation", "/api/v1/jobs/99999999999999999999/logs",
        "/api/v1/config/revisions/99999999999999999999"}) {
    HttpResult r = Do("GET", path, admin_);
    EXPECT_EQ(r.status, 404) << path << ": " << r.text;
    EXPECT_EQ(r.text.find("stoll"), std::string::npos) << r.text;
  }
  EXPECT_EQ(Do("POST", "/api/v1/jobs/99999999999999999999/cancel", admin_).status, 404);
  // The scheme is case-insensitive.
  for (const std::string scheme : {"bearer ", "BEARER ", "Bearer  "}) {
    EXPECT_EQ(GetWithAuthorization(*server_, "/api/v1/whoami", scheme + admin_).status, 200)
        << scheme;
  }
  // Revoked, expired, unknown, and a real id with a wrong secret: one answer.
  const std::string revoked = User("rita", {{"role", "member"}, {"project", "research"}});
  const std::string revoked_id = revoked.substr(4, 16);
  ASSERT_EQ(Do("DELETE", "/api/v1/tokens/" + revoked_id, admin_).status, 200);
  HttpResult created = Do("POST", "/api/v1/tokens", admin_, {{"user", "rita"}, {"expiresIn", 0.5}});
  const std::string expired = created.body.value("token", "");
  ASSERT_TRUE(Eventually([&] { return Do("GET", "/api/v1/whoami", expired).status == 401; }));
  const std::string unknown = "mrd_0123456789abcdef_" + std::string(48, 'a');
  const std::string forged = "mrd_" + revoked_id + "_" + std::string(48, 'b');
  const HttpResult first = Do("GET", "/api/v1/whoami", revoked);
  EXPECT_EQ(first.status, 401);
  for (const std::string& t : {expired, unknown, forged}) {
    HttpResult r = Do("GET", "/api/v1/whoami", t);
    EXPECT_EQ(r.status, first.status) << t;
    EXPECT_EQ(r.text, first.text) << t;
  }
  // 40 more failures from this address: a row or two (a minute may turn), not 40.
  for (int i = 0; i < 40; ++i) Do("GET", "/api/v1/jobs", unknown);
  const Json denied = Do("GET", "/api/v1/audit?result=denied&limit=1000", admin_).body;
  int64_t rows = 0, counted = 0;
  for (const Json& a : denied["items"]) {
    if (a["action"] != "auth.failed") continue;
    ++rows;
    const std::string message = a["message"];
    counted += std::stoll(message);
    EXPECT_NE(message.find("failed authentications from 127.0.0.1"), std::string::npos) << message;
  }
  EXPECT_LE(rows, 2) << denied.dump();
  EXPECT_EQ(counted, 45) << denied.dump();
}

// Two projects of different teams on one node whose only agent runs with its default settings.
const char* kOneNodeEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Team
metadata: {name: lab}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
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
metadata: {name: gpu}
spec: {cluster: onprem, gpusPerNode: 4, gpuModel: H100-80GB}
)";

struct FileFacts {
  bool exists = false;
  uint32_t uid = 0, gid = 0, mode = 0;
};
FileFacts Facts(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  return {true, st.st_uid, st.st_gid, static_cast<uint32_t>(st.st_mode & 07777)};
}

// The uids that own a live process now (a zombie waits only to be reaped).
std::set<uint32_t> ProcessUids() {
  std::set<uint32_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream status(e.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) break;
      if (line.rfind("Uid:", 0) == 0) out.insert(std::stoul(line.substr(4)));
    }
  }
  return out;
}

// Whether a process runs (a zombie has ended; it waits only to be reaped).
bool Lives(int pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// "uid=U gid=G groups=..." as a task printed it: U, or -1.
int64_t PrintedUid(const std::string& output, std::string* line) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("uid=(\\d+) gid=(\\d+) groups=([0-9 ]+)"))) {
    return -1;
  }
  *line = m[0];
  return std::stoll(m[1]);
}

// Row 4 of the issue's table: a task read the spec.json (with env) of a co-located task of
// another tenant, and a job printed that tenant's secret. Two jobs of different projects on one
// node, one holding a secret in its env; the other tries every way to it that the issue and an
// attacker would think of. Each attempt must be denied, and the secret must appear nowhere in its
// output. Needs root, as CI and production agents run: only root can switch uids.
TEST_F(SecurityTest, ATaskCannotReadOrSignalAnotherTenantsTask) {
  ASSERT_EQ(::geteuid(), 0u)
      << "this test runs the agent as root (as CI and production do): only root can run tasks "
         "under uids of their own, which is what it checks";
  Start("data", kOneNodeEstate);
  const std::string agents = User("agents", {{"role", "agent"}});
  const std::string alice = User("alice", {{"role", "member"}, {"project", "vision"}});
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  const std::vector<std::string> node = {"--cluster", "onprem", "--pool",          "gpu",
                                         "--node",    "n1",     "--simulate-gpus", "4xH100-80GB"};

  // Tasks must pass through the folders above the work dir: an agent refuses one they cannot.
  std::vector<std::string> closed = {
      "--config", "/nonexistent/config.json", "--server", server_->url(), "--token", agents,
      "agent"};
  closed.insert(closed.end(), node.begin(), node.end());
  closed.insert(closed.end(), {"--work-dir", dir_.File("closed/agent")});
  CliResult refused = RunToExit(kBinary, closed, dir_.File("closed.log"), 30);
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("but " + dir_.path() +
                                " has mode 0700: let others through it "
                                "(chmod o+x " +
                                dir_.path() + ")"),
            std::string::npos)
      << refused.output;

  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  const std::string work = dir_.File("agent-n1");
  std::vector<std::string> args = node;
  args.insert(args.end(), {"--work-dir", work});
  AgentProcess agent(kBinary, args, dir_.File("agent-n1.log"));
  agent.Start(server_->url(), agents);
  ASSERT_TRUE(Eventually(
      [&] {
        return ReadFile(dir_.File("agent-n1.log")).find("registered in cluster") !=
               std::string::npos;
      },
      20))
      << ReadFile(dir_.File("agent-n1.log"));
  EXPECT_NE(ReadFile(dir_.File("agent-n1.log"))
                .find("meridian agent: task isolation on: each job's tasks run as a uid of their "
                      "own from 200000-265535 (its gid the same, no supplementary groups)"),
            std::string::npos)
      << ReadFile(dir_.File("agent-n1.log"));

  auto submit = [&](const std::string& token, const std::string& project, const Json& spec) {
    HttpResult r = Do("POST", "/api/v1/jobs", token,
                      {{"metadata", {{"name", project}, {"project", project}}}, {"spec", spec}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  };
  auto logs = [&](const std::string& token, int64_t id) {
    return Do("GET", "/api/v1/jobs/" + std::to_string(id) + "/logs", token).text;
  };
  // The victim: its secret in its env, its output, its home; a daemon that leaves its process
  // group, and a file in /tmp, both to be gone once the job is.
  const std::string secret = "API_KEY-" + std::to_string(::getpid()) + "-s3cr3t";
  const int64_t victim = submit(
      alice, "vision",
      {{"gpus", 1},
       {"gracePeriod", 2},
       {"env", {{"API_KEY", secret}}},
       {"command",
        {"sh", "-c",
         "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G)\"; echo $$ > $HOME/pid; "
         "echo \"$API_KEY\" > $HOME/secret; echo \"key $API_KEY\"; "
         "setsid sleep 600 < /dev/null > /dev/null 2>&1 & echo $! > $HOME/daemon; "
         "echo left > /tmp/meridian-left-by-$MERIDIAN_JOB_ID; echo victim-ready; sleep 600"}}});
  const std::string tasks = work + "/tasks";
  const std::string vdir = tasks + "/" + std::to_string(victim) + "-0-g1";
  ASSERT_TRUE(
      Eventually([&] { return logs(alice, victim).find("victim-ready") != std::string::npos; }, 30))
      << ReadFile(dir_.File("agent-n1.log"));
  const std::string victim_output = logs(alice, victim);
  std::string victim_ids;
  const int64_t victim_uid = PrintedUid(victim_output, &victim_ids);
  const std::string vpid = ReadFile(vdir + "/work/pid"), shim = ReadFile(vdir + "/shim.pid");
  const int daemon = std::atoi(ReadFile(vdir + "/work/daemon").c_str());
  ASSERT_FALSE(vpid.empty());
  ASSERT_GT(daemon, 0);

  // What the folder looks like to root: the task's group alone may enter; the bookkeeping with
  // its env is root's; its output and work dir are its own.
  const FileFacts folder = Facts(vdir), spec = Facts(vdir + "/spec.json"),
                  assignment = Facts(vdir + "/assignment.json"), out = Facts(vdir + "/output.log"),
                  home = Facts(vdir + "/work"), tasks_dir = Facts(tasks);
  EXPECT_EQ(tasks_dir.mode, 0711u);
  EXPECT_EQ(folder.uid, 0u);
  EXPECT_EQ(folder.gid, victim_uid);
  EXPECT_EQ(folder.mode, 0710u);
  for (const FileFacts& f : {spec, assignment}) {
    EXPECT_TRUE(f.exists);
    EXPECT_EQ(f.uid, 0u);
    EXPECT_EQ(f.mode, 0600u);
  }
  EXPECT_EQ(out.uid, victim_uid);
  EXPECT_EQ(out.mode, 0600u);
  EXPECT_EQ(home.uid, victim_uid);
  EXPECT_EQ(home.mode, 0700u);
  EXPECT_NE(ReadFile(vdir + "/spec.json").find(secret), std::string::npos)
      << "the attack is on the file that holds the secret";

  // The attacker, in another project: each attempt says denied or ALLOWED, with what it read.
  const std::string attack = R"SH(
try() { name=$1; shift; if out=$("$@" 2>&1); then echo "ATTEMPT $name: ALLOWED: $out"; else echo "ATTEMPT $name: denied: $out"; fi; }
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
try spec.json cat $V/spec.json
try assignment.json cat $V/assignment.json
try the-folder ls $V
try output.log cat $V/output.log
try its-home cat $V/work/secret
try the-task-list ls $TASKS
try environ cat /proc/$VPID/environ
try its-cwd ls /proc/$VPID/cwd/
try its-stdout cat /proc/$VPID/fd/1
try shim-environ cat /proc/$SHIM/environ
try node-credential cat $WORK/credential
try probe kill -0 $VPID
try SIGTERM kill -TERM $VPID
try SIGKILL-daemon kill -KILL $DAEMON
try SIGKILL-shim kill -KILL $SHIM
echo attack-done
)SH";
  const int64_t attacker = submit(bob, "research",
                                  {{"env",
                                    {{"V", vdir},
                                     {"TASKS", tasks},
                                     {"WORK", work},
                                     {"VPID", vpid},
                                     {"SHIM", shim},
                                     {"DAEMON", std::to_string(daemon)}}},
                                   {"command", {"sh", "-c", attack}}});
  ASSERT_TRUE(Eventually([&] { return JobPhase(*server_, bob, attacker) == "Succeeded"; }, 30))
      << GetJob(*server_, bob, attacker).dump();
  std::string attack_output;
  ASSERT_TRUE(Eventually([&] {
    attack_output = logs(bob, attacker);
    return attack_output.find("attack-done") != std::string::npos;
  }));
  const std::vector<std::string> attempts = {
      "spec.json",       "assignment.json", "the-folder", "output.log",     "its-home",
      "the-task-list",   "environ",         "its-cwd",    "its-stdout",     "shim-environ",
      "node-credential", "probe",           "SIGTERM",    "SIGKILL-daemon", "SIGKILL-shim"};
  for (const std::string& a : attempts) {
    EXPECT_NE(attack_output.find("ATTEMPT " + a + ": denied"), std::string::npos) << a << "\n"
                                                                                  << attack_output;
  }
  EXPECT_EQ(attack_output.find("ALLOWED"), std::string::npos) << attack_output;
  EXPECT_EQ(attack_output.find(secret), std::string::npos) << attack_output;
  EXPECT_EQ(attack_output.find("API_KEY"), std::string::npos) << attack_output;
  std::cout << "victim: " << victim_ids << "\n" << attack_output << "\n";

  // Two uids of the range, neither root, each with its own gid and no other group.
  std::string attacker_ids;
  const int64_t attacker_uid = PrintedUid(attack_output, &attacker_ids);
  for (const auto& [uid, ids] : {std::pair{victim_uid, victim_ids}, {attacker_uid, attacker_ids}}) {
    EXPECT_GE(uid, 200000) << ids;
    EXPECT_LE(uid, 265535) << ids;
    EXPECT_EQ(ids, "uid=" + std::to_string(uid) + " gid=" + std::to_string(uid) +
                       " groups=" + std::to_string(uid))
        << ids;
  }
  EXPECT_NE(victim_uid, attacker_uid);
  EXPECT_NE(victim_output.find("key " + secret), std::string::npos) << "its own output is its own";

  // The victim ran on, untouched.
  EXPECT_EQ(JobPhase(*server_, alice, victim), "Running");
  EXPECT_TRUE(Lives(std::stoi(vpid)));
  EXPECT_TRUE(Lives(daemon));

  // Once the victim's job is gone: its folder, its daemon and its file in /tmp are too, and no
  // process of its uid is left for the next job that gets the uid.
  ASSERT_EQ(Do("POST", "/api/v1/jobs/" + std::to_string(victim) + "/cancel", alice).status, 200);
  EXPECT_TRUE(Eventually([&] { return !Facts(vdir).exists; }, 60))
      << ReadFile(dir_.File("agent-n1.log"));
  EXPECT_TRUE(Eventually([&] { return !ProcessUids().count(victim_uid); }, 10));
  EXPECT_FALSE(Lives(daemon)) << "the daemon it left lives on";
  EXPECT_FALSE(Facts("/tmp/meridian-left-by-" + std::to_string(victim)).exists);
}

// An agent that is not root cannot switch uids: it says so in one line and runs its tasks as
// itself, in folders of 0700; asked for a range explicitly, it refuses to start. Run as uid
// 65534 (nobody), which needs the test to be root.
TEST_F(SecurityTest, AnAgentThatIsNotRootSaysTaskIsolationIsOffOrRefusesWhenAskedFor) {
  ASSERT_EQ(::geteuid(), 0u) << "this test starts an agent as uid 65534, which needs root";
  Start("data", kOneNodeEstate);
  const std::string agents = User("agents", {{"role", "agent"}});
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  const std::string work = dir_.File("nobody");
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(::chown(work.c_str(), 65534, 65534), 0);
  // `meridian ... agent EXTRA` as uid 65534, its output in `log`; returns its pid.
  auto start = [&](const std::vector<std::string>& extra, const std::string& log) {
    std::vector<std::string> args = {kBinary,       "--config",     "/nonexistent/config.json",
                                     "--server",    server_->url(), "--token",
                                     agents,        "agent",        "--cluster",
                                     "onprem",      "--pool",       "gpu",
                                     "--node",      "lowly",        "--simulate-gpus",
                                     "1xH100-80GB", "--work-dir",   work};
    args.insert(args.end(), extra.begin(), extra.end());
    ChildSpec spec;
    spec.argv = args;
    spec.log = log;
    spec.truncate = true;
    spec.uid = 65534;
    return SpawnChild(std::move(spec));
  };
  const std::string refused_log = dir_.File("refused.log");
  const pid_t refused = start({"--task-uids", "200000-265535"}, refused_log);
  int status = 0;
  ASSERT_TRUE(Eventually([&] { return waitpid(refused, &status, WNOHANG) == refused; }, 30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << ReadFile(refused_log);
  EXPECT_NE(ReadFile(refused_log)
                .find("--task-uids 200000-265535: the agent runs as uid 65534, not root, and "
                      "cannot switch uids"),
            std::string::npos)
      << ReadFile(refused_log);

  const std::string log = dir_.File("lowly.log");
  const pid_t agent = start({}, log);
  struct Stop {
    pid_t pid;
    ~Stop() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } stop{agent};
  ASSERT_TRUE(Eventually(
      [&] { return ReadFile(log).find("registered in cluster") != std::string::npos; }, 20))
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("meridian agent: task isolation is off: the agent runs as uid "
                               "65534, not root, so it cannot switch uids and every task runs as "
                               "uid 65534 (task folders are 0700)"),
            std::string::npos)
      << ReadFile(log);
  HttpResult r = Do(
      "POST", "/api/v1/jobs", admin_,
      {{"metadata", {{"name", "j"}, {"project", "research"}}},
       {"spec", {{"gpus", 1}, {"gracePeriod", 1}, {"command", {"sh", "-c", "id -u; sleep 30"}}}}});
  ASSERT_EQ(r.status, 201) << r.text;
  const std::string id = std::to_string(r.body.value("id", int64_t{0}));
  const std::string folder = work + "/tasks/" + id + "-0-g1";
  ASSERT_TRUE(Eventually(
      [&] { return ReadFile(folder + "/output.log").find("65534") != std::string::npos; }, 30))
      << ReadFile(log);
  for (const std::string& f : {work + "/tasks", folder, folder + "/work"}) {
    EXPECT_EQ(Facts(f).mode, 0700u) << f;
  }
  for (const char* f : {"/spec.json", "/assignment.json", "/output.log"}) {
    EXPECT_EQ(Facts(folder + f).mode, 0600u) << f;
  }
  EXPECT_EQ(Do("POST", "/api/v1/jobs/" + id + "/cancel", admin_).status, 200);
}

}  // namespace
}  // namespace meridian::testing

namespace meridian::testing {
namespace {

// The status and Retry-After of a request on a kept-alive connection (many of them, quickly).
struct Answer {
  int status = 0;
  std::string retry_after;
  std::string code;
};
Answer Send(httplib::Client& c, const std::string& method, const std::string& path,
            const std::string& token, const std::string& body = "") {
  httplib::Headers h = {{"Authorization", "Bearer " + token}};
  httplib::Result r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body, "application/json");
  Answer a;
  if (!r) return a;
  a.status = r->status;
  a.retry_after = r->get_header_value("Retry-After");
  const Json j = Json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("error")) a.code = j["error"].value("code", "");
  return a;
}

double ResidentMib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

// Item 5: one tenant's token writing as fast as it can is held to the default rate (a burst of
// 500, then 50 a second) with 429 and Retry-After; its reads, and another tenant's writes, go
// on; the refusals are one audit row a minute, not one each.
TEST_F(SecurityTest, ATokenFloodingWritesIsHeldToItsRateAndOthersAreNot) {
  Start("data");
  const std::string mia = User("mia", {{"role", "member"}, {"project", "vision"}});
  const std::string rob = User("rob", {{"role", "member"}, {"project", "research"}});
  httplib::Client c("127.0.0.1", server_->port());
  c.set_keep_alive(true);
  // Cancels of a job that does not exist: writes that change nothing, as fast as they go.
  const auto t0 = std::chrono::steady_clock::now();
  int allowed = 0, limited = 0;
  Answer first_refusal;
  for (int i = 0; i < 1500; ++i) {
    const Answer a = Send(c, "POST", "/api/v1/jobs/999999/cancel", mia);
    if (a.status == 429) {
      if (limited++ == 0) first_refusal = a;
    } else {
      EXPECT_EQ(a.status, 404) << i;
      ++allowed;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1500 writes in %.2f s with one token: %d allowed, %d answered 429\n", seconds,
              allowed, limited);
  EXPECT_LE(allowed, 500 + static_cast<int>(50 * seconds) + 1);
  EXPECT_GE(allowed, 500);
  ASSERT_GT(limited, 0);
  EXPECT_EQ(first_refusal.code, "rate_limited");
  EXPECT_EQ(first_refusal.retry_after, "1");
  // Reads are not writes, and rob's token has its own bucket.
  EXPECT_EQ(Send(c, "GET", "/api/v1/jobs", mia).status, 200);
  HttpResult submitted = Do("POST", "/api/v1/jobs", rob,
                            {{"metadata", {{"name", "x"}, {"project", "research"}}},
                             {"spec", {{"gpus", 1}, {"command", {"true"}}}}});
  EXPECT_EQ(submitted.status, 201) << submitted.text;
  // The refusals are audited once in their minute (twice if the flood crossed one), not 1,000
  // times; the allowed writes each have their row.
  const Json audit = Do("GET", "/api/v1/audit?limit=1000&user=mia", admin_).body;
  int rows_429 = 0;
  for (const Json& a : audit["items"]) rows_429 += a.value("code", 0) == 429;
  EXPECT_GE(rows_429, 1) << audit.dump();
  EXPECT_LE(rows_429, 2) << audit.dump();
  EXPECT_NE(
      Do("GET", "/metrics", admin_).text.find("meridian_api_rate_limited_total{limit=\"writes\"}"),
      std::string::npos);
}

// Item 5: an address guessing tokens is held off after 60 failures a minute (429, before its
// tokens are looked up), and counted in one audit row; a good token from it works again within
// a second or two, as the bucket refills.
TEST_F(SecurityTest, AnAddressGuessingTokensIsHeldOff) {
  Start("data", nullptr);
  httplib::Client c("127.0.0.1", server_->port());
  c.set_keep_alive(true);
  int unauthorized = 0, limited = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string guess = "mrd_0000000000000000_" + std::to_string(1000000 + i);
    const Answer a = Send(c, "GET", "/api/v1/jobs", guess);
    if (a.status == 401) ++unauthorized;
    if (a.status == 429) {
      ++limited;
      EXPECT_EQ(a.code, "rate_limited");
      EXPECT_FALSE(a.retry_after.empty());
    }
  }
  std::printf("200 guesses from one address: %d answered 401, %d held off with 429\n", unauthorized,
              limited);
  EXPECT_GE(unauthorized, 60);
  EXPECT_LE(unauthorized, 65);  // 60 at once, then one a second
  EXPECT_EQ(unauthorized + limited, 200);
  ASSERT_TRUE(
      Eventually([&] { return Send(c, "GET", "/api/v1/whoami", admin_).status == 200; }, 5));
  const Json audit = Do("GET", "/api/v1/audit?limit=1000", admin_).body;
  int rows = 0;
  for (const Json& a : audit["items"]) {
    if (a.value("action", "") != "auth.failed") continue;
    ++rows;
    EXPECT_NE(a.value("message", "").find("from 127.0.0.1"), std::string::npos) << a.dump();
  }
  EXPECT_GE(rows, 1) << audit.dump();
  EXPECT_LE(rows, 2) << audit.dump();
}

// Item 5 and the table's row of 40 specs of 60,000 variables and 4 listings (the server went
// from 199 MB to 1.52 GB): specs are capped (1,024 variables, 128 KiB), and one listing answers
// at most about 8 MiB, continuing where it stopped. 80 jobs of ~128 KiB are listed in pages,
// each job once.
TEST_F(SecurityTest, AListingOfLargeSpecsIsBoundedInBytesAndContinues) {
  Start("data");
  std::string value(110, 'x');
  Json env = Json::object();
  for (int i = 0; i < 1000; ++i) env["V" + std::to_string(i)] = value;
  const std::string body = Json{{"metadata", {{"name", "big"}, {"project", "vision"}}},
                                {"spec", {{"gpus", 1}, {"command", {"true"}}, {"env", env}}}}
                               .dump();
  httplib::Client c("127.0.0.1", server_->port());
  c.set_keep_alive(true);
  for (int i = 0; i < 80; ++i) {
    ASSERT_EQ(Send(c, "POST", "/api/v1/jobs", admin_, body).status, 201) << i;
  }
  const double before = ResidentMib(server_->pid());
  std::set<int64_t> seen;
  size_t pages = 0, largest = 0;
  for (const char* order : {"oldest", "newest"}) {
    seen.clear();
    pages = 0;
    std::string next;
    do {
      HttpResult page = Do("GET",
                           std::string("/api/v1/jobs?limit=1000&order=") + order +
                               (next.empty() ? "" : "&continue=" + next),
                           admin_);
      ASSERT_EQ(page.status, 200) << page.text.substr(0, 300);
      largest = std::max(largest, page.text.size());
      EXPECT_LT(page.text.size(), (8u << 20) + (256u << 10));
      for (const Json& j : page.body["items"]) {
        EXPECT_TRUE(seen.insert(j["id"].get<int64_t>()).second) << "listed twice: " << j["id"];
      }
      next = page.body["continue"].is_null() ? "" : page.body["continue"].dump();
      ++pages;
    } while (!next.empty() && pages < 10);
    EXPECT_EQ(seen.size(), 80u) << order;
    EXPECT_GE(pages, 2u) << order;
  }
  std::printf(
      "80 jobs of %zu bytes: %zu pages each way, the largest answer %.1f MiB; server RSS "
      "%.0f MiB before the listings, %.0f MiB after\n",
      body.size(), pages, static_cast<double>(largest) / (1 << 20), before,
      ResidentMib(server_->pid()));
}

// Heartbeats the server answered in all, and within `bound` seconds (its latency histogram).
std::pair<double, double> Heartbeats(const std::string& metrics, const std::string& bound) {
  double within = 0, all = 0;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("meridian_api_request_duration_seconds_bucket{", 0) != 0 ||
        line.find("route=\"agents.heartbeat\"") == std::string::npos) {
      continue;
    }
    const double n = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.find("le=\"" + bound + "\"") != std::string::npos) within += n;
    if (line.find("le=\"+Inf\"") != std::string::npos) all += n;
  }
  return {within, all};
}

// Milliseconds of a /healthz on a new connection (-1 when it got no answer).
double HealthMilliseconds(const ServerProcess& s) {
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(30);
  auto r = c.Get("/healthz");
  if (!r || r->status != 200) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// A registered agent of node n1 (4 simulated GPUs) with heartbeats every 0.5 s and a node lost
// after 3 s without one: the shortest timings the Policy allows, so that a stall shows at once.
class StarvationTest : public SecurityTest {
 protected:
  void StartWithAgent() {
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    const std::string estate = std::string(kOneNodeEstate) +
                               "---\nkind: Policy\nmetadata: {name: default}\n"
                               "spec: {heartbeatInterval: 0.5, nodeLostTimeout: 3}\n";
    Start("data", estate.c_str());
    const std::string agents = User("agents", {{"role", "agent"}});
    member_ = User("member", {{"role", "member"}, {"project", "research"}});
    agent_ = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", "onprem", "--pool", "gpu", "--node", "n1",
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-n1")},
        dir_.File("agent-n1.log"));
    agent_->Start(server_->url(), agents);
    ASSERT_TRUE(Eventually([&] { return NodeState() == "Ready"; }, 20))
        << ReadFile(dir_.File("agent-n1.log"));
  }
  std::string NodeState() {
    HttpResult n = Do("GET", "/api/v1/nodes/n1", admin_);
    return n.body.is_object() ? n.body.value("state", "") : "";
  }
  // Samples /healthz every 100 ms and the node's state every second until `done`.
  void Watch(const std::atomic<bool>& done, std::vector<double>* health,
             std::set<std::string>* states) {
    for (int i = 0; !done; ++i) {
      health->push_back(HealthMilliseconds(*server_));
      if (i % 10 == 0) states->insert(NodeState());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::unique_ptr<AgentProcess> agent_;
  std::string member_;
};

// Item 4, row 5 of the table: 70 unauthenticated clients sending one header line every 2 s
// held all 64 server threads; /healthz timed out for 45 s and every node was lost. Now they
// hold no thread, and each is cut off at the header deadline (10 s by default).
TEST_F(StarvationTest, SlowClientsStarveNeitherHealthChecksNorHeartbeats) {
  StartWithAgent();
  const std::string metrics_before = Do("GET", "/metrics", admin_).text;
  const auto before = Heartbeats(metrics_before, "0.1");
  const double before_1s = Heartbeats(metrics_before, "1").first;
  std::atomic<bool> done{false};
  std::atomic<int> cut_off{0};
  int first_cut_off = 0;  // written by the attacker, read after it has joined
  std::thread attacker([&] {
    std::vector<std::unique_ptr<base::testing::RawConnection>> slow;
    auto open = [&] {
      auto c = std::make_unique<base::testing::RawConnection>(server_->port());
      c->Send("GET /healthz HTTP/1.1\r\nHost: meridian\r\n");
      return c;
    };
    for (int i = 0; i < 70; ++i) slow.push_back(open());
    // Whether each of the first 70 was closed by the server: the deadline must reach them all.
    std::vector<bool> first_cut(slow.size(), false);
    std::vector<bool> is_first(slow.size(), true);
    while (!done) {
      for (size_t i = 0; i < slow.size(); ++i) {
        // One closed by the server is opened again: the attack never lets up.
        if (slow[i]->PeerClosed() || !slow[i]->Send("X-Slow: 1\r\n")) {
          ++cut_off;
          if (is_first[i]) first_cut[i] = true;
          is_first[i] = false;
          slow[i] = open();
        }
      }
      for (int i = 0; i < 20 && !done; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // A close in the last round's gap is seen here, not lost to the end of the loop.
    for (size_t i = 0; i < slow.size(); ++i) {
      if (is_first[i] && slow[i]->PeerClosed()) {
        first_cut[i] = true;
        ++cut_off;
      }
    }
    first_cut_off = static_cast<int>(std::count(first_cut.begin(), first_cut.end(), true));
  });
  std::vector<double> health;
  std::set<std::string> states;
  std::thread watcher([&] { Watch(done, &health, &states); });
  std::this_thread::sleep_for(std::chrono::seconds(14));
  done = true;
  attacker.join();
  watcher.join();
  const std::string metrics_after = Do("GET", "/metrics", admin_).text;
  const auto after = Heartbeats(metrics_after, "0.1");
  const double beats = after.second - before.second;
  const double fast = after.first - before.first;
  std::printf(
      "70 slow clients for 14 s: %zu health checks, p50 %.1f ms, p99 %.1f ms, worst %.1f "
      "ms; %.0f of %.0f heartbeats answered within 100 ms; %d slow connections cut off "
      "at the header deadline; node states seen: %zu\n",
      health.size(), Percentile(health, 0.5), Percentile(health, 0.99), Percentile(health, 1.0),
      fast, beats, cut_off.load(), states.size());
  EXPECT_EQ(std::count(health.begin(), health.end(), -1.0), 0) << "a health check got no answer";
  // Figures are reported above; the bound here only says that nothing waited on the attack.
  EXPECT_LT(Percentile(health, 1.0), 1000);
  EXPECT_EQ(states, std::set<std::string>{"Ready"});
  EXPECT_GE(beats, 20);
  // The issue's target is 100 ms; under a sanitizer on a loaded machine a few may take longer,
  // but none waits on the attack (each would take seconds).
  EXPECT_GE(fast, 0.9 * beats) << "heartbeats over 100 ms";
  EXPECT_EQ(Heartbeats(metrics_after, "1").first - before_1s, beats);
  // Every slow connection was cut off once it had taken 10 s over its headers: the 14 s run
  // leaves 4 s for the server's timer and for the test to notice each close.
  EXPECT_EQ(first_cut_off, 70);
}

// Item 4, row 6: 70 long polls (/events?wait=) with a member's token blocked new connections
// for 20 s. Now each token holds at most 16 open at once (429 past that), they wait on threads
// apart from the workers, and everything else is served meanwhile.
TEST_F(StarvationTest, LongPollsAreBoundedPerTokenAndBlockNothingElse) {
  StartWithAgent();
  const auto before = Heartbeats(Do("GET", "/metrics", admin_).text, "0.1");
  std::atomic<bool> done{false};
  std::vector<double> health;
  std::set<std::string> states;
  std::thread watcher([&] { Watch(done, &health, &states); });
  std::vector<int> statuses(70, 0);
  std::vector<std::thread> polls;
  for (int i = 0; i < 70; ++i) {
    polls.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(30);
      auto r = c.Get("/api/v1/events?after=latest&wait=12",
                     httplib::Headers{{"Authorization", "Bearer " + member_}});
      statuses[i] = r ? r->status : -1;
    });
  }
  for (std::thread& t : polls) t.join();
  done = true;
  watcher.join();
  const auto after = Heartbeats(Do("GET", "/metrics", admin_).text, "0.1");
  const int waited = static_cast<int>(std::count(statuses.begin(), statuses.end(), 200));
  const int refused = static_cast<int>(std::count(statuses.begin(), statuses.end(), 429));
  std::printf(
      "70 long polls of 12 s with one token: %d waited, %d answered 429; %zu health checks "
      "meanwhile, p50 %.1f ms, p99 %.1f ms, worst %.1f ms; %.0f of %.0f heartbeats within "
      "100 ms\n",
      waited, refused, health.size(), Percentile(health, 0.5), Percentile(health, 0.99),
      Percentile(health, 1.0), after.first - before.first, after.second - before.second);
  EXPECT_EQ(waited, 16);
  EXPECT_EQ(refused, 54);
  EXPECT_EQ(std::count(health.begin(), health.end(), -1.0), 0);
  EXPECT_LT(Percentile(health, 1.0), 1000);
  EXPECT_EQ(states, std::set<std::string>{"Ready"});
  EXPECT_GE(after.first - before.first, 0.9 * (after.second - before.second));
  // Another token's long poll is not held to the first one's share.
  HttpResult mine = Do("GET", "/api/v1/events?after=latest&wait=1", admin_);
  EXPECT_EQ(mine.status, 200) << mine.text;
}

// Item 4: room for 10,000 idle keep-alive connections (agents, dashboards) while new requests
// are served in milliseconds and a node's heartbeats go on. They come from ten loopback
// addresses, within the default share of one address (2,000).
TEST_F(StarvationTest, TenThousandIdleConnectionsLeaveRoomForEveryoneElse) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_GE(files.rlim_cur, 11000u) << "the test needs 10,000 open files";
  StartWithAgent();
  const double rss_before = ResidentMib(server_->pid());
  std::vector<std::unique_ptr<base::testing::RawConnection>> idle;
  int answered = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    const std::string from = "127.0.0." + std::to_string(2 + i % 10);
    idle.push_back(std::make_unique<base::testing::RawConnection>(server_->port(), from.c_str()));
    idle.back()->Send("GET /healthz HTTP/1.1\r\nHost: meridian\r\n\r\n");
    if (idle.back()->Read(10, "\"ok\"").find("200 OK") != std::string::npos) ++answered;
  }
  const double opened_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(answered, 10000);
  std::vector<double> health;
  for (int i = 0; i < 50; ++i) {
    health.push_back(HealthMilliseconds(*server_));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string metrics = Do("GET", "/metrics", admin_).text;
  const size_t at = metrics.find("\nmeridian_http_connections ");
  ASSERT_NE(at, std::string::npos);
  const double open = std::stod(metrics.substr(at + 27));
  const double rss_after = ResidentMib(server_->pid());
  std::printf(
      "10,000 idle connections opened in %.1f s; server open connections %.0f, RSS %.0f "
      "MiB before, %.0f MiB with them; a new request meanwhile: p50 %.1f ms, worst %.1f "
      "ms\n",
      opened_s, open, rss_before, rss_after, Percentile(health, 0.5), Percentile(health, 1.0));
  EXPECT_GE(open, 10000);
  EXPECT_EQ(std::count(health.begin(), health.end(), -1.0), 0);
  EXPECT_LT(Percentile(health, 1.0), 1000);
  EXPECT_EQ(NodeState(), "Ready");
  // Idle ones are still open and may ask again.
  idle[4321]->Send("GET /healthz HTTP/1.1\r\nHost: meridian\r\n\r\n");
  EXPECT_NE(idle[4321]->Read(5, "\"ok\"").find("200 OK"), std::string::npos);
}

}  // namespace
}  // namespace meridian::testing
