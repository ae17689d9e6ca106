// End-to-end tests of datasets and checkpoints (docs/adr/0044-datasets.md): a real server and
// real agents of two sites on one machine, each site with a folder of its own as its shared
// filesystem, simulated GPUs (a fake: nothing real can run here) and real task processes. What a
// task reads and writes, and what a staging copies, are real files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

// Two on-prem sites: fra holds the datasets; ams reaches fra at 10 Gbit/s and stages into a
// cache of 250 GiB with a command that takes a while (a real copy, with a pause to be seen).
// Sizes are what the Dataset documents say (what placement weighs); the folders hold a few
// files each. DIR is the test's folder.
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
metadata: {name: fra}
spec:
  storage: {checkpoints: DIR/fra/checkpoints, cache: DIR/fra/cache}
---
kind: Cluster
metadata: {name: ams}
spec:
  network: {bandwidthGbps: {fra: 10}}
  storage:
    checkpoints: DIR/ams/checkpoints
    cache: DIR/ams/cache
    cacheCapacityGib: 250
    stagingCommand: [sh, -c, 'sleep 1; cp -a "$0" "$1"', "{source}", "{target}"]
---
kind: NodePool
metadata: {name: fra-h100}
spec: {cluster: fra, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: NodePool
metadata: {name: ams-h100}
spec: {cluster: ams, gpusPerNode: 4, gpuModel: H100-80GB}
---
kind: Dataset
metadata: {name: imagenet}
spec:
  sizeGib: 200
  locations: [{cluster: fra, path: DIR/fra/datasets/imagenet}]
---
kind: Dataset
metadata: {name: laion}
spec:
  sizeGib: 100
  locations: [{cluster: fra, path: DIR/fra/datasets/laion}]
---
kind: Dataset
metadata: {name: lost}
spec:
  sizeGib: 1
  locations: [{cluster: fra, path: DIR/fra/datasets/lost}]
---
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: Policy
metadata: {name: default}
spec: {heartbeatInterval: 0.2, nodeLostTimeout: 2}
)";

