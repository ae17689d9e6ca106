// PostgreSQL's own availability is PostgreSQL's (issue 17, docs/operations.md): a real etcd and
// two PostgreSQL 15 members under real Patroni, run from the shipped deploy/patroni/patroni.yml
// (synchronous replication: a commit waits for the standby)
// (this machine's addresses, folders and passwords set through Patroni's environment). The
// server reaches them through one libpq URL naming both members with
// target_session_attrs=read-write, so that it connects to whichever is primary. While clients
// submit throughout, Patroni moves the primary (a switchover), then the new primary is killed
// (its Patroni and PostgreSQL, SIGKILL) and the other is promoted once its leader key expires.
// The server comes back by itself each time, the same process, and every acknowledged job is in
// the store once. The outages are printed.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "base/testing/temp_dir.h"
#include "tests/postgres_fixtures.h"
#include "tests/server_process.h"
#include "tests/submitting_clients.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;
const std::string kPatroniConfig = std::string(MERIDIAN_SOURCE_DIR) + "/deploy/patroni/patroni.yml";
const std::string kPassword = "test-secret";

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The HTTP status of GET `path` on 127.0.0.1:`port` (0: no answer).
int Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  c.set_read_timeout(5);
  auto r = c.Get(path);
  return r ? r->status : 0;
}

// One Patroni member (and the PostgreSQL it runs), as the postgres account when the test is
// root (initdb refuses root).
class PatroniMember {
 public:
  PatroniMember(const std::string& name, const std::string& dir, int etcd_port)
      : name_(name), dir_(dir), api_port_(FreePort()), pg_port_(FreePort()) {
    ::mkdir(dir_.c_str(), 0700);
    if (::geteuid() == 0) {
      const passwd* pg = ::getpwnam("postgres");
      if (pg && ::chown(dir_.c_str(), pg->pw_uid, pg->pw_gid) != 0) std::perror("chown");
    }
    env_ = {{"PATRONI_NAME", name},
            {"PATRONI_SCOPE", "meridian-test-" + std::to_string(::getpid())},
            {"PATRONI_RESTAPI_LISTEN", "127.0.0.1:" + std::to_string(api_port_)},
            {"PATRONI_RESTAPI_CONNECT_ADDRESS", "127.0.0.1:" + std::to_string(api_port_)},
            {"PATRONI_ETCD3_HOSTS", "127.0.0.1:" + std::to_string(etcd_port)},
            {"PATRONI_POSTGRESQL_LISTEN", "127.0.0.1:" + std::to_string(pg_port_)},
            {"PATRONI_POSTGRESQL_CONNECT_ADDRESS", "127.0.0.1:" + std::to_string(pg_port_)},
            {"PATRONI_POSTGRESQL_DATA_DIR", dir_ + "/data"},
            {"PATRONI_POSTGRESQL_PGPASS", dir_ + "/pgpass"},
            {"PATRONI_SUPERUSER_PASSWORD", kPassword},
            {"PATRONI_REPLICATION_PASSWORD", kPassword},
            {"PATRONI_RESTAPI_PASSWORD", kPassword},
            {"HOME", dir_}};
  }
  ~PatroniMember() {
    Stop(SIGTERM);
    // Whatever PostgreSQL is left (its Patroni killed): stopped at once.
    const std::string pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl -D " + dir_ + "/data";
    const std::string as = ::geteuid() == 0 ? "cd / && runuser -u postgres -- " : "";
    (void)std::system((as + pg_ctl + " status > /dev/null 2>&1 && " + as + pg_ctl +
                       " -m immediate -w stop > /dev/null 2>&1")
                          .c_str());
  }

