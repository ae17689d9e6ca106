// A real `meridian server` on a real PostgreSQL (`--store postgresql://...`), started by the
// test: what it acknowledged survives kill -9, and a second server on the same database follows
// the first (reads served, writes redirected to it) rather than scheduling beside it.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <thread>

#include "base/testing/temp_dir.h"
#include "store/testing/postgres_server.h"
#include "tests/postgres_fixtures.h"
#include "tests/server_process.h"
#include "tests/submitting_clients.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

TEST(ServerOnPostgres, KeepsWhatItAcknowledgedAcrossKillNineAndASecondServerFollows) {
  base::testing::TempDir dir;
  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  const std::string conninfo = pg.Database("meridian", &error);
  ASSERT_NE(conninfo, "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();
  ServerProcess server(kBinary, dir.File("data"), {"--store", url});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("data.log"));
  const std::string admin = server.admin_token();
  ASSERT_FALSE(admin.empty());
  const std::string estate = dir.File("estate.yaml");
  { std::ofstream(estate) << kOneNodeEstate; }
  CliResult applied = Cli(kBinary, "apply -f " + estate + " -m first", server.url(), admin);
  ASSERT_EQ(applied.code, 0) << applied.output;
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    Json job = {{"metadata", {{"name", "j" + std::to_string(i)}, {"project", "research"}}},
                {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
    HttpResult r = Http(server, "POST", "/api/v1/jobs", admin, job.dump());
    ASSERT_EQ(r.status, 201) << r.text;
    ids.push_back(r.body["id"]);
  }
  // The state is in PostgreSQL, not in the data dir.
  struct stat st {};
  EXPECT_NE(::stat(dir.File("data/meridian.db").c_str(), &st), 0);

  // A second server on the same database follows: it serves reads of the database itself and
  // forwards everything else, once authenticated, to the leader (writes, and what only the
  // leader holds in memory), so that a client of either sees the same; agents' calls it
  // redirects (307) to the leader's advertised URL.
  ServerProcess second(kBinary, dir.File("second"), {"--store", url});
  ASSERT_TRUE(second.Start()) << ReadFile(dir.File("second.log"));
  EXPECT_NE(ReadFile(dir.File("second.log")).find("following the leader " + server.url()),
            std::string::npos)
      << ReadFile(dir.File("second.log"));
  EXPECT_EQ(GetJob(second, admin, ids[0]).value("id", int64_t{0}), ids[0]);
  Json extra = {{"metadata", {{"name", "via-follower"}, {"project", "research"}}},
                {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
  HttpResult forwarded = Http(second, "POST", "/api/v1/jobs", admin, extra.dump());
  ASSERT_EQ(forwarded.status, 201) << forwarded.text;
  const int64_t forwarded_id = forwarded.body.value("id", int64_t{0});
  EXPECT_EQ(GetJob(server, admin, forwarded_id)["metadata"].value("name", ""), "via-follower");
  ids.push_back(forwarded_id);
  // A pending job's reason is the leader's scheduler's (in its memory): the follower gives the
  // same, not the empty one its own idle controller would.
  Json big = {{"metadata", {{"name", "too-big"}, {"project", "research"}}},
              {"spec", {{"gpus", 8}, {"command", {"true"}}}}};
  HttpResult pending = Http(server, "POST", "/api/v1/jobs", admin, big.dump());
  ASSERT_EQ(pending.status, 201) << pending.text;
  const int64_t big_id = pending.body.value("id", int64_t{0});
  ids.push_back(big_id);
  std::string reason;
  ASSERT_TRUE(Eventually([&] {  // the scheduler's reason, not the submission's
    reason = GetJob(server, admin, big_id)["status"].value("reason", "");
    return !reason.empty() && reason != "submitted";
  })) << reason;
  EXPECT_EQ(GetJob(second, admin, big_id)["status"].value("reason", ""), reason);
  // A long poll of events through the follower wakes when the leader records one (the
  // follower's own event bus never would).
  HttpResult all = Http(second, "GET", "/api/v1/events?limit=1000", admin);
  ASSERT_EQ(all.status, 200) << all.text;
  int64_t latest = 0;
  for (const Json& e : all.body["items"]) latest = std::max(latest, e.value("seq", int64_t{0}));
  std::thread poke([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Http(server, "POST", "/api/v1/jobs/" + std::to_string(big_id) + "/cancel", admin);
  });
  const auto polled = std::chrono::steady_clock::now();
  HttpResult woke =
      Http(second, "GET", "/api/v1/events?wait=20&after=" + std::to_string(latest), admin);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - polled).count();
  poke.join();
  EXPECT_EQ(woke.status, 200) << woke.text;
  EXPECT_FALSE(woke.body["items"].empty()) << woke.text;
  EXPECT_LT(waited, 10) << "the long poll through the follower slept its whole wait";
  // A client's own X-Forwarded-For is not passed on: the leader's access log names the
  // follower's client as the follower saw it. The leader takes a client address only from a
  // request carrying the servers' secret.
  const std::string secret = Sql(conninfo, "SELECT peer_secret FROM leader");
  ASSERT_EQ(secret.size(), 64u);
  auto refused = [&](const ServerProcess& to, const std::string& forwarded_for,
                     const std::string& peer) {
    httplib::Client c("127.0.0.1", to.port());
    httplib::Headers h = {{"Authorization", "Bearer mrd_0000_bad"},
                          {"X-Forwarded-For", forwarded_for}};
    if (!peer.empty()) h.emplace("X-Meridian-Peer", peer);
    auto r = c.Post("/api/v1/jobs", h, extra.dump(), "application/json");
    return r ? r->status : 0;
  };
  EXPECT_EQ(refused(second, "10.9.9.1", "a-guess"), 401);  // neither header is passed on
  // The secret itself, on a request to a follower, reads as a forward that missed the leader.
  EXPECT_EQ(refused(second, "10.9.9.4", secret), 503);
  EXPECT_EQ(refused(server, "10.9.9.2", "not-the-secret"), 401);
  EXPECT_EQ(refused(server, "10.9.9.3", secret), 401);
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(dir.File("data.log")).find("client=10.9.9.3") != std::string::npos;
  })) << ReadFile(dir.File("data.log"));
  const std::string leader_log = ReadFile(dir.File("data.log"));
  EXPECT_EQ(leader_log.find("client=10.9.9.1"), std::string::npos);
  EXPECT_EQ(leader_log.find("client=10.9.9.2"), std::string::npos);
  EXPECT_EQ(leader_log.find("client=10.9.9.4"), std::string::npos);
  // The write was audited once, by the leader that made it.
  HttpResult audit = Http(second, "GET", "/api/v1/audit?limit=500", admin);
  ASSERT_EQ(audit.status, 200) << audit.text;
  int creates = 0;
  for (const Json& e : audit.body["items"]) {
    creates += e.value("action", "") == "jobs.create" && e.value("code", 0) == 201;
  }
  EXPECT_EQ(creates, 7) << audit.text;  // six to the leader, one through the follower
  // A token revoked through the follower (a write: the leader makes it) is refused by the
  // leader at once, though it had read the token before; the follower, which answers whoami
  // from the store itself and also read it before, refuses it within the 10 s its
  // CredentialCache may keep what another server changed.
  HttpResult made = Http(second, "POST", "/api/v1/tokens", admin, Json{{"user", "admin"}}.dump());
  ASSERT_EQ(made.status, 201) << made.text;
  const std::string token = made.body.value("token", "");
  ASSERT_GT(token.size(), 20u) << made.text;
  EXPECT_EQ(Http(server, "GET", "/api/v1/whoami", token).status, 200);
  EXPECT_EQ(Http(second, "GET", "/api/v1/whoami", token).status, 200);
  ASSERT_EQ(Http(second, "DELETE", "/api/v1/tokens/" + made.body.value("id", ""), admin).status,
            200);
  const auto revoked_at = std::chrono::steady_clock::now();
  EXPECT_EQ(Http(server, "GET", "/api/v1/whoami", token).status, 401);
  EXPECT_TRUE(
      Eventually([&] { return Http(second, "GET", "/api/v1/whoami", token).status == 401; }, 20));
  const double refused_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - revoked_at).count();
  EXPECT_LE(refused_after, 11.0) << "the follower accepted a revoked token for " << refused_after
                                 << " s";
  std::printf("the follower refused the revoked token %.1f s after its revocation\n",
              refused_after);
  {
    httplib::Client c("127.0.0.1", second.port());
    httplib::Headers h = {{"Authorization", "Bearer " + admin}};
    auto r = c.Post("/api/v1/agents/register", h, "{}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 307) << r->body;
    EXPECT_EQ(r->get_header_value("Location"), server.url() + "/api/v1/agents/register");
  }
  // The CLI given both addresses follows the redirect: the job is the leader's.
  CliResult via = Cli(kBinary, "submit -p research --gpus 1 --name via -- true",
                      second.url() + "," + server.url(), admin);
  EXPECT_EQ(via.code, 0) << via.output;
  int64_t via_id = 0;
  ASSERT_EQ(std::sscanf(via.output.c_str(), "job %ld submitted", &via_id), 1) << via.output;
  ids.push_back(via_id);
  // The follower goes before the leader's kill -9: what follows is of one server's restart
  // (tests/failover_test.cc is of a follower taking over).
  second.Stop(SIGKILL);

  // kill -9, and back: every job, the configuration and the admin's token are there.
  server.Stop(SIGKILL);
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("data.log"));
  for (int64_t id : ids) {
    const Json j = GetJob(server, admin, id);
    EXPECT_EQ(j.value("id", int64_t{0}), id) << j.dump();
  }
  HttpResult pools = Http(server, "GET", "/api/v1/nodepools", admin);
  EXPECT_EQ(pools.status, 200) << pools.text;
  EXPECT_EQ(pools.body["items"].size(), 1u) << pools.text;
  // The declared node takes them, one GPU each.
  EXPECT_TRUE(Eventually([&] {
    for (int64_t id : ids) {
      if (GetJob(server, admin, id)["status"].value("phase", "") == "Pending") return false;
    }
    return true;
  })) << GetJob(server, admin, ids.back()).dump();

  // A --store that is not PostgreSQL's is refused with the flag's name.
  ServerProcess wrong(kBinary, dir.File("wrong"), {"--store", "mysql://x"});
  EXPECT_FALSE(wrong.Start());
  wrong.Stop(SIGKILL);
  EXPECT_NE(ReadFile(dir.File("wrong.log")).find("--store: expected a postgresql:// URL"),
            std::string::npos)
      << ReadFile(dir.File("wrong.log"));
}