// The node a job's first task runs on ("" when it has none).
std::string NodeOf(const Json& job) {
  const Json& a = job["status"]["allocation"];
  return a.is_array() && !a.empty() ? a[0].value("node", "") : "";
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Tasks run under uids of their own: they pass through the test's folder to theirs.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    for (const char* name : {"imagenet", "laion"}) {
      const std::string folder = dir_.File("fra/datasets/") + name;
      std::filesystem::create_directories(folder + "/train");
      std::ofstream(folder + "/train/part-0") << name << " images\n";
      std::ofstream(folder + "/labels.txt") << "cat\ndog\n";
    }
    for (const char* f :
         {"fra", "fra/datasets", "fra/datasets/imagenet/train", "fra/datasets/laion/train"}) {
      ASSERT_EQ(::chmod(dir_.File(f).c_str(), 0755), 0) << f;
    }
    // Its data is some user's, not root's: a staged copy must still be root's alone to change.
    ASSERT_EQ(::chown(dir_.File("fra/datasets/imagenet/train/part-0").c_str(), 4242, 4242), 0);
    // Anyone may write in the datasets' own folders: only the read-only mount keeps a task out.
    for (const char* f : {"fra/datasets/imagenet", "fra/datasets/laion"}) {
      ASSERT_EQ(::chmod(dir_.File(f).c_str(), 0777), 0) << f;
    }
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    std::string estate = kEstate;
    for (size_t at = estate.find("DIR"); at != std::string::npos; at = estate.find("DIR", at)) {
      estate.replace(at, 3, dir_.path());
    }
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), estate));
    ASSERT_EQ(r.code, 0) << r.output;
    agent_token_ = AgentToken(*server_, admin_);
    ASSERT_FALSE(agent_token_.empty());
  }

  // An agent for node `name` of `cluster` with 4 simulated H100s, once registered.
  void StartAgent(const std::string& name, const std::string& cluster) {
    auto& a = agents_[name];
    a = std::make_unique<AgentProcess>(
        kBinary,
        std::vector<std::string>{"--cluster", cluster, "--pool", cluster + "-h100", "--node", name,
                                 "--simulate-gpus", "4xH100-80GB", "--work-dir",
                                 dir_.File("agent-" + name), "--cpu-milli", "16000", "--memory-mib",
                                 "65536", "--address", "127.0.0.1"},
        dir_.File("agent-" + name + ".log"));
    a->Start(server_->url(), agent_token_);
    ASSERT_TRUE(Eventually([&] {
      const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body;
      for (const Json& n : nodes.value("items", Json::array())) {
        if (n.value("name", "") == name) return n.value("state", "") == "Ready";
      }
      return false;
    })) << ReadFile(dir_.File("agent-" + name + ".log"));
  }

  CliResult Run(const std::string& args) { return Cli(kBinary, args, server_->url(), admin_); }
  int64_t Submit(const Json& spec, const std::string& name = "job") {
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}}, {"spec", spec}};
    HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  std::string Events(int64_t id) {
    std::string out;
    for (const Json& e : JobEvents(*server_, admin_, id)) {
      out += e.value("reason", "") + ": " + e.value("message", "") + "\n";
    }
    return out;
  }
  std::string Output(int64_t id, int generation = 1) {
    return ReadFile(server_->data_dir() + "/logs/" + std::to_string(id) + "/task-0.gen-" +
                    std::to_string(generation) + ".log");
  }
  // The output of the job's run, once it holds `part`: logs reach the server after the run has
  // ended, a little later than its phase.
  std::string OutputWith(int64_t id, const std::string& part, int generation = 1) {
    Eventually([&] { return Has(Output(id, generation), part); });
    return Output(id, generation);
  }
  bool Has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  }
  // Takes fra's only node with a job that never ends, so that what comes next runs at ams.
  int64_t FillFra() {
    const int64_t id =
        Submit({{"gpus", 4}, {"clusters", {"fra"}}, {"command", {"sleep", "600"}}}, "blocker");
    EXPECT_TRUE(Eventually([&] { return Phase(id) == "Running"; })) << Job(id).dump();
    return id;
  }

  // A task that reads its dataset where Meridian put it, tries to write there, and ends.
  static Json Reader(const std::string& dataset) {
    const std::string var =
        "$MERIDIAN_DATASET_" + std::string(dataset == "laion" ? "LAION" : "IMAGENET");
    return {{"gpus", 1},
            {"datasets", {dataset}},
            {"command",
             {"sh", "-c",
              "echo \"at $MERIDIAN_NODE: " + var + "\"; cat " + var + "/train/part-0; touch " +
                  var + "/mine 2>&1 || true"}}};
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents_;
  std::string admin_;
  std::string agent_token_;
};

// With room at both sites, the job runs where its data is, and reads it at its stable path,
// read-only (a bind in the task's own mount namespace).
TEST_F(DataTest, AJobRunsWhereItsDatasetIsAndReadsItReadOnly) {
  StartAgent("ams-1", "ams");  // first: registration order is no tie-break in fra's favour
  StartAgent("fra-1", "fra");
  const int64_t job = Submit(Reader("imagenet"));
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Succeeded"; }, 20)) << Job(job).dump();
  EXPECT_EQ(NodeOf(Job(job)), "fra-1");
  const std::string out = OutputWith(job, "touch:");
  EXPECT_TRUE(Has(out, "imagenet images")) << out;
  EXPECT_TRUE(Has(out, "Read-only file system")) << out;
  EXPECT_TRUE(Has(out, "/data/imagenet")) << "a stable path in its task folder: " << out;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("fra/datasets/imagenet/mine")));
  EXPECT_FALSE(Has(Events(job), "Staging")) << Events(job);
}

