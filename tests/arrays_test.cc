// Job arrays and dependencies through a real `meridian server` process: submitted over HTTP and
// through the real CLI, listed as one line, limited by %N under the scheduler, cancelled whole
// or by element, and dependencies refused at submission when they name what the caller cannot
// see. The pool's nodes are declared (no agent runs them): placed jobs stay Placed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "base/testing/temp_dir.h"
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
metadata: {name: vision}
spec: {team: lab}
---
kind: Project
metadata: {name: research}
spec: {team: lab}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 2, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
)";

class ArraysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    CliResult r = Run("apply -f " + WriteTestFile(dir_.File("estate.yaml"), kEstate) + " -m e");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  CliResult Run(const std::string& args, const std::string& token = "") {
    return Cli(kBinary, args, server_->url(), token.empty() ? admin_ : token);
  }
  HttpResult SubmitSpec(const std::string& project, Json spec, const std::string& token = "") {
    if (!spec.contains("command")) spec["command"] = {"true"};
    Json job = {{"metadata", {{"name", "job"}, {"project", project}}}, {"spec", spec}};
    return Http(*server_, "POST", "/api/v1/jobs", token.empty() ? admin_ : token, job.dump());
  }
  Json Array(int64_t id) {
    return Http(*server_, "GET", "/api/v1/jobs/" + std::to_string(id), admin_)
        .body["status"]["array"];
  }
  int64_t Count(int64_t id, const std::string& phase) {
    return Array(id)["phases"].value(phase, int64_t{0});
  }
  std::string User(const std::string& name, const Json& role) {
    Json body = {{"spec", {{"roles", Json::array({role})}}}};
    EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/" + name, admin_, body.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_,
                        Json{{"user", name}, {"description", "test"}}.dump());
    return t.body.value("token", "");
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
};

