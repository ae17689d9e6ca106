// ElasticPools inside the controller, with a fake clock and a provisioner played by a shell script
// whose answers a test writes (a fake: no cloud here). What the end-to-end tests cannot reach in
// seconds: a server restarted with instances out there, a delete that fails and is asked again,
// a pool removed from the configuration with an instance still booting.
#include "server/elastic_pools.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>

#include "base/entropy.h"
#include "server/testing/control_plane.h"

namespace meridian::server {
namespace {

using testing::Doc;

class ElasticPoolsTest : public testing::ControlPlane {
 protected:
  void SetUp() override {
    // The provisioner: records each verb, answers what the test put in VERB.out, and exits with
    // VERB.rc when there is one.
    script_ = dir_.File("provisioner.sh");
    std::ofstream(script_) << "#!/bin/sh\n"
                           << "d=" << dir_.path() << "\n"
                           << "cat > \"$d/last-$1.json\"\necho \"$1\" >> \"$d/calls\"\n"
                           << "[ -f \"$d/$1.out\" ] && cat \"$d/$1.out\"\n"
                           << "[ -f \"$d/$1.rc\" ] && exit \"$(cat \"$d/$1.rc\")\"\nexit 0\n";
    ::chmod(script_.c_str(), 0755);
    Answer("list", R"({"instances": []})");
    Answer("delete", R"({"deleted": []})");
  }

  void OpenWithPool() {
    std::vector<store::Object> docs = testing::Estate(0);
    docs.push_back(Doc("NodePool", "burst",
                       {{"cluster", "onprem"},
                        {"gpusPerNode", 8},
                        {"gpuModel", "H100-80GB"},
                        {"cpuMilli", 128000},
                        {"memoryMib", 1024 * 1024},
                        {"provisioner", "fake"},
                        {"minNodes", 0},
                        {"maxNodes", 1},
                        {"bootDelay", 10.0},
                        {"idleTimeout", 60.0}}));
    Open(docs);
    ElasticOptions o;
    o.provisioners["fake"] = {"/bin/sh", script_};
    o.server_url = "http://127.0.0.1:1";
    controller_->SetElasticPools(std::make_unique<ElasticPools>(
        o, hooked_.get(), nodes_.get(), &bus_, &metrics_, &entropy_, [this] {
          std::lock_guard<std::mutex> lock(mu_);
          ++answered_;
          cv_.notify_all();
        }));
  }

