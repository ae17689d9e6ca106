#include "cloud/dev_cloud.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "base/testing/temp_dir.h"
#include "cloud/provisioner.h"

namespace meridian::cloud {
namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Polls `done` until it holds or `seconds` have passed.
bool Eventually(const std::function<bool()>& done, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

// Whether a process runs (a zombie, waiting for its parent, does not).
bool Running(int pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

struct Outcome {
  int rc = -1;
  Json answer;
  std::string err;
};

// A dev cloud whose "agent" is a shell script: it writes its arguments, its pid and the pid of a
// child it leaves in its process group into the test's directory, named by its --node, then
// becomes `sleep 300`.
class DevCloudTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    const std::string agent = dir_.File("agent.sh");
    std::ofstream(agent) << "#!/bin/sh\n"
                         << "out=" << dir_.path() << "\n"
                         << R"(node=""; prev=""
for a in "$@"; do [ "$prev" = "--node" ] && node="$a"; prev="$a"; done
sleep 301 &
echo $! > "$out/child-$node"
echo $$ > "$out/pid-$node"
printf '%s\n' "$@" > "$out/argv-$node.tmp" && mv "$out/argv-$node.tmp" "$out/argv-$node"
exec sleep 300
)";
    chmod(agent.c_str(), 0755);
    o_.state_dir = dir_.File("state");
    o_.agent = agent;
    o_.agent_args = {"--heartbeat", "1s"};
  }

  void TearDown() override {
    // Nothing may outlive the test: delete every instance the cloud knows.
    Outcome listed = Run("list", "{}");
    std::vector<std::string> ids;
    for (const Json& i : listed.answer.value("instances", Json::array())) ids.push_back(i["id"]);
    if (!ids.empty()) {
      Outcome deleted = Run("delete", Json{{"instances", ids}}.dump());
      EXPECT_EQ(deleted.rc, 0) << deleted.err;
    }
    for (const std::string& name : started_nodes_) {
      for (const char* what : {"pid-", "child-"}) {
        const std::string text = ReadFile(dir_.File(what + name));
        if (text.empty()) continue;
        const int pid = std::stoi(text);
        EXPECT_TRUE(Eventually([&] { return !Running(pid); }, 5))
            << what << name << " " << pid << " still runs";
        if (Running(pid)) kill(pid, SIGKILL);
      }
    }
  }

  Outcome Run(const std::string& verb, const std::string& in) {
    Outcome o;
    std::string out;
    o.rc = RunDevCloud(o_, verb, in, &out, &o.err);
    o.answer = Json::parse(out, nullptr, false);
    return o;
  }

  Json CreateRequestFor(const std::vector<std::string>& nodes, double boot, int gpus = 2) {
    for (const std::string& n : nodes) started_nodes_.push_back(n);
    CreateRequest r;
    r.pool = "burst";
    r.cluster = "east";
    r.shape = {gpus, "H100-80GB", 4000, 8192};
    r.boot_seconds = boot;
    r.price_per_hour = 3.6;
    r.nodes = nodes;
    r.server = "http://127.0.0.1:1";
    r.token = "bootstrap-" + nodes[0];
    return ToJson(r);
  }

  std::vector<Instance> List(const std::string& pool = "burst") {
    Outcome listed = Run("list", Json{{"pool", pool}}.dump());
    EXPECT_EQ(listed.rc, 0) << listed.err;
    auto instances = InstancesOf(listed.answer);
    EXPECT_TRUE(instances.ok()) << instances.status().message();
    return instances.ok() ? *instances : std::vector<Instance>{};
  }