// Forced away from its data, a job has the dataset staged into the other site's cache by the
// site's command (progress in its events), reads it there, and the next job finds it cached.
// A third job that reads another dataset evicts the first from the full cache.
TEST_F(DataTest, ForcedAwayItIsStagedAndTheNextJobFindsItCachedUntilEvicted) {
  StartAgent("fra-1", "fra");
  StartAgent("ams-1", "ams");
  FillFra();
  const int64_t first = Submit(Reader("imagenet"), "first");
  ASSERT_TRUE(Eventually([&] { return Phase(first) == "Succeeded"; }, 30))
      << Job(first).dump() << Events(first);
  EXPECT_EQ(NodeOf(Job(first)), "ams-1");
  const std::string staged = dir_.File("ams/cache/imagenet");
  EXPECT_TRUE(std::filesystem::exists(staged + "/train/part-0"));
  const std::string events = Events(first);
  EXPECT_TRUE(Has(events, "Staging: dataset imagenet: copying into cluster ams's cache, 0%"))
      << events;
  EXPECT_TRUE(Has(events, "Staged: dataset imagenet: staged into cluster ams's cache")) << events;
  const std::string out = OutputWith(first, "touch:");
  EXPECT_TRUE(Has(out, "imagenet images")) << out;
  EXPECT_TRUE(Has(out, "touch: cannot touch")) << out;
  EXPECT_FALSE(std::filesystem::exists(staged + "/mine"));
  struct stat cache {};
  ASSERT_EQ(::stat(dir_.File("ams/cache").c_str(), &cache), 0);
  EXPECT_EQ(cache.st_mode & 0777, 0700u) << "no task reaches a copy but through its mount";
  struct stat part {};
  ASSERT_EQ(::stat((staged + "/train/part-0").c_str(), &part), 0);
  EXPECT_EQ(part.st_uid, 0u) << "the copy is root's, whoever owned the source";
  EXPECT_EQ(part.st_mode & 022, 0u);
  EXPECT_TRUE(Has(out, "staging dataset imagenet (attempt 1 of 3)")) << out;

  const int64_t second = Submit(Reader("imagenet"), "second");
  ASSERT_TRUE(Eventually([&] { return Phase(second) == "Succeeded"; }, 20)) << Job(second).dump();
  EXPECT_TRUE(Has(Events(second), "DatasetCached: dataset imagenet: found in cluster ams's cache"))
      << Events(second);
  EXPECT_FALSE(Has(OutputWith(second, "touch:"), "staging dataset")) << Output(second);

  // laion (100 GiB) and imagenet (200) do not fit in 250 GiB together: imagenet goes.
  const int64_t third = Submit(Reader("laion"), "third");
  ASSERT_TRUE(Eventually([&] { return Phase(third) == "Succeeded"; }, 30))
      << Job(third).dump() << Events(third);
  EXPECT_TRUE(Has(OutputWith(third, "touch:"), "laion images")) << Output(third);
  EXPECT_TRUE(Has(Output(third), "evicted " + staged)) << Output(third);
  EXPECT_FALSE(std::filesystem::exists(staged));
  EXPECT_TRUE(std::filesystem::exists(dir_.File("ams/cache/laion/labels.txt")));
  HttpResult estate =
      Http(*server_, "GET", "/api/v1/events?objectKind=DatasetCopy&limit=20", admin_);
  EXPECT_TRUE(Has(estate.text, "evicted to make room: imagenet")) << estate.text;
}

// The two tasks of a gang at the site that lacks its dataset: one node copies it, the other
// waits for that copy rather than make its own.
TEST_F(DataTest, TheNodesOfAGangStageADatasetOnce) {
  StartAgent("fra-1", "fra");
  StartAgent("ams-1", "ams");
  StartAgent("ams-2", "ams");
  FillFra();
  Json spec = Reader("imagenet");
  spec["tasks"] = 2;
  spec["gpus"] = 4;
  const int64_t job = Submit(spec);
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Succeeded"; }, 30)) << Events(job);
  auto task = [&](int i) {
    const std::string path = server_->data_dir() + "/logs/" + std::to_string(job) + "/task-" +
                             std::to_string(i) + ".gen-1.log";
    Eventually([&] { return Has(ReadFile(path), "touch:"); });
    return ReadFile(path);
  };
  const std::string a = task(0), b = task(1);
  EXPECT_TRUE(Has(a, "imagenet images") && Has(b, "imagenet images")) << a << b;
  const int copies =
      Has(a, "staging dataset imagenet (attempt 1") + Has(b, "staging dataset imagenet (attempt 1");
  // The other waited for it ("waiting for another node of the site"), or, started later than a
  // copy takes here, found it made.
  EXPECT_EQ(copies, 1) << a << b;
  const std::string events = Events(job);
  EXPECT_TRUE(Has(events, "Staged: dataset imagenet")) << events;
  EXPECT_TRUE(Has(events, "DatasetCached: dataset imagenet")) << events;
}