// A leader whose database session ends (PostgreSQL restarted under it, or the session cut) has
// lost its lock: it stops acting at once by starting afresh in place (the same process id and
// port, saying why). Then one server leads at the next epoch, the follower or the old leader
// started afresh (which campaigns at once), and the other sends writes on to it.
TEST(ServerOnPostgres, ALeaderThatLosesItsDatabaseSessionStartsAfreshAndOneServerLeadsAgain) {
  base::testing::TempDir dir;
  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  const std::string conninfo = pg.Database("meridian", &error);
  ASSERT_NE(conninfo, "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();
  ServerProcess leader(kBinary, dir.File("a"), {"--store", url});
  ASSERT_TRUE(leader.Start()) << ReadFile(dir.File("a.log"));
  const std::string admin = leader.admin_token();
  ServerProcess follower(kBinary, dir.File("b"), {"--store", url});
  ASSERT_TRUE(follower.Start()) << ReadFile(dir.File("b.log"));
  const pid_t leader_pid = leader.pid();

  PGconn* c = PQconnectdb(conninfo.c_str());
  PGresult* r = PQexec(c,
                       "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = "
                       "'advisory' AND granted");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
  EXPECT_EQ(std::string(PQgetvalue(r, 0, 0)), "1");
  PQclear(r);
  PQfinish(c);

  // Started afresh, it listens again on its port.
  EXPECT_TRUE(Eventually([&] {
    const std::string log = ReadFile(dir.File("a.log"));
    const std::string line = "server listening on " + leader.url();
    const size_t first = log.find(line);
    return first != std::string::npos && log.find(line, first + 1) != std::string::npos;
  })) << ReadFile(dir.File("a.log"));
  const std::string log = ReadFile(dir.File("a.log"));
  EXPECT_NE(log.find("deposed: the leader's database session was lost"), std::string::npos) << log;
  EXPECT_NE(log.find("starts afresh in place"), std::string::npos) << log;
  EXPECT_EQ(::waitpid(leader_pid, nullptr, WNOHANG), 0) << "the old leader exited: " << log;

  // One of the two leads at epoch 2; the other follows it and sends writes on to it.
  std::string leader_url;
  EXPECT_TRUE(Eventually([&] {
    const std::string row = Sql(conninfo, "SELECT epoch || ' ' || url FROM leader");
    if (row.rfind("2 ", 0) != 0) return false;
    leader_url = row.substr(2);
    return true;
  })) << ReadFile(dir.File("a.log"))
      << ReadFile(dir.File("b.log"));
  ASSERT_TRUE(leader_url == leader.url() || leader_url == follower.url()) << leader_url;
  const bool old_leads = leader_url == leader.url();
  ServerProcess& other = old_leads ? follower : leader;
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(dir.File(old_leads ? "b.log" : "a.log"))
               .find("following the leader " + leader_url) != std::string::npos;
  }));
  const std::string token = Json{{"user", "admin"}, {"description", "after"}}.dump();
  EXPECT_EQ(Http(other, "POST", "/api/v1/tokens", admin, token).status, 201);
}