  std::vector<std::string> Argv(const std::string& node) {
    std::vector<std::string> out;
    std::istringstream in(ReadFile(dir_.File("argv-" + node)));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

  // The value after `flag` in the agent's arguments, "" when absent.
  std::string Flag(const std::vector<std::string>& argv, const std::string& flag) {
    for (size_t k = 0; k + 1 < argv.size(); ++k) {
      if (argv[k] == flag) return argv[k + 1];
    }
    return "";
  }

  base::testing::TempDir dir_;
  DevCloudOptions o_;
  std::vector<std::string> started_nodes_;
};

TEST_F(DevCloudTest, InstancesBootAfterTheirBootTimeAsAgentsOfTheirNode) {
  const double before = WallNow();
  Outcome created = Run("create", CreateRequestFor({"burst-1", "burst-2"}, 1).dump());
  ASSERT_EQ(created.rc, 0) << created.err << created.answer;
  auto instances = InstancesOf(created.answer);
  ASSERT_TRUE(instances.ok()) << instances.status().message();
  ASSERT_EQ(instances->size(), 2u);
  EXPECT_EQ((*instances)[0].id, "dc-1");
  EXPECT_EQ((*instances)[1].id, "dc-2");
  EXPECT_EQ((*instances)[0].node, "burst-1");
  EXPECT_EQ((*instances)[0].state, "booting");
  EXPECT_GE((*instances)[0].created_at, before - 0.01);
  EXPECT_LE((*instances)[0].created_at, WallNow() + 0.01);

  // While it boots the agent has not started.
  Outcome listed = Run("list", R"({"pool": "burst"})");
  ASSERT_EQ(listed.rc, 0);
  ASSERT_EQ(listed.answer["instances"].size(), 2u);
  for (const Json& i : listed.answer["instances"]) {
    if (WallNow() < (*instances)[0].created_at + 0.9) {
      EXPECT_EQ(i["state"], "booting");
    }
    EXPECT_EQ(i["processAlive"], true);
  }
  EXPECT_FALSE(Exists(dir_.File("argv-burst-1")));

  ASSERT_TRUE(Eventually([&] {
    const auto l = List();
    return l.size() == 2 && l[0].state == "running" && l[1].state == "running";
  }));
  EXPECT_GE(WallNow(), (*instances)[0].created_at + 1);
  ASSERT_TRUE(Eventually([&] { return Exists(dir_.File("argv-burst-2")); }));
  const std::vector<std::string> argv = Argv("burst-2");
  ASSERT_GE(argv.size(), 3u);
  const std::string node_dir = o_.state_dir + "/burst-2";
  EXPECT_EQ(argv[0], "--server");
  EXPECT_EQ(argv[1], "http://127.0.0.1:1");
  EXPECT_EQ(argv[2], "agent");
  EXPECT_EQ(Flag(argv, "--node"), "burst-2");
  EXPECT_EQ(Flag(argv, "--cluster"), "east");
  EXPECT_EQ(Flag(argv, "--pool"), "burst");
  EXPECT_EQ(Flag(argv, "--address"), "127.0.0.1");
  EXPECT_EQ(Flag(argv, "--work-dir"), node_dir + "/work");
  EXPECT_EQ(Flag(argv, "--token-file"), node_dir + "/token");
  EXPECT_EQ(Flag(argv, "--simulate-gpus"), "2xH100-80GB");
  EXPECT_EQ(Flag(argv, "--cpu-milli"), "4000");
  EXPECT_EQ(Flag(argv, "--memory-mib"), "8192");
  EXPECT_EQ(Flag(argv, "--heartbeat"), "1s");
  EXPECT_EQ(argv.back(), "1s");  // the extra arguments come last

  EXPECT_EQ(ReadFile(node_dir + "/token"), "bootstrap-burst-1\n");
  struct stat st {};
  ASSERT_EQ(stat((node_dir + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(o_.state_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);

  // The daemon holds none of our descriptors (no pipe a caller would wait on, no lock): only
  // /dev/null and its log.
  const std::string pid = ReadFile(dir_.File("pid-burst-2"));
  const std::string proc = "/proc/" + pid.substr(0, pid.find('\n'));
  ASSERT_TRUE(Eventually([&] { return ReadFile(proc + "/cmdline").starts_with("sleep"); }));
  const std::map<std::string, std::string> expected = {
      {"0", "/dev/null"}, {"1", node_dir + "/agent.log"}, {"2", node_dir + "/agent.log"}};
  // Looked at until it is so: the program it runs may hold a file of its own for a moment as it
  // starts (glibc reads its locale), where a descriptor of ours would stay.
  std::map<std::string, std::string> fds;
  EXPECT_TRUE(Eventually([&] {
    fds.clear();
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc + "/fd", ec)) {
      fds[fd.path().filename().string()] = std::filesystem::read_symlink(fd.path(), ec).string();
    }
    return fds == expected;
  }));
  EXPECT_EQ(fds, expected);
}

TEST_F(DevCloudTest, AnAgentWithoutGpusLooksForNone) {
  ASSERT_EQ(Run("create", CreateRequestFor({"cpu-1"}, 0, 0).dump()).rc, 0);
  ASSERT_TRUE(Eventually([&] { return Exists(dir_.File("argv-cpu-1")); }));
  const std::vector<std::string> argv = Argv("cpu-1");
  EXPECT_EQ(Flag(argv, "--simulate-gpus"), "");
  EXPECT_EQ(Flag(argv, "--gpu-discovery"), "none");
}

TEST_F(DevCloudTest, CapacityRefusesTheWholeRequest) {
  o_.capacity["burst"] = 2;
  ASSERT_EQ(Run("create", CreateRequestFor({"burst-1"}, 0).dump()).rc, 0);
  Outcome refused = Run("create", CreateRequestFor({"burst-2", "burst-3"}, 0).dump());
  EXPECT_EQ(refused.rc, 1);
  EXPECT_EQ(refused.answer["error"]["code"], "capacity") << refused.answer;
  EXPECT_EQ(ErrorOf(refused.answer, "").code(), base::StatusCode::kUnavailable);
  const auto listed = List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].node, "burst-1");
  EXPECT_FALSE(Exists(o_.state_dir + "/burst-2"));
  // One still fits; another pool has no limit.
  EXPECT_EQ(Run("create", CreateRequestFor({"burst-2"}, 0).dump()).rc, 0);
  Json other = CreateRequestFor({"other-1", "other-2", "other-3"}, 0);
  other["pool"] = "other";
  EXPECT_EQ(Run("create", other.dump()).rc, 0);
  EXPECT_EQ(List("burst").size(), 2u);
  EXPECT_EQ(List("").size(), 5u);
  EXPECT_EQ(List("other").size(), 3u);
}

