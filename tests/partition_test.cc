// A leader cut off from PostgreSQL by the network (issue 17; docs/adr/0028): PostgreSQL runs in
// a network namespace of its own, its "machine", with two links to this one (veth pairs); the
// leader reaches it over one and the follower over the other. The leader's link is then cut
// (iptables, dropping both ways, in the database's namespace), while clients submit throughout.
// The leader must stop acting (its database session found lost, it starts afresh in place)
// before the follower takes over, which it can only do once PostgreSQL ends the cut-off
// session (its TCP keepalives, as deploy/patroni/patroni.yml sets them); a submission the
// leader took during the cut is never acknowledged nor written; and once the link is back the
// old leader follows, the same process. The times are printed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "base/testing/temp_dir.h"
#include "store/testing/postgres_server.h"
#include "tests/postgres_fixtures.h"
#include "tests/server_process.h"
#include "tests/submitting_clients.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

int Shell(const std::string& command) { return std::system(command.c_str()); }

// The database's namespace and its two links: "l" (the leader's) and "f" (the follower's), on
// 10.211.N.0/30 and 10.212.N.0/30 (N from this process's id). Removed with the namespace.
class DatabaseNetwork {
 public:
  DatabaseNetwork() : n_(std::to_string(::getpid() % 250 + 1)), ns_("mdb" + n_) {
    Shell("ip netns del " + ns_ + " 2> /dev/null");
    ok_ = Shell("ip netns add " + ns_) == 0 && Shell("ip -n " + ns_ + " link set lo up") == 0 &&
          Link("l", "10.211.") && Link("f", "10.212.");
  }
  ~DatabaseNetwork() { Shell("ip netns del " + ns_ + " 2> /dev/null"); }

  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  // The database's address on the leader's and the follower's link.
  std::string leader_side() const { return "10.211." + n_ + ".2"; }
  std::string follower_side() const { return "10.212." + n_ + ".2"; }
  // Drops every packet on the leader's link, both ways; "" when done.
  bool Cut() {
    return Shell("ip netns exec " + ns_ + " iptables -A INPUT -i " + Inner("l") + " -j DROP") ==
               0 &&
           Shell("ip netns exec " + ns_ + " iptables -A OUTPUT -o " + Inner("l") + " -j DROP") == 0;
  }
  bool Heal() { return Shell("ip netns exec " + ns_ + " iptables -F") == 0; }

 private:
  std::string Outer(const std::string& side) const { return "v" + side + n_ + "o"; }
  std::string Inner(const std::string& side) const { return "v" + side + n_ + "i"; }
  bool Link(const std::string& side, const std::string& net) {
    const std::string outer = Outer(side), inner = Inner(side);
    Shell("ip link del " + outer + " 2> /dev/null");
    return Shell("ip link add " + outer + " type veth peer name " + inner) == 0 &&
           Shell("ip link set " + inner + " netns " + ns_) == 0 &&
           Shell("ip addr add " + net + n_ + ".1/30 dev " + outer) == 0 &&
           Shell("ip -n " + ns_ + " addr add " + net + n_ + ".2/30 dev " + inner) == 0 &&
           Shell("ip link set " + outer + " up") == 0 &&
           Shell("ip -n " + ns_ + " link set " + inner + " up") == 0;
  }

  const std::string n_;
  const std::string ns_;
  bool ok_ = false;
};