// 50,000 elements in one request and one transaction; the figure goes to the test's log. The
// listing shows the array as one line with its counts, and %50 holds under the scheduler though
// the nodes have room for more (256 cores, one each).
TEST_F(ArraysTest, FiftyThousandElementsInOneRequestListedAsOneLine) {
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult r = SubmitSpec("vision", {{"cpuMilli", 1000}, {"array", "0-49999%50"}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.status, 201) << r.text;
  std::printf(
      "[figure] POST /api/v1/jobs with spec.array 0-49999%%50: 50000 elements accepted "
      "in %.3f s\n",
      seconds);
  const int64_t id = r.body["id"].get<int64_t>();
  EXPECT_EQ(r.body["status"]["array"]["size"], 50000);
  ASSERT_TRUE(Eventually([&] { return Count(id, "Placed") == 50; }, 60)) << Array(id).dump();
  std::printf(
      "[figure] submission to 50 elements placed (the controller has taken in all "
      "50000): %.3f s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(Count(id, "Pending"), 49950);
  // Some rounds later (element 51 has been told why it waits), still 50.
  ASSERT_TRUE(Eventually(
      [&] {
        return Http(*server_, "GET", "/api/v1/jobs/" + std::to_string(id) + "?index=51", admin_)
                   .body["status"]
                   .value("reason", "")
                   .find("limit %50") != std::string::npos;
      },
      30));
  EXPECT_EQ(Count(id, "Placed"), 50);
  Json list = Http(*server_, "GET", "/api/v1/jobs", admin_).body;
  ASSERT_EQ(list["items"].size(), 1u) << "one line for the array";
  EXPECT_EQ(list["items"][0]["status"]["array"]["phases"]["Pending"], 49950);
  // With a phase, the elements in it are listed one by one.
  Json placed = Http(*server_, "GET", "/api/v1/jobs?phase=Placed&limit=1000", admin_).body;
  EXPECT_EQ(placed["items"].size(), 50u);
  CliResult table = Run("get jobs");
  EXPECT_NE(table.output.find("50 Placed, 49950 Pending"), std::string::npos) << table.output;
  // One element alone, then the whole array.
  CliResult one = Run("cancel " + std::to_string(id) + "_7");
  ASSERT_EQ(one.code, 0) << one.output;
  // Element 7 held resources: it stops first (its nodes run no agent: at once).
  ASSERT_TRUE(Eventually([&] { return Count(id, "Cancelled") == 1; }, 30)) << Array(id).dump();
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs/" + std::to_string(id) + "?index=7", admin_)
                .body["status"]["phase"],
            "Cancelled");
  const auto t1 = std::chrono::steady_clock::now();
  CliResult all = Run("cancel " + std::to_string(id));
  std::printf("[figure] cancel of the 50000-element array: %.3f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  ASSERT_EQ(all.code, 0) << all.output;
  EXPECT_NE(all.output.find("49999 jobs"), std::string::npos) << all.output;
  ASSERT_TRUE(Eventually([&] { return Count(id, "Cancelled") == 50000; }, 60)) << Array(id).dump();
}

// The CLI's Slurm flags; describe shows the elements; a dependency waits and says on what.
TEST_F(ArraysTest, SlurmFlagsThroughTheCli) {
  CliResult sub = Run("submit -p vision --gpus 8 --array 0-3%1 --name sweep -- true");
  ASSERT_EQ(sub.code, 0) << sub.output;
  EXPECT_NE(sub.output.find("array 1 of 4 jobs submitted"), std::string::npos) << sub.output;
  CliResult dep = Run("submit -p vision --gpus 1 --dependency afterok:1,afterany:2 -- true");
  ASSERT_EQ(dep.code, 0) << dep.output;
  ASSERT_TRUE(Eventually([&] {
    return Run("describe job 5").output.find("waiting for dependency afterok:1") !=
           std::string::npos;
  })) << Run("describe job 5").output;
  CliResult d = Run("describe job 1 --elements");
  EXPECT_NE(d.output.find("Elements:"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("1_3"), std::string::npos) << d.output;
  CliResult e = Run("describe job 1_2");
  EXPECT_NE(e.output.find("element 2"), std::string::npos) << e.output;
  CliResult missing = Run("get jobs 1_9");
  EXPECT_EQ(missing.code, 5) << missing.output;
  // A file's spec.array and spec.dependencies.
  const std::string file = WriteTestFile(dir_.File("job.yaml"), R"(kind: Job
metadata: {name: post, project: vision}
spec:
  command: ["true"]
  array: "0-9:3"
  dependencies: ["afterany:5"]
)");
  CliResult f = Run("submit -f " + file);
  ASSERT_EQ(f.code, 0) << f.output;
  EXPECT_NE(f.output.find("of 4 jobs"), std::string::npos) << f.output;
}

// A dependency on a job that does not exist, or that the caller cannot see, is refused at
// submission naming the entry; a bad array names spec.array.
TEST_F(ArraysTest, DependenciesOnWhatTheCallerCannotSeeAreRefused) {
  const std::string alice = User("alice", {{"role", "member"}, {"project", "vision"}});
  HttpResult hidden = SubmitSpec("research", {{"gpus", 1}});
  ASSERT_EQ(hidden.status, 201) << hidden.text;
  const std::string other = std::to_string(hidden.body["id"].get<int64_t>());
  // The second entry names a job of a project alice cannot read; then one that does not exist.
  const std::vector<std::pair<Json, std::string>> refused = {
      {Json::array({"afterany:" + other, "afterok:" + other}), "spec.dependencies[0]"},
      {Json::array({"afterok:999"}), "spec.dependencies[0]"},
  };
  for (const auto& [deps, field] : refused) {
    HttpResult r = SubmitSpec("vision", {{"dependencies", deps}}, alice);
    EXPECT_EQ(r.status, 400) << r.text;
    EXPECT_EQ(r.body["error"].value("field", ""), field) << r.text;
    EXPECT_NE(r.text.find("not found"), std::string::npos) << r.text;
  }
  HttpResult seen = SubmitSpec("vision", {{"gpus", 1}}, alice);
  ASSERT_EQ(seen.status, 201);
  const std::string mine = std::to_string(seen.body["id"].get<int64_t>());
  HttpResult second =
      SubmitSpec("vision", {{"dependencies", {"afterany:" + mine, "afterok:" + other}}}, alice);
  EXPECT_EQ(second.body["error"].value("field", ""), "spec.dependencies[1]") << second.text;
  HttpResult bad = SubmitSpec("vision", {{"array", "0-5,3"}}, alice);
  EXPECT_EQ(bad.status, 400) << bad.text;
  EXPECT_NE(bad.text.find("spec.array"), std::string::npos) << bad.text;
  HttpResult corr = SubmitSpec("vision", {{"dependencies", {"aftercorr:" + other}}});
  EXPECT_EQ(corr.status, 400) << corr.text;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs", admin_).body["items"].size(), 2u)
      << "nothing refused was stored";
}

}  // namespace
}  // namespace meridian::testing