TEST_F(DevCloudTest, DeleteStopsTheProcessGroupAndIsIdempotent) {
  Outcome created = Run("create", CreateRequestFor({"burst-1", "burst-2"}, 0).dump());
  ASSERT_EQ(created.rc, 0) << created.err;
  ASSERT_TRUE(Eventually([&] { return Exists(dir_.File("argv-burst-1")); }));
  const int pid = std::stoi(ReadFile(dir_.File("pid-burst-1")));
  const int child = std::stoi(ReadFile(dir_.File("child-burst-1")));
  ASSERT_TRUE(Running(pid));
  ASSERT_TRUE(Running(child));
  EXPECT_EQ(getpgid(pid), pid);  // its own group, which the child shares
  EXPECT_EQ(getpgid(child), pid);

  Outcome deleted = Run("delete", R"({"pool": "burst", "instances": ["dc-1"]})");
  ASSERT_EQ(deleted.rc, 0) << deleted.err;
  EXPECT_EQ(deleted.answer, Json::parse(R"({"deleted": ["dc-1"]})"));
  EXPECT_FALSE(Running(pid));
  EXPECT_TRUE(Eventually([&] { return !Running(child); }, 5));
  const auto listed = List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, "dc-2");

  // Again, and with an id it never made: both succeed and change nothing.
  deleted = Run("delete", R"({"pool": "burst", "instances": ["dc-1", "dc-99"]})");
  EXPECT_EQ(deleted.rc, 0) << deleted.err;
  EXPECT_EQ(deleted.answer, Json::parse(R"({"deleted": ["dc-1", "dc-99"]})"));
  EXPECT_EQ(List().size(), 1u);
}