// While no server can lead (another session holds the leader lock), a server follows with no
// leader to send to: it serves what the database holds, answers the rest 503 with Retry-After
// (not a redirect to nowhere, nor a hang), and takes over as soon as the lock is free.
TEST(ServerOnPostgres, WithNoLeaderAServerAnswersUnavailableUntilItCanLead) {
  base::testing::TempDir dir;
  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  const std::string conninfo = pg.Database("meridian", &error);
  ASSERT_NE(conninfo, "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();
  ServerProcess server(kBinary, dir.File("s"), {"--store", url});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("s.log"));
  const std::string admin = server.admin_token();
  { std::ofstream(dir.File("estate.yaml")) << kOneNodeEstate; }
  ASSERT_EQ(
      Cli(kBinary, "apply -f " + dir.File("estate.yaml") + " -m first", server.url(), admin).code,
      0);
  server.Stop(SIGTERM);

  PGconn* holder = PQconnectdb(conninfo.c_str());
  PGresult* held = PQexec(holder, "SELECT pg_advisory_lock(7263746902)");  // the leader lock
  ASSERT_EQ(PQresultStatus(held), PGRES_TUPLES_OK) << PQresultErrorMessage(held);
  PQclear(held);
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("s.log"));
  EXPECT_EQ(Http(server, "GET", "/api/v1/projects", admin).status, 200);
  const std::string token = Json{{"user", "admin"}, {"description", "t"}}.dump();
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(10);
  auto refused =
      c.Post("/api/v1/tokens", {{"Authorization", "Bearer " + admin}}, token, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  EXPECT_NE(refused->body.find("no leader"), std::string::npos) << refused->body;
  // A read of what only a leader holds (pending reasons) is refused the same way.
  EXPECT_EQ(Http(server, "GET", "/api/v1/jobs", admin).status, 503);

  PQfinish(holder);
  EXPECT_TRUE(Eventually([&] {
    return Http(server, "POST", "/api/v1/tokens", admin, token).status == 201;
  })) << ReadFile(dir.File("s.log"));
  EXPECT_NE(ReadFile(dir.File("s.log")).find("took over as leader"), std::string::npos);
}