  void Answer(const std::string& verb, const std::string& out, int rc = 0) {
    std::ofstream(dir_.File(verb + ".out")) << out;
    if (rc != 0) {
      std::ofstream(dir_.File(verb + ".rc")) << rc;
    } else {
      std::remove(dir_.File(verb + ".rc").c_str());
    }
  }
  // A round, then waits until the provisioner has answered `n` requests in all.
  void RoundAndWait(int n) {
    Round();
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(20), [&] { return answered_ >= n; }))
        << "answered " << answered_ << " of " << n;
  }
  std::string Calls() {
    std::ifstream in(dir_.File("calls"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void RegisterInPool(const std::string& name) {
    Json gpus = Json::array();
    for (int i = 0; i < 8; ++i) {
      gpus.push_back({{"uuid", "GPU-" + name + "-" + std::to_string(i)}, {"model", "H100-80GB"}});
    }
    auto r = nodes_->Register("agents", {{"node", name},
                                         {"cluster", "onprem"},
                                         {"pool", "burst"},
                                         {"address", "10.0.0.9"},
                                         {"cpuMilli", 128000},
                                         {"memoryMib", 1024 * 1024},
                                         {"gpus", gpus}});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  bool Registered(const std::string& name) {
    return store::ReadValue(*store_, [&](store::Tx& tx) { return tx.GetObject("Node", name); })
        .ok();
  }

  std::string script_;
  base::SystemEntropy entropy_;
  std::mutex mu_;
  std::condition_variable cv_;
  int answered_ = 0;
};

// A restarted server finds an instance it had asked for: it adopts it rather than asking for
// another (maxNodes 1), the job waits for it, and runs there once its agent registers.
TEST_F(ElasticPoolsTest, AdoptsWhatTheProvisionerHoldsInsteadOfAskingAgain) {
  Answer("list", R"({"instances": [{"id": "i-1", "node": "burst-aaaaaa", "pool": "burst",
                     "state": "booting", "createdAt": 1}]})");
  OpenWithPool();
  const int64_t job = Submit("p1", {{"gpus", 8}});
  RoundAndWait(1);  // the pool lists what it holds
  Round();          // takes it in; nothing more to ask for
  Round();
  EXPECT_EQ(Calls(), "list\n");
  EXPECT_EQ(EventsOf("NodePool", "burst", "InstancesAdopted").size(), 1u);
  RegisterInPool("burst-aaaaaa");
  Rounds();
  EXPECT_EQ(NodeOf(job), "burst-aaaaaa");
  EXPECT_EQ(Calls(), "list\n");
}

// An idle node's delete fails: the node stays cordoned (nothing is placed there), the failure is
// a warning, and the delete is asked again; once it succeeds the node is deleted.
TEST_F(ElasticPoolsTest, AFailedDeleteIsAskedAgainAndTheNodeStaysCordonedMeanwhile) {
  Answer("list", R"({"instances": [{"id": "i-1", "node": "burst-aaaaaa", "pool": "burst",
                     "state": "running", "createdAt": 1}]})");
  OpenWithPool();
  RegisterInPool("burst-aaaaaa");
  RoundAndWait(1);
  Round();  // adopted, ready, idle since now
  Answer("delete", R"({"error": {"code": "internal", "message": "the cloud's API is down"}})", 1);
  clock_.Advance(61);
  Heartbeat("burst-aaaaaa");
  RoundAndWait(2);  // idle past 60 s: cordoned, deletion asked, refused
  Round();
  EXPECT_TRUE(Registered("burst-aaaaaa"));
  const auto failed = EventsOf("NodePool", "burst", "ProvisioningFailed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].find("the cloud's API is down"), std::string::npos) << failed[0];
  // The provisioning-failed alert's input: the pool, until its delete comes right.
  std::vector<ElasticPools::Failure> failing = controller_->ProvisioningFailures();
  ASSERT_EQ(failing.size(), 1u);
  EXPECT_EQ(failing[0].pool, "burst");
  EXPECT_EQ(failing[0].cluster, "onprem");
  EXPECT_EQ(failing[0].in_a_row, 1);
  EXPECT_NE(failing[0].what.find("deleting burst-aaaaaa failed"), std::string::npos)
      << failing[0].what;
  // Work that arrives meanwhile is not placed on the node on its way out.
  const int64_t job = Submit("p1", {{"gpus", 8}});
  Rounds();
  EXPECT_EQ(Phase(job), "Pending");
  Answer("delete", R"({"deleted": ["i-1"]})");
  clock_.Advance(31);
  Heartbeat("burst-aaaaaa");
  RoundAndWait(3);  // asked again
  Round();
  EXPECT_FALSE(Registered("burst-aaaaaa"));
  EXPECT_TRUE(controller_->ProvisioningFailures().empty());
  EXPECT_EQ(Calls(), "list\ndelete\ndelete\n");
  EXPECT_EQ(EventsOf("NodePool", "burst", "NodesReleased").size(), 1u);
}

// A pool removed from the configuration gives back the instance it was still booting.
TEST_F(ElasticPoolsTest, APoolRemovedFromTheConfigurationGivesItsInstancesBack) {
  Answer("list", R"({"instances": [{"id": "i-7", "node": "burst-bbbbbb", "pool": "burst",
                     "state": "booting", "createdAt": 1}]})");
  OpenWithPool();
  RoundAndWait(1);
  Round();
  Delete("NodePool", "burst");
  RoundAndWait(2);
  EXPECT_EQ(Calls(), "list\ndelete\n");
  std::ifstream asked(dir_.File("last-delete.json"));
  std::stringstream body;
  body << asked.rdbuf();
  EXPECT_NE(body.str().find("\"i-7\""), std::string::npos) << body.str();
}

}  // namespace
}  // namespace meridian::server