TEST_F(DevCloudTest, AnInstanceWhoseAgentCrashedIsStillListed) {
  ASSERT_EQ(Run("create", CreateRequestFor({"burst-1"}, 0).dump()).rc, 0);
  ASSERT_TRUE(Eventually([&] { return Exists(dir_.File("argv-burst-1")); }));
  const int pid = std::stoi(ReadFile(dir_.File("pid-burst-1")));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] {
    Outcome l = Run("list", "{}");
    return l.answer["instances"].size() == 1 && l.answer["instances"][0]["processAlive"] == false;
  }));
  const auto listed = List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "booting");
}

TEST_F(DevCloudTest, BillChargesPerSecondUntilDeletion) {
  o_.never_boot = true;
  const double t0 = WallNow();
  ASSERT_EQ(Run("create", CreateRequestFor({"burst-1", "burst-2"}, 0).dump()).rc, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // time to bill
  ASSERT_EQ(Run("delete", R"({"instances": ["dc-1"]})").rc, 0);
  const double deleted_after = WallNow() - t0;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Outcome bill = Run("bill", "{}");
  const double elapsed = WallNow() - t0;
  ASSERT_EQ(bill.rc, 0) << bill.err;
  ASSERT_EQ(bill.answer["instances"].size(), 2u) << bill.answer;
  const Json& gone = bill.answer["instances"][0];
  const Json& live = bill.answer["instances"][1];
  EXPECT_EQ(gone["id"], "dc-1");
  EXPECT_EQ(gone["node"], "burst-1");
  EXPECT_EQ(gone["pool"], "burst");
  EXPECT_EQ(gone["spot"], false);
  EXPECT_DOUBLE_EQ(gone["pricePerHour"].get<double>(), 3.6);
  // The deleted one stopped counting at its deletion; the live one counts on.
  EXPECT_NEAR(gone["seconds"].get<double>(), deleted_after, 1.0);
  EXPECT_LE(gone["seconds"].get<double>(), deleted_after + 0.01);
  EXPECT_NEAR(live["seconds"].get<double>(), elapsed, 1.0);
  EXPECT_GT(live["seconds"].get<double>(), gone["seconds"].get<double>() + 0.4);
  double total = 0;
  for (const Json& i : bill.answer["instances"]) {
    EXPECT_NEAR(i["cost"].get<double>(), i["seconds"].get<double>() * 3.6 / 3600, 1e-12);
    total += i["cost"].get<double>();
  }
  EXPECT_NEAR(bill.answer["total"].get<double>(), total, 1e-12);
  EXPECT_GT(total, 0);
  EXPECT_EQ(Run("bill", R"({"pool": "other"})").answer["instances"].size(), 0u);
}

TEST_F(DevCloudTest, NeverBootRunsNothing) {
  o_.never_boot = true;
  Outcome created = Run("create", CreateRequestFor({"burst-1"}, 0).dump());
  ASSERT_EQ(created.rc, 0) << created.err;
  EXPECT_EQ(ReadFile(o_.state_dir + "/burst-1/token"), "bootstrap-burst-1\n");
  // Nothing to wait for: no process was started at all.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(Exists(dir_.File("argv-burst-1")));
  Outcome listed = Run("list", "{}");
  ASSERT_EQ(listed.answer["instances"].size(), 1u);
  EXPECT_EQ(listed.answer["instances"][0]["state"], "booting");
  EXPECT_EQ(listed.answer["instances"][0]["processAlive"], false);
  EXPECT_EQ(Run("delete", R"({"instances": ["dc-1"]})").rc, 0);
  EXPECT_TRUE(List().empty());
}

// Interruptions at a rate: spot instances are taken back with the configured notice when a
// list finds them due (at a rate of 1,000 a second, at the first list); on-demand ones never.
TEST_F(DevCloudTest, SpotInstancesAreInterruptedAtTheConfiguredRate) {
  o_.never_boot = true;
  Json spot = CreateRequestFor({"burst-1"}, 0);
  spot["spot"] = true;
  ASSERT_EQ(Run("create", spot.dump()).rc, 0);
  ASSERT_EQ(Run("create", CreateRequestFor({"burst-2"}, 0).dump()).rc, 0);
  // Without a rate, a list takes nothing back.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const Instance& i : List()) EXPECT_EQ(i.interrupt_at, 0) << i.node;
  o_.interrupt_rate = 3.6e6;
  o_.interrupt_notice = 30;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::vector<Instance> listed = List();
  ASSERT_EQ(listed.size(), 2u);
  for (const Instance& i : listed) {
    if (i.node == "burst-1") {
      EXPECT_NEAR(i.interrupt_at, before + 30, 2) << "the spot instance goes in 30 s";
    } else {
      EXPECT_EQ(i.interrupt_at, 0) << "an on-demand instance is never taken back";
    }
  }
  // Taken back once: the next list keeps the same deadline.
  for (const Instance& i : List()) {
    if (i.node == "burst-1") {
      EXPECT_NEAR(i.interrupt_at, before + 30, 2);
    }
  }
}

TEST_F(DevCloudTest, CreatingTheSameNodeAgainAnswersTheSameInstance) {
  o_.never_boot = true;
  Outcome first = Run("create", CreateRequestFor({"burst-1"}, 0).dump());
  Outcome again = Run("create", CreateRequestFor({"burst-1", "burst-2"}, 0).dump());
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.answer["instances"][0]["id"], first.answer["instances"][0]["id"]);
  EXPECT_EQ(again.answer["instances"][1]["id"], "dc-2");
  EXPECT_EQ(List().size(), 2u);
}