  void Start() {
    ChildSpec spec;
    if (::geteuid() == 0) {
      spec.argv = {"/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres",
                   "--init-groups",    "/usr/bin/patroni", kPatroniConfig};
    } else {
      spec.argv = {"/usr/bin/patroni", kPatroniConfig};
    }
    spec.log = dir_ + ".log";
    spec.env = env_;
    pid_ = SpawnChild(std::move(spec));
  }
  // Stops Patroni: SIGTERM stops its PostgreSQL too; SIGKILL leaves it running.
  void Stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    if (!Eventually([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, 20)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  // Kills Patroni and its PostgreSQL's postmaster, as a machine's crash would.
  void Crash() {
    const std::string postmaster = ReadFile(dir_ + "/data/postmaster.pid");
    Stop(SIGKILL);
    const int pid = std::atoi(postmaster.c_str());
    if (pid > 0) ::kill(pid, SIGKILL);
  }

  bool Primary() const { return Get(api_port_, "/primary") == 200; }
  // A standby that every commit waits for (synchronous_mode in the shipped file).
  bool Synchronous() const { return Get(api_port_, "/sync") == 200; }
  const std::string& name() const { return name_; }
  int api_port() const { return api_port_; }
  int pg_port() const { return pg_port_; }
  std::string log() const { return ReadFile(dir_ + ".log"); }

 private:
  const std::string name_;
  const std::string dir_;
  const int api_port_;
  const int pg_port_;
  std::vector<std::pair<std::string, std::string>> env_;
  pid_t pid_ = -1;
};

// The time from `since` until `server` accepts a write (a token made), or -1 after 90 s.
double UntilWritesAreTaken(const ServerProcess& server, const std::string& admin, double since) {
  const std::string token = Json{{"user", "admin"}, {"description", "probe"}}.dump();
  while (Now() - since < 90) {
    if (Http(server, "POST", "/api/v1/tokens", admin, token).status == 201) return Now() - since;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

TEST(Patroni, TheServerFollowsThePrimaryWhenPatroniMovesItAndWhenItIsLost) {
  for (const char* tool :
       {"/usr/bin/patroni", "/usr/bin/etcd", "/usr/lib/postgresql/15/bin/pg_ctl"}) {
    struct stat st {};
    ASSERT_EQ(::stat(tool, &st), 0)
        << tool << " is missing: run scripts/install-deps.sh (patroni, etcd-server, postgresql)";
  }
  base::testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // the postgres account reaches its folders
  // PostgreSQL's Unix sockets go to Debian's folder; a fresh machine may not have it yet.
  if (::geteuid() == 0) {
    ASSERT_EQ(std::system("install -d -o postgres -g postgres -m 2775 /run/postgresql"), 0);
  }

  // etcd, one member, for Patroni's leader key.
  const int etcd_port = FreePort();
  const int etcd_peer = FreePort();
  const std::string etcd_url = "http://127.0.0.1:" + std::to_string(etcd_port);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(etcd_peer);
  ChildProcess etcd({"/usr/bin/etcd", "--name", "e1", "--data-dir", dir.File("etcd"),
                     "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", "e1=" + peer_url, "--initial-cluster-state", "new",
                     "--listen-metrics-urls", "http://127.0.0.1:" + std::to_string(FreePort())},
                    dir.File("etcd.log"));
  ASSERT_TRUE(Eventually([&] { return Get(etcd_port, "/health") == 200; }))
      << ReadFile(dir.File("etcd.log"));

  // Two members: the first bootstraps the primary, the second clones it as a replica.
  PatroniMember db1("db1", dir.File("db1"), etcd_port);
  PatroniMember db2("db2", dir.File("db2"), etcd_port);
  db1.Start();
  ASSERT_TRUE(Eventually([&] { return db1.Primary(); }, 60)) << db1.log();
  db2.Start();
  ASSERT_TRUE(Eventually([&] { return db2.Synchronous(); }, 60)) << db2.log();

  // Meridian's role and database, as docs/operations.md makes them.
  const std::string superuser = "host=127.0.0.1 port=" + std::to_string(db1.pg_port()) +
                                " user=postgres password=" + kPassword + " dbname=postgres";
  ASSERT_EQ(SqlExec(superuser, "CREATE ROLE meridian LOGIN PASSWORD '" + kPassword + "'"), "");
  ASSERT_EQ(SqlExec(superuser, "CREATE DATABASE meridian OWNER meridian"), "");
  const std::string store = "postgresql://meridian:" + kPassword +
                            "@127.0.0.1:" + std::to_string(db1.pg_port()) +
                            ",127.0.0.1:" + std::to_string(db2.pg_port()) +
                            "/meridian?target_session_attrs=read-write&connect_timeout=2";
  ServerProcess server(kBinary, dir.File("server"), {"--store", store});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("server.log"));
  const std::string admin = server.admin_token();
  const pid_t pid = server.pid();
  { std::ofstream(dir.File("estate.yaml")) << kOneNodeEstate; }
  CliResult applied =
      Cli(kBinary, "apply -f " + dir.File("estate.yaml") + " -m first", server.url(), admin);
  ASSERT_EQ(applied.code, 0) << applied.output;
  EXPECT_EQ(ReadFile(dir.File("server.log")).find(kPassword), std::string::npos)
      << "the store's password is in the server's log";

  SubmittingClients clients({&server}, admin, "research");
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // A planned move: Patroni's switchover, through its REST API (as patronictl does).
  const double moved = Now();
  {
    httplib::Client c("127.0.0.1", db1.api_port());
    c.set_read_timeout(60);
    // Refused without the REST API's credentials (deploy/patroni/patroni.yml sets them).
    auto anonymous = c.Post("/switchover", Json{{"leader", "db1"}, {"candidate", "db2"}}.dump(),
                            "application/json");
    ASSERT_TRUE(anonymous);
    EXPECT_EQ(anonymous->status, 401) << anonymous->body;
    c.set_basic_auth("patroni", kPassword);
    auto r = c.Post("/switchover", Json{{"leader", "db1"}, {"candidate", "db2"}}.dump(),
                    "application/json");
    ASSERT_TRUE(r) << "no answer from db1's Patroni";
    ASSERT_EQ(r->status, 200) << r->body << db1.log();
  }
  ASSERT_TRUE(Eventually([&] { return db2.Primary(); }, 30)) << db2.log();
  const double after_move = UntilWritesAreTaken(server, admin, moved);
  ASSERT_GE(after_move, 0) << ReadFile(dir.File("server.log"));
  // db1 comes back as db2's synchronous standby before db2 is lost.
  ASSERT_TRUE(Eventually([&] { return db1.Synchronous(); }, 60)) << db1.log();
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // A lost primary: db2's Patroni and PostgreSQL killed; db1 is promoted once the leader key's
  // TTL (20 s in the shipped file) runs out.
  const double lost = Now();
  db2.Crash();
  ASSERT_TRUE(Eventually([&] { return db1.Primary(); }, 60)) << db1.log();
  const double promoted = Now() - lost;
  const double after_loss = UntilWritesAreTaken(server, admin, lost);
  ASSERT_GE(after_loss, 0) << ReadFile(dir.File("server.log"));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  clients.Stop();

  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << ReadFile(dir.File("server.log"));
  EXPECT_EQ(clients.given_up(), 0) << "a submission found no server that took it within 60 s";
  EXPECT_GT(clients.retries(), 0) << "no submission met the outages";
  ASSERT_GT(clients.acked_count(), 20u);
  clients.ExpectEachAcknowledgedOnce(server);
  std::printf(
      "switchover: writes taken again %.1f s after it was asked for; primary lost: db1 promoted "
      "after %.1f s, writes taken again after %.1f s; %zu submissions acknowledged, %d attempts "
      "refused or cut off and sent again\n",
      after_move, promoted, after_loss, clients.acked_count(), clients.retries());
}

}  // namespace
}  // namespace meridian::testing