// Servers that serve HTTPS forward over HTTPS: the follower trusts the leader's certificate by
// its own --tls-cert file (the servers of this estate share one certificate), and the write
// sent to the follower is answered by the leader (201, not a redirect).
TEST(ServerOnPostgres, AFollowerServingHttpsForwardsOverHttps) {
  base::testing::TempDir dir;
  const std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  ASSERT_NE(pg.Database("meridian", &error), "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();
  const std::vector<std::string> flags = {"--store", url, "--tls-cert", cert, "--tls-key", key};
  ServerProcess leader(kBinary, dir.File("a"), flags);
  ASSERT_TRUE(leader.Start()) << ReadFile(dir.File("a.log"));
  const std::string admin = leader.admin_token();
  ServerProcess follower(kBinary, dir.File("b"), flags);
  ASSERT_TRUE(follower.Start()) << ReadFile(dir.File("b.log"));
  httplib::SSLClient c("127.0.0.1", follower.port());
  c.set_ca_cert_path(cert.c_str());
  c.enable_server_certificate_verification(true);
  auto r = c.Post("/api/v1/tokens", {{"Authorization", "Bearer " + admin}},
                  Json{{"user", "admin"}, {"description", "through"}}.dump(), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 201) << r->body << ReadFile(dir.File("b.log"));
  EXPECT_NE(ReadFile(dir.File("a.log")).find("POST /api/v1/tokens 201"), std::string::npos)
      << ReadFile(dir.File("a.log"));
}

// PostgreSQL restarted under load, three times, while two clients submit through both servers
// (each submission with its Idempotency-Key, sent again to either server until one answers, as
// `meridian submit` does): the servers come back by themselves, the same processes on the same
// ports (the leader starts afresh in place, the follower reconnects), one of them leads, and
// every acknowledged job is in the store, once.
TEST(ServerOnPostgres, RestartedUnderLoadItsServersComeBackAndLoseNothingAcknowledged) {
  base::testing::TempDir dir;
  store::testing::PostgresServer pg;
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  ASSERT_NE(pg.Database("meridian", &error), "") << error;
  const std::string url = "postgresql://postgres@/meridian?host=" + pg.socket_dir();
  ServerProcess a(kBinary, dir.File("a"), {"--store", url});
  ASSERT_TRUE(a.Start()) << ReadFile(dir.File("a.log"));
  const std::string admin = a.admin_token();
  ServerProcess b(kBinary, dir.File("b"), {"--store", url});
  ASSERT_TRUE(b.Start()) << ReadFile(dir.File("b.log"));
  { std::ofstream(dir.File("estate.yaml")) << kOneNodeEstate; }
  CliResult applied =
      Cli(kBinary, "apply -f " + dir.File("estate.yaml") + " -m first", a.url(), admin);
  ASSERT_EQ(applied.code, 0) << applied.output;

  SubmittingClients clients({&a, &b}, admin, "research");
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ASSERT_EQ(pg.Restart(), "");
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  clients.Stop();
  EXPECT_EQ(clients.given_up(), 0) << "a submission found no server that took it within 60 s";
  EXPECT_GT(clients.retries(), 0) << "no submission met the restarts";

  // The same two processes, each alive: one leads, the other redirects to it.
  EXPECT_EQ(::waitpid(a.pid(), nullptr, WNOHANG), 0) << ReadFile(dir.File("a.log"));
  EXPECT_EQ(::waitpid(b.pid(), nullptr, WNOHANG), 0) << ReadFile(dir.File("b.log"));
  const std::string token = Json{{"user", "admin"}, {"description", "after"}}.dump();
  EXPECT_TRUE(Eventually([&] {
    return Http(a, "POST", "/api/v1/tokens", admin, token).status == 201 ||
           Http(b, "POST", "/api/v1/tokens", admin, token).status == 201;
  }));
  ASSERT_GT(clients.acked_count(), 50u);
  clients.ExpectEachAcknowledgedOnce(b);
  std::printf(
      "%zu submissions acknowledged across 3 restarts of PostgreSQL; %d attempts refused or cut "
      "off, and sent again\n",
      clients.acked_count(), clients.retries());
}

}  // namespace
}  // namespace meridian::testing