TEST_F(DevCloudTest, ConcurrentCallsGetDistinctIds) {
  o_.never_boot = true;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      for (int k = 0; k < 5; ++k) {
        CreateRequest r;
        r.pool = "burst";
        r.cluster = "east";
        r.nodes = {"n-" + std::to_string(t) + "-" + std::to_string(k)};
        r.server = "http://127.0.0.1:1";
        r.token = "t";
        std::string out, err;
        EXPECT_EQ(RunDevCloud(o_, "create", ToJson(r).dump(), &out, &err), 0) << err;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const auto listed = List();
  ASSERT_EQ(listed.size(), 20u);
  std::set<std::string> ids;
  for (const Instance& i : listed) ids.insert(i.id);
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_TRUE(ids.count("dc-20"));
}

TEST_F(DevCloudTest, BadInputIsRefusedWithStatusTwo) {
  struct Case {
    std::string verb, in, error;
  };
  Json no_nodes = CreateRequestFor({"x"}, 0);
  no_nodes.erase("nodes");
  const std::vector<Case> cases = {
      {"reboot", "{}", "unknown verb reboot"},
      {"create", "not json", "not a JSON object"},
      {"create", no_nodes.dump(), "nodes: must be a non-empty list"},
      {"delete", R"({"instances": "dc-1"})", "instances: must be a list"},
      {"delete", R"({"instances": [1]})", "instances[0]: must be a string"},
      {"list", R"({"pool": 3})", "pool: must be a string"},
  };
  for (const Case& c : cases) {
    Outcome o = Run(c.verb, c.in);
    EXPECT_EQ(o.rc, 2) << c.verb << " " << c.in;
    EXPECT_EQ(o.answer["error"]["code"], "invalid") << o.answer;
    EXPECT_NE(o.answer["error"]["message"].get<std::string>().find(c.error), std::string::npos)
        << o.answer;
  }
  o_.agent = dir_.File("missing-agent");
  Outcome o = Run("create", CreateRequestFor({"y"}, 0).dump());
  EXPECT_EQ(o.rc, 1);
  EXPECT_EQ(o.answer["error"]["code"], "internal");
  EXPECT_TRUE(List().empty());
}

}  // namespace
}  // namespace meridian::cloud