// Seconds since the epoch of the first log line of `log` holding `text`, or 0.
double LoggedAt(const std::string& log, const std::string& text) {
  const size_t at = log.find(text);
  if (at == std::string::npos) return 0;
  const size_t line = log.rfind('\n', at);
  const std::string head = log.substr(line == std::string::npos ? 0 : line + 1, 24);
  std::smatch m;
  static const std::regex stamp(R"((\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+\.\d+)Z)");
  if (!std::regex_search(head, m, stamp)) return 0;
  std::tm t{};
  t.tm_year = std::stoi(m[1]) - 1900;
  t.tm_mon = std::stoi(m[2]) - 1;
  t.tm_mday = std::stoi(m[3]);
  t.tm_hour = std::stoi(m[4]);
  t.tm_min = std::stoi(m[5]);
  return static_cast<double>(timegm(&t)) + std::stod(m[6]);
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(ServerReplicas, ALeaderCutOffFromPostgresStopsActingBeforeTheFollowerTakesOver) {
  ASSERT_EQ(::geteuid(), 0u) << "network namespaces and iptables need root";
  DatabaseNetwork net;
  ASSERT_TRUE(net.ok()) << "cannot make the database's network namespace and links";
  base::testing::TempDir dir;
  // PostgreSQL's keepalives as deploy/patroni/patroni.yml sets them: a silent client's session
  // ends after about 15 s.
  store::testing::PostgresServer pg(
      {net.ns(), net.leader_side() + "," + net.follower_side(),
       "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=2 "
       "-c tcp_user_timeout=15000"});
  ASSERT_EQ(pg.Start(), "");
  std::string error;
  const std::string conninfo = pg.Database("meridian", &error);
  ASSERT_NE(conninfo, "") << error;
  ServerProcess leader(kBinary, dir.File("leader"),
                       {"--store", "postgresql://postgres@" + net.leader_side() + "/meridian"});
  ASSERT_TRUE(leader.Start()) << ReadFile(dir.File("leader.log"));
  const std::string admin = leader.admin_token();
  ASSERT_FALSE(admin.empty()) << ReadFile(dir.File("leader.log"));
  ServerProcess follower(kBinary, dir.File("follower"),
                         {"--store", "postgresql://postgres@" + net.follower_side() + "/meridian"});
  ASSERT_TRUE(follower.Start()) << ReadFile(dir.File("follower.log"));
  { std::ofstream(dir.File("estate.yaml")) << kOneNodeEstate; }
  CliResult applied =
      Cli(kBinary, "apply -f " + dir.File("estate.yaml") + " -m first", leader.url(), admin);
  ASSERT_EQ(applied.code, 0) << applied.output;
  const pid_t pid = leader.pid();

  SubmittingClients clients({&leader, &follower}, admin, "research");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double cut = WallNow();
  ASSERT_TRUE(net.Cut());
  // A submission to the cut-off leader: never acknowledged, never written.
  const Json late = {{"metadata", {{"name", "late"}, {"project", "research"}}},
                     {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
  HttpResult answer = Http(leader, "POST", "/api/v1/jobs", admin, late.dump());
  EXPECT_NE(answer.status, 201) << answer.text;
  EXPECT_NE(answer.status, 200) << answer.text;

  ASSERT_TRUE(Eventually(
      [&] {
        return ReadFile(dir.File("follower.log")).find("took over as leader") != std::string::npos;
      },
      60))
      << ReadFile(dir.File("leader.log")) << ReadFile(dir.File("follower.log"));
  const double stopped = LoggedAt(ReadFile(dir.File("leader.log")), "deposed: ");
  const double taken = LoggedAt(ReadFile(dir.File("follower.log")), "took over as leader");
  ASSERT_GT(stopped, 0) << ReadFile(dir.File("leader.log"));
  ASSERT_GT(taken, 0);
  EXPECT_LT(stopped, taken) << "the cut-off leader was still acting when the follower took over";

  ASSERT_TRUE(net.Heal());
  EXPECT_TRUE(Eventually(
      [&] {
        return ReadFile(dir.File("leader.log")).find("following the leader " + follower.url()) !=
               std::string::npos;
      },
      30))
      << ReadFile(dir.File("leader.log"));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  clients.Stop();

  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << ReadFile(dir.File("leader.log"));
  EXPECT_EQ(clients.given_up(), 0) << "a submission found no server that took it within 60 s";
  ASSERT_GT(clients.acked_count(), 20u);
  clients.ExpectEachAcknowledgedOnce(follower);
  HttpResult found = Http(follower, "GET", "/api/v1/jobs?name=late", admin);
  ASSERT_EQ(found.status, 200) << found.text;
  EXPECT_EQ(found.body["items"].size(), 0u) << found.text;
  std::printf(
      "cut at 0 s: the leader stopped acting at %.1f s, the follower took over at %.1f s; %zu "
      "submissions acknowledged, %d sent again\n",
      stopped - cut, taken - cut, clients.acked_count(), clients.retries());
}

}  // namespace
}  // namespace meridian::testing