// A staging that fails is tried three times, then fails the job, which says why.
TEST_F(DataTest, AStagingThatFailsFailsTheJobWithItsCause) {
  StartAgent("fra-1", "fra");
  StartAgent("ams-1", "ams");
  FillFra();
  const int64_t job = Submit(Reader("lost"));
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Failed"; }, 40))
      << Job(job).dump() << Events(job);
  const Json j = Job(job);
  EXPECT_EQ(j["status"]["cause"], "staging-failed") << j.dump();
  const std::string message = j["status"].value("reason", "") + Events(job);
  EXPECT_TRUE(Has(
      message, "staging dataset lost from " + dir_.File("fra/datasets/lost") + " failed 3 times"))
      << message;
  EXPECT_TRUE(Has(Events(job), "StagingFailed")) << Events(job);
  EXPECT_TRUE(Has(OutputWith(job, "attempt 3 of 3"), "attempt 3 of 3")) << Output(job);
  EXPECT_FALSE(Has(Output(job), "lost images"));
}

// A checkpoint written before its job was preempted is there when the job runs again on another
// node of the site; the folder is reached only through the task's own mount.
TEST_F(DataTest, ACheckpointOutlivesAPreemptionOntoAnotherNode) {
  StartAgent("fra-1", "fra");
  const int64_t job = Submit(
      {{"gpus", 4},
       {"checkpoint", true},
       {"gracePeriod", 2},
       {"command",
        {"sh", "-c",
         "f=$MERIDIAN_CHECKPOINT_DIR/step; if [ -f $f ]; then echo \"resumed from $(cat $f) on "
         "$MERIDIAN_NODE\"; exit 0; fi; echo 42 > $f; echo \"wrote on $MERIDIAN_NODE\"; "
         "while true; do sleep 0.1; done"}}});
  ASSERT_TRUE(Eventually([&] { return Has(Output(job), "wrote on fra-1"); }, 20))
      << Job(job).dump();
  const std::string folder = dir_.File("fra/checkpoints/research/" + std::to_string(job));
  struct stat st {};
  ASSERT_EQ(::stat(folder.c_str(), &st), 0);
  EXPECT_NE(st.st_uid, 0u) << "the task's uid's";
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // The project's folder is root's alone: a task of any uid reaches a job's folder only through
  // its own mount.
  ASSERT_EQ(::stat(dir_.File("fra/checkpoints/research").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A job of a higher class takes fra-1; the checkpointing one goes back to the queue and runs
  // on fra-2 once it joins.
  const int64_t high = Submit({{"gpus", 4},
                               {"priorityClass", "high"},
                               {"clusters", {"fra"}},
                               {"command", {"sleep", "600"}}},
                              "high");
  ASSERT_TRUE(Eventually([&] { return Phase(high) == "Running"; }, 20)) << Events(job);
  EXPECT_TRUE(Has(Events(job), "Preempted")) << Events(job);
  StartAgent("fra-2", "fra");
  ASSERT_TRUE(Eventually([&] { return Phase(job) == "Succeeded"; }, 30))
      << Job(job).dump() << Events(job);
  EXPECT_EQ(NodeOf(Job(job)), "fra-2");
  EXPECT_TRUE(Has(OutputWith(job, "resumed", 2), "resumed from 42 on fra-2")) << Output(job, 2);
}

// A copy pinned in a cache stays there: the cache goes over its cap rather than lose it.
TEST_F(DataTest, APinnedCopyIsNeverEvicted) {
  std::string estate = ReadFile(dir_.File("estate.yaml"));
  const std::string imagenet = "  sizeGib: 200\n";
  estate.replace(estate.find(imagenet), imagenet.size(), imagenet + "  pinnedIn: [ams]\n");
  CliResult applied = Run("apply -f " + WriteTestFile(dir_.File("pinned.yaml"), estate));
  ASSERT_EQ(applied.code, 0) << applied.output;
  StartAgent("fra-1", "fra");
  StartAgent("ams-1", "ams");
  FillFra();
  const int64_t first = Submit(Reader("imagenet"), "first");
  ASSERT_TRUE(Eventually([&] { return Phase(first) == "Succeeded"; }, 30)) << Events(first);
  const int64_t second = Submit(Reader("laion"), "second");
  ASSERT_TRUE(Eventually([&] { return Phase(second) == "Succeeded"; }, 30)) << Events(second);
  EXPECT_TRUE(std::filesystem::exists(dir_.File("ams/cache/imagenet/labels.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir_.File("ams/cache/laion/labels.txt")));
  EXPECT_FALSE(Has(OutputWith(second, "touch:"), "evicted")) << Output(second);
}

// GPUs that wait for a dataset to be copied are not idle: an IdlePolicy that would reclaim the
// job within about five seconds leaves it alone through a staging of twelve, and the task runs.
TEST_F(DataTest, AJobWaitingForItsDataIsNotReclaimedAsIdle) {
  std::string estate = ReadFile(dir_.File("estate.yaml"));
  const std::string pause = "sleep 1; cp";
  estate.replace(estate.find(pause), pause.size(), "sleep 12; cp");
  estate +=
      "\n---\nkind: IdlePolicy\nmetadata: {name: idle}\nspec: {project: research, action: "
      "reclaim, jobTypes: [batch], threshold: 0.05, idleFor: 1, grace: 1}\n";
  CliResult applied = Run("apply -f " + WriteTestFile(dir_.File("idle.yaml"), estate));
  ASSERT_EQ(applied.code, 0) << applied.output;
  StartAgent("fra-1", "fra");
  StartAgent("ams-1", "ams");
  FillFra();
  Json spec = Reader("imagenet");
  spec["simulateUtilization"] = 0;  // its GPUs show nothing, staging or not
  const int64_t job = Submit(spec);
  ASSERT_TRUE(Eventually(
      [&] { return Phase(job) != "Pending" && Phase(job) != "Placed" && Phase(job) != "Running"; },
      30))
      << Events(job);
  EXPECT_EQ(Phase(job), "Succeeded") << Events(job);
  EXPECT_FALSE(Has(Events(job), "Reclaimed")) << Events(job);
  EXPECT_TRUE(Has(OutputWith(job, "touch:"), "imagenet images")) << Output(job);
}

// A dataset that does not exist is refused by name, before the job waits for anything; those
// that do are listed.
TEST_F(DataTest, ADatasetThatDoesNotExistIsRefusedByName) {
  CliResult listed = Run("get datasets");
  ASSERT_EQ(listed.code, 0) << listed.output;
  for (const char* name : {"imagenet", "laion", "lost"}) {
    EXPECT_TRUE(Has(listed.output, name)) << listed.output;
  }
  EXPECT_TRUE(Has(listed.output, "200")) << "imagenet's size: " << listed.output;
  HttpResult r = Http(*server_, "POST", "/api/v1/jobs", admin_,
                      Json{{"metadata", {{"name", "j"}, {"project", "research"}}},
                           {"spec", {{"command", {"true"}}, {"datasets", {"coco"}}}}}
                          .dump());
  EXPECT_EQ(r.status, 400) << r.text;
  EXPECT_TRUE(Has(r.text, "spec.datasets[0]: Dataset \\\"coco\\\" does not exist")) << r.text;
}

}  // namespace
}  // namespace meridian::testing
