// Integration tests of the control plane: a real `meridian server` process on a loopback port
// with a temporary data dir, driven through plain HTTP and through the real CLI.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "store/sqlite/sqlite_store.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

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
metadata: {name: research}
spec: {team: lab}
---
kind: PriorityClass
metadata: {name: high}
spec: {value: 100}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west, prices: {H100-80GB: 2.0}}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 2, gpusPerNode: 8, gpuModel: H100-80GB, cpuMilli: 128000}
---
kind: Quota
metadata: {name: research}
spec: {project: research, guaranteedGpus: 4, limitGpus: 8}
)";

// Every path of docs/openapi.yaml, its parameters filled in ({id}: `job`, {index}: 0), except
// the watch stream (30 s; WatchStreamsEventsAsTheyHappen has it); a `{kind}` path once for each
// kind the document's enum of kinds lists (the plural the API serves).
std::vector<std::string> DocumentedPaths(const std::string& job) {
  std::ifstream in(std::string(MERIDIAN_SOURCE_DIR) + "/docs/openapi.yaml");
  std::string line;
  std::vector<std::string> templates, kinds;
  bool in_paths = false;
  while (std::getline(in, line)) {
    if (line == "paths:") in_paths = true;
    if (line == "components:") in_paths = false;
    if (in_paths && line.size() > 3 && line.rfind("  /", 0) == 0 && line.back() == ':') {
      templates.push_back(line.substr(2, line.size() - 3));
    }
    const std::string kEnum = "enum: [organizations";
    if (size_t at = line.find(kEnum); at != std::string::npos && kinds.empty()) {
      std::stringstream list(line.substr(at + 7, line.find(']', at) - at - 7));
      for (std::string k; std::getline(list, k, ',');) {
        kinds.push_back(k.substr(k.find_first_not_of(' ')));
      }
    }
  }
  EXPECT_GE(kinds.size(), 8u) << "the enum of kinds in docs/openapi.yaml";
  std::vector<std::string> paths;
  for (const std::string& t : templates) {
    if (t == "/api/v1/watch") continue;
    const bool of_kinds = t.find("{kind}") != std::string::npos;
    for (const std::string& kind : of_kinds ? kinds : std::vector<std::string>{""}) {
      std::string p = t;
      for (const auto& [param, value] :
           std::vector<std::pair<std::string, std::string>>{{"{id}", job},
                                                            {"{number}", "1"},
                                                            {"{kind}", kind},
                                                            {"{name}", "x"},
                                                            {"{index}", "0"}}) {
        if (size_t at = p.find(param); at != std::string::npos) p.replace(at, param.size(), value);
      }
      paths.push_back(p);
    }
  }
  return paths;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("data"));
    ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
    admin_ = server_->admin_token();
    ASSERT_FALSE(admin_.empty());
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    return WriteTestFile(dir_.File(name), text);
  }
  CliResult Run(const std::string& args, const std::string& token = "") {
    return Cli(kBinary, args, server_->url(), token.empty() ? admin_ : token);
  }
  void ApplyEstate() {
    CliResult r = Run("apply -f " + WriteFile("estate.yaml", kEstate) + " -m first");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  HttpResult Submit(const std::string& project, int gpus, const std::string& token = "") {
    return SubmitSpec(project, {{"gpus", gpus}, {"runtimeEstimate", 3600}}, token);
  }
  // A job with the spec given; one that names neither a command nor an image runs `true`.
  HttpResult SubmitSpec(const std::string& project, Json spec, const std::string& token = "") {
    if (!spec.contains("command") && !spec.contains("image")) spec["command"] = {"true"};
    Json job = {{"metadata", {{"name", "job"}, {"project", project}}}, {"spec", spec}};
    return Http(*server_, "POST", "/api/v1/jobs", token.empty() ? admin_ : token, job.dump());
  }
  Json Job(int64_t id) { return GetJob(*server_, admin_, id); }
  // The node of a placed job's first task ("" until it is placed).
  std::string NodeOf(int64_t id) {
    const Json j = Job(id);
    if (j["status"].value("phase", "") != "Placed") return "";
    return j["status"]["allocation"][0].value("node", "");
  }
  std::string Phase(int64_t id) { return JobPhase(*server_, admin_, id); }
  // Creates a user with one role and returns a token for it.
  std::string User(const std::string& name, const Json& role) {
    Json body = {{"spec", {{"roles", Json::array({role})}}}};
    EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/" + name, admin_, body.dump()).status, 201);
    HttpResult t = Http(*server_, "POST", "/api/v1/tokens", admin_,
                        Json{{"user", name}, {"description", "test"}}.dump());
    EXPECT_EQ(t.status, 201) << t.text;
    return t.body.value("token", "");
  }

  base::testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::string admin_;
};

TEST_F(ServerTest, FirstStartWritesAnAdminTokenOnlyItsOwnerCanRead) {
  struct stat st {};
  ASSERT_EQ(stat((server_->data_dir() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  HttpResult me = Http(*server_, "GET", "/api/v1/whoami", admin_);
  EXPECT_EQ(me.status, 200);
  EXPECT_EQ(me.body["user"], "admin");
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/whoami", "").status, 401);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/whoami", "mrd_0000000000000000_" + std::string(48, '0'))
                .status,
            401);
  // A second start keeps the same admin and writes no new token.
  server_->Stop();
  const std::string before = server_->admin_token();
  ASSERT_TRUE(server_->Start());
  EXPECT_EQ(server_->admin_token(), before);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/whoami", admin_).status, 200);
}

// A client that lost the answer to a submission sends it again with the same Idempotency-Key
// and gets the job it made; the key is the user's own, survives a restart, and names one
// submission only.
TEST_F(ServerTest, ASubmissionSentAgainWithItsIdempotencyKeyMakesOneJob) {
  ApplyEstate();
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  auto post = [&](const std::string& token, const std::string& name, const std::string& key) {
    Json job = {{"metadata", {{"name", name}, {"project", "research"}}},
                {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
    return Http(*server_, "POST", "/api/v1/jobs", token, job.dump(), {{"Idempotency-Key", key}});
  };
  HttpResult first = post(admin_, "train", "k-1");
  ASSERT_EQ(first.status, 201) << first.text;
  const int64_t id = first.body.value("id", int64_t{0});
  HttpResult again = post(admin_, "train", "k-1");
  ASSERT_EQ(again.status, 200) << again.text;
  EXPECT_EQ(again.body.value("id", int64_t{0}), id);
  // The same key from another user is another submission.
  HttpResult bobs = post(bob, "train", "k-1");
  ASSERT_EQ(bobs.status, 201) << bobs.text;
  EXPECT_NE(bobs.body.value("id", int64_t{0}), id);
  // Used for another submission: refused, naming the job it made.
  HttpResult other = post(admin_, "evaluate", "k-1");
  EXPECT_EQ(other.status, 409) << other.text;
  EXPECT_NE(other.text.find("job " + std::to_string(id)), std::string::npos) << other.text;
  EXPECT_EQ(other.body["error"].value("field", ""), "Idempotency-Key");
  EXPECT_EQ(post(admin_, "train", "has space").status, 400);
  EXPECT_EQ(post(admin_, "train", std::string(256, 'k')).status, 400);
  // Kept across a restart (it is in the store, written with the job).
  server_->Stop(SIGKILL);
  ASSERT_TRUE(server_->Start());
  HttpResult after = post(admin_, "train", "k-1");
  ASSERT_EQ(after.status, 200) << after.text;
  EXPECT_EQ(after.body.value("id", int64_t{0}), id);
  HttpResult listed = Http(*server_, "GET", "/api/v1/jobs?limit=100", admin_);
  EXPECT_EQ(listed.body["items"].size(), 2u) << "one job each for admin and bob";
  // The CLI sends a key of its own with each submission.
  CliResult cli = Run("submit --project research --gpus 1 -- true");
  EXPECT_EQ(cli.code, 0) << cli.output;
}

TEST_F(ServerTest, ASecondServerOnTheSameDataDirExitsAtOnce) {
  ApplyEstate();
  // It must exit by itself, at once: RunToExit kills it after 10 s and reports code -1.
  CliResult second =
      RunToExit(kBinary, {"server", "--data-dir", server_->data_dir(), "--listen", "127.0.0.1:0"},
                dir_.File("second.log"), 10);
  EXPECT_EQ(second.code, 1) << second.output;
  // The lock file names the holder's pid, and so does the message.
  const std::string holder = ReadFile(server_->data_dir() + "/LOCK");
  ASSERT_FALSE(holder.empty());
  EXPECT_NE(second.output.find("--data-dir " + server_->data_dir() +
                               " is in use by another meridian server (pid " + holder + ")"),
            std::string::npos)
      << second.output;
  EXPECT_EQ(second.output.find("listening"), std::string::npos) << second.output;
  // The first server serves on, its state untouched; once it stops, the dir is free again.
  EXPECT_EQ(Http(*server_, "GET", "/healthz", "").status, 200);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/vision", admin_).status, 200);
  server_->Stop();
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/vision", admin_).status, 200);
}

TEST_F(ServerTest, PlanApplyDriftAndRollback) {
  const std::string file = WriteFile("estate.yaml", kEstate);
  CliResult plan = Run("plan -f " + file);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("+ Organization acme"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("Plan: 9 to create, 0 to update, 0 to delete."), std::string::npos)
      << plan.output;
  ApplyEstate();
  EXPECT_NE(Run("plan -f " + file).output.find("No changes"), std::string::npos);
  // Drift through the API shows in the next plan, and the next apply undoes it.
  Json project = {{"metadata", {{"name", "vision"}}},
                  {"spec", {{"team", "product"}, {"weight", 3}}}};
  HttpResult put = Http(*server_, "PUT", "/api/v1/projects/vision", admin_, project.dump());
  ASSERT_EQ(put.status, 200) << put.text;
  plan = Run("plan -f " + file);
  EXPECT_NE(plan.output.find("~ Project vision: weight (changed through the API since revision 1)"),
            std::string::npos)
      << plan.output;
  // Revision 2 removes the research project and its quota; rolling back to 1 restores them.
  std::string smaller = kEstate;
  smaller = smaller.substr(0, smaller.find("---\nkind: Project\nmetadata: {name: research}")) +
            smaller.substr(smaller.find("---\nkind: PriorityClass"));
  smaller = smaller.substr(0, smaller.find("---\nkind: Quota"));
  CliResult applied = Run("apply --prune -f " + WriteFile("smaller.yaml", smaller) + " -m smaller");
  ASSERT_EQ(applied.code, 0) << applied.output;
  EXPECT_NE(applied.output.find("- Project research"), std::string::npos) << applied.output;
  // The drift is named against the revision it departed from, not the one being made.
  EXPECT_NE(
      applied.output.find("~ Project vision: weight (changed through the API since revision 1)"),
      std::string::npos)
      << applied.output;
  EXPECT_NE(applied.output.find("Applied as revision 2"), std::string::npos) << applied.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/research", admin_).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/vision", admin_).body["spec"]["weight"], 1.0);
  CliResult back = Run("rollback --to 1");
  ASSERT_EQ(back.code, 0) << back.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/research", admin_).status, 200);
  CliResult history = Run("history -o json");
  Json h = Json::parse(history.output);
  ASSERT_EQ(h["items"].size(), 3u) << history.output;
  EXPECT_EQ(h["items"][0]["message"], "rollback to revision 1");
  EXPECT_EQ(h["items"][0]["author"], "admin");
  EXPECT_NE(Run("plan -f " + file).output.find("No changes"), std::string::npos);
}

// apply -f applies what the files hold and deletes nothing, as kubectl does; --prune makes a
// folder the whole desired state. plan shows each changed field's old and new value.
TEST_F(ServerTest, ApplyDeletesOnlyWithPrune) {
  ApplyEstate();
  const std::string one = WriteFile("one.yaml",
                                    "kind: Project\nmetadata: {name: vision}\n"
                                    "spec: {team: lab, weight: 2}\n");
  CliResult plan = Run("plan -f " + one);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("~ Project vision: team, weight\n"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("      team: \"product\" -> \"lab\"\n"), std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("      weight: 1.0 -> 2.0\n"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("Plan: 0 to create, 1 to update, 0 to delete."), std::string::npos)
      << plan.output;
  Json structured = Json::parse(Run("plan -o json -f " + one).output);
  ASSERT_EQ(structured["changes"].size(), 1u) << structured.dump();
  EXPECT_EQ(structured["changes"][0]["fieldChanges"][0],
            (Json{{"field", "team"}, {"before", "product"}, {"after", "lab"}}));
  // A one-document apply changes that document and deletes none of the other eight.
  CliResult applied = Run("apply -f " + one + " -m one");
  ASSERT_EQ(applied.code, 0) << applied.output;
  EXPECT_NE(applied.output.find("Plan: 0 to create, 1 to update, 0 to delete."), std::string::npos)
      << applied.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/vision", admin_).body["spec"]["team"], "lab");
  for (const char* path : {"/api/v1/projects/research", "/api/v1/quotas/research",
                           "/api/v1/clusters/onprem", "/api/v1/nodepools/h100"}) {
    EXPECT_EQ(Http(*server_, "GET", path, admin_).status, 200) << path;
  }
  // A document may refer to what lives already without repeating it; a dangling reference
  // is still refused, with its file and line.
  const std::string extra = WriteFile("extra.yaml",
                                      "kind: Project\nmetadata: {name: speech}\n"
                                      "spec: {team: lab}\n---\n"
                                      "kind: Project\nmetadata: {name: audio}\n"
                                      "spec: {team: nowhere}\n");
  CliResult bad = Run("apply -f " + extra);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("extra.yaml:5:0: spec.team: Team \"nowhere\" does not exist"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/speech", admin_).status, 404);
  // The revision holds the whole declared state: rolling back to it restores the estate with
  // vision in lab, not vision alone.
  CliResult back = Run("rollback --to 2");
  EXPECT_EQ(back.code, 0) << back.output;
  EXPECT_NE(back.output.find("No changes"), std::string::npos) << back.output;
  // --prune: the folder is the whole desired state, and what it lacks is deleted.
  const std::string dir = dir_.File("desired");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/estate.yaml") << kEstate;
  std::string smaller = kEstate;
  smaller = smaller.substr(0, smaller.find("---\nkind: Quota"));
  std::ofstream(dir + "/estate.yaml", std::ios::trunc) << smaller;
  plan = Run("plan --prune -f " + dir);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("- Quota research"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("Plan: 0 to create, 1 to update, 1 to delete."), std::string::npos)
      << plan.output;
  // Without --prune the same folder deletes nothing.
  EXPECT_NE(Run("plan -f " + dir).output.find("Plan: 0 to create, 1 to update, 0 to delete."),
            std::string::npos);
  applied = Run("apply --prune -f " + dir + " -m pruned");
  ASSERT_EQ(applied.code, 0) << applied.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/quotas/research", admin_).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/vision", admin_).body["spec"]["team"],
            "product");
}

// A cluster named in the estate, its pool, and the estate without them.
const char* kCloud = R"(---
kind: Cluster
metadata: {name: cloud}
spec: {type: cloud, region: eu-west}
---
kind: NodePool
metadata: {name: a100}
spec: {cluster: cloud, gpusPerNode: 8, gpuModel: A100-80GB}
)";

// Registers a node as its agent would (an admin may), with one GPU.
HttpResult RegisterNode(const ServerProcess& s, const std::string& token, const std::string& name,
                        const std::string& cluster, const std::string& pool) {
  Json body = {{"node", name},
               {"cluster", cluster},
               {"pool", pool},
               {"simulated", true},
               {"gpus", {{{"uuid", "GPU-" + name}, {"model", "A100-80GB"}}}}};
  return Http(s, "POST", "/api/v1/agents/register", token, body.dump());
}

// A change that would orphan live objects (nodes of a cluster or pool, active jobs of a
// project) is refused by plan, apply, rollback and DELETE alike, naming them, and applies
// nothing.
TEST_F(ServerTest, ChangesThatWouldOrphanLiveObjectsAreRefused) {
  ApplyEstate();  // revision 1: no cloud
  CliResult more = Run("apply -f " + WriteFile("cloud.yaml", kCloud) + " -m cloud");
  ASSERT_EQ(more.code, 0) << more.output;
  for (const char* node : {"cloud-a100-0", "cloud-a100-1"}) {
    HttpResult r = RegisterNode(*server_, admin_, node, "cloud", "a100");
    ASSERT_EQ(r.status, 200) << r.text;
  }
  const std::string nodes_message =
      "cluster \"cloud\": 2 registered nodes still belong to it (cloud-a100-0, cloud-a100-1); "
      "delete or drain them first";
  // rollback to revision 1 would delete the cloud cluster and its pool.
  CliResult back = Run("rollback --to 1");
  EXPECT_EQ(back.code, 6) << back.output;
  EXPECT_NE(back.output.find(nodes_message), std::string::npos) << back.output;
  EXPECT_NE(back.output.find("node pool \"a100\": 2 registered nodes still belong to it"),
            std::string::npos)
      << back.output;
  // plan --prune and apply --prune of the estate without cloud: the same.
  const std::string file = WriteFile("estate.yaml", kEstate);
  CliResult plan = Run("plan --prune -f " + file);
  EXPECT_EQ(plan.code, 6) << plan.output;
  EXPECT_NE(plan.output.find(nodes_message), std::string::npos) << plan.output;
  CliResult apply = Run("apply --prune -f " + file);
  EXPECT_EQ(apply.code, 6) << apply.output;
  HttpResult del = Http(*server_, "DELETE", "/api/v1/clusters/cloud", admin_);
  EXPECT_EQ(del.status, 409) << del.text;
  EXPECT_EQ(del.body["error"].value("message", ""),
            "refused: the change would orphan live objects: " + nodes_message)
      << del.text;
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/nodepools/a100", admin_).status, 409);
  // A project with a job that has not ended: refused; once the job is cancelled, allowed.
  HttpResult job = Submit("research", 1);
  ASSERT_EQ(job.status, 201) << job.text;
  const std::string id = std::to_string(job.body["id"].get<int64_t>());
  HttpResult project = Http(*server_, "DELETE", "/api/v1/projects/research", admin_);
  EXPECT_EQ(project.status, 409) << project.text;
  EXPECT_NE(project.text.find("project \\\"research\\\": 1 active job (" + id +
                              "); cancel it or let it finish first"),
            std::string::npos)
      << project.text;
  // Nothing was applied by any of it.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/clusters/cloud", admin_).status, 200);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/nodepools/a100", admin_).status, 200);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/config/revisions", admin_).body["items"].size(), 2u);
  ASSERT_EQ(Http(*server_, "POST", "/api/v1/jobs/" + id + "/cancel", admin_).status, 200);
  ASSERT_TRUE(Eventually([&] { return Phase(job.body["id"]) == "Cancelled"; })) << Phase(1);
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/quotas/research", admin_).status, 200);
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/projects/research", admin_).status, 200);
}

// A bad object never stops scheduling of the rest: a node of a cluster that does not exist
// is left out, jobs run on the other clusters, and /healthz and /metrics say what and why.
TEST_F(ServerTest, ABadObjectIsReportedAndTheRestIsScheduled) {
  ApplyEstate();
  HttpResult healthy = Http(*server_, "GET", "/healthz", "");
  EXPECT_EQ(healthy.status, 200);
  EXPECT_EQ(healthy.body["status"], "ok") << healthy.text;
  EXPECT_TRUE(healthy.body["problems"].empty()) << healthy.text;
  // What no API call accepts any more, written into the stopped server's store: a node of a
  // cluster that is gone, a pool of it, and a node with GPUs of two models.
  server_->Stop();
  {
    auto store = store::SqliteStore::Open(server_->data_dir() + "/meridian.db");
    ASSERT_TRUE(store.ok()) << store.status().message();
    base::Status s = (*store)->Write([](store::Tx& tx) {
      store::Object node{"Node",
                         "orphan-0",
                         Json{{"cluster", "gone"},
                              {"pool", ""},
                              {"address", ""},
                              {"cpuMilli", 64000},
                              {"memoryMib", 262144},
                              {"gpus", {{{"uuid", "GPU-orphan"}, {"model", "H100-80GB"}}}}},
                         0,
                         0,
                         "test"};
      if (auto v = tx.PutObject(node, store::kAnyVersion); !v.ok()) return v.status();
      store::Object pool{
          "NodePool",
          "gone-pool",
          Json{{"cluster", "gone"}, {"nodes", 1}, {"gpusPerNode", 8}, {"gpuModel", "H100-80GB"}},
          0,
          0,
          "test"};
      if (auto v = tx.PutObject(pool, store::kAnyVersion); !v.ok()) return v.status();
      store::Object mixed = node;
      mixed.name = "mixed-0";
      mixed.spec["cluster"] = "onprem";
      mixed.spec["gpus"] = {{{"uuid", "GPU-m0"}, {"model", "H100-80GB"}},
                            {{"uuid", "GPU-m1"}, {"model", "A100-80GB"}}};
      return tx.PutObject(mixed, store::kAnyVersion).status();
    });
    ASSERT_TRUE(s.ok()) << s.message();
  }
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  HttpResult job = Submit("vision", 8);
  ASSERT_EQ(job.status, 201) << job.text;
  ASSERT_TRUE(Eventually([&] { return Phase(job.body["id"]) == "Placed"; }))
      << Phase(job.body["id"]) << "\n"
      << ReadFile(dir_.File("data.log"));
  Json allocation =
      Http(*server_, "GET", "/api/v1/jobs/" + std::to_string(job.body["id"].get<int64_t>()), admin_)
          .body["status"]["allocation"];
  ASSERT_EQ(allocation.size(), 1u) << allocation.dump();
  EXPECT_EQ(allocation[0]["cluster"], "onprem") << allocation.dump();
  HttpResult health = Http(*server_, "GET", "/healthz", "");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body["status"], "degraded") << health.text;
  const Json want_node = {
      {"kind", "Node"},
      {"name", "orphan-0"},
      {"message", "cluster \"gone\" does not exist: the node is not scheduled"}};
  const Json want_pool = {
      {"kind", "NodePool"},
      {"name", "gone-pool"},
      {"message", "cluster \"gone\" does not exist: the pool's nodes are not scheduled"}};
  // A node the scheduler's snapshot refuses (GPUs of two models) is left out too, alone.
  const Json want_mixed = {
      {"kind", "Node"},
      {"name", "mixed-0"},
      {"message", "gpus[1].model: a node holds GPUs of one model: not scheduled"}};
  EXPECT_EQ(health.body["problems"], (Json{want_node, want_pool, want_mixed})) << health.text;
  EXPECT_NE(Http(*server_, "GET", "/metrics", admin_).text.find("\nmeridian_config_problems 3\n"),
            std::string::npos);
  // The node is left out of /nodes, the 16 GPUs of onprem are all there.
  Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body["items"];
  EXPECT_EQ(nodes.size(), 2u) << nodes.dump();
}

TEST_F(ServerTest, InvalidDocumentsApplyNothingAndSayWhere) {
  const std::string bad = std::string(kEstate) +
                          "---\nkind: NodePool\nmetadata: {name: broken}\nspec:\n  cluster: "
                          "onprem\n  gpusPerNode: lots\n";
  CliResult r = Run("apply -f " + WriteFile("bad.yaml", bad));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml:40:3: spec.gpusPerNode: must be an integer"), std::string::npos)
      << r.output;
  // Nothing of the valid documents was applied.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/organizations/acme", admin_).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/config/revisions", admin_).body["items"].size(), 0u);
}

TEST_F(ServerTest, JobsThroughTheCli) {
  ApplyEstate();
  CliResult sub =
      Run("submit -p vision --gpus 8 --tasks 2 --name train --estimate 600 -- python train.py");
  ASSERT_EQ(sub.code, 0) << sub.output;
  EXPECT_NE(sub.output.find("job 1 submitted"), std::string::npos) << sub.output;
  CliResult big = Run("submit -p vision --gpus 8 --tasks 2 --name big -- python big.py");
  ASSERT_EQ(big.code, 0) << big.output;
  ASSERT_TRUE(Eventually([&] { return Phase(1) == "Placed"; })) << Phase(1);
  CliResult list = Run("get jobs -o json");
  ASSERT_EQ(list.code, 0) << list.output;
  Json jobs = Json::parse(list.output);
  ASSERT_EQ(jobs["items"].size(), 2u);
  ASSERT_EQ(jobs["items"][1]["id"], 1);  // the newest first
  EXPECT_EQ(jobs["items"][1]["status"]["allocation"].size(), 2u);
  EXPECT_EQ(jobs["items"][1]["status"]["generation"], 1);
  // The second job waits for the first, and says so, with an estimated start from job 1's
  // runtime estimate.
  ASSERT_TRUE(Eventually([&] {
    return Http(*server_, "GET", "/api/v1/jobs/2/explanation", admin_)
        .body.contains("estimatedStart");
  }));
  CliResult why = Run("describe job 2");
  EXPECT_EQ(why.code, 0) << why.output;
  EXPECT_NE(why.output.find("Why pending:"), std::string::npos) << why.output;
  EXPECT_NE(why.output.find("onprem: no node has the free GPUs"), std::string::npos) << why.output;
  EXPECT_NE(why.output.find("estimated start: in"), std::string::npos) << why.output;
  // Cancelling the first lets the second run.
  CliResult cancel = Run("cancel 1");
  ASSERT_EQ(cancel.code, 0) << cancel.output;
  EXPECT_EQ(Run("cancel 1").code, 6);  // already ended
  ASSERT_TRUE(Eventually([&] { return Phase(2) == "Placed"; }));
  CliResult events = Run("get events --job 1");
  EXPECT_NE(events.output.find("Cancelled"), std::string::npos) << events.output;
  EXPECT_NE(events.output.find("Placed"), std::string::npos) << events.output;
  // Job 1 has ended: only --all lists it (get jobs shows what waits or runs).
  CliResult table = Run("get jobs --all");
  EXPECT_NE(table.output.find("ID   NAME    PROJECT   PHASE"), std::string::npos) << table.output;
  EXPECT_EQ(Run("get jobs 99").code, 5);
  CliResult top = Run("top");
  EXPECT_NE(top.output.find("16 of 16 GPUs allocated"), std::string::npos) << top.output;
}

// Pools of a purpose, labels and taints, as a platform team sets them up: training nodes, an
// inference pool, and a premium pool of purpose any that only jobs tolerating its taint use.
const char* kTrainingPool = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec: {team: product}
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west}
---
kind: NodePool
metadata: {name: train}
spec: {cluster: onprem, purpose: training, nodes: 2, gpusPerNode: 8, gpuModel: H100-80GB}
)";

const char* kServingPools = R"(---
kind: NodePool
metadata: {name: infer}
spec:
  cluster: onprem
  purpose: inference
  nodes: 1
  gpusPerNode: 8
  gpuModel: H100-80GB
  labels: {gpu-tier: standard}
---
kind: NodePool
metadata: {name: premium}
spec:
  cluster: onprem
  purpose: any
  nodes: 1
  gpusPerNode: 8
  gpuModel: H100-80GB
  labels: {gpu-tier: premium}
  taints: [{key: dedicated, value: premium}]
)";

TEST_F(ServerTest, JobsRunOnlyInPoolsOfTheirTypeAndOnTheNodesTheySelect) {
  CliResult applied = Run("apply -f " + WriteFile("pools.yaml", kTrainingPool) + " -m training");
  ASSERT_EQ(applied.code, 0) << applied.output;
  auto id = [](const HttpResult& r) { return r.body.value("id", int64_t{0}); };
  auto reason = [&](int64_t job) { return Job(job)["status"].value("reason", ""); };
  // Only training nodes: an inference job waits, and says why.
  const int64_t serve = id(SubmitSpec("vision", {{"type", "inference"}, {"gpus", 1}}));
  ASSERT_GT(serve, 0);
  ASSERT_TRUE(Eventually([&] {
    return reason(serve).find("2 nodes in pools for training, not inference") != std::string::npos;
  })) << reason(serve);
  EXPECT_EQ(Phase(serve), "Pending");
  // Training jobs, and batch jobs (a job without a type), run there.
  const int64_t train = id(SubmitSpec("vision", {{"type", "training"}, {"gpus", 1}}));
  const int64_t batch = id(SubmitSpec("vision", {{"gpus", 1}}));
  ASSERT_TRUE(Eventually([&] { return !NodeOf(train).empty() && !NodeOf(batch).empty(); }))
      << Job(train).dump() << Job(batch).dump();
  EXPECT_EQ(NodeOf(train).rfind("train-", 0), 0u) << NodeOf(train);
  EXPECT_EQ(NodeOf(batch).rfind("train-", 0), 0u) << NodeOf(batch);

  // An inference pool and a tainted premium pool arrive: the waiting job goes to the inference
  // pool (the premium pool's taint keeps it off there).
  applied = Run("apply -f " + WriteFile("pools.yaml", std::string(kTrainingPool) + kServingPools) +
                " -m serving");
  ASSERT_EQ(applied.code, 0) << applied.output;
  ASSERT_TRUE(Eventually([&] { return !NodeOf(serve).empty(); })) << Job(serve).dump();
  EXPECT_EQ(NodeOf(serve), "infer-0");

  // A selector that only the premium pool matches, without tolerating its taint: every node
  // is accounted for.
  const Json premium = {{"gpu-tier", "premium"}};
  const int64_t picky =
      id(SubmitSpec("vision", {{"type", "inference"}, {"gpus", 1}, {"nodeSelector", premium}}));
  ASSERT_TRUE(Eventually([&] {
    return reason(picky).find("with untolerated taint") != std::string::npos;
  })) << reason(picky);
  EXPECT_NE(reason(picky).find("2 nodes in pools for training, not inference"), std::string::npos)
      << reason(picky);
  EXPECT_NE(reason(picky).find("1 node without label gpu-tier=premium"), std::string::npos)
      << reason(picky);
  EXPECT_NE(reason(picky).find("1 node with untolerated taint dedicated=premium"),
            std::string::npos)
      << reason(picky);
  // Tolerating the taint (any value of its key), inference and training jobs both reach the
  // premium pool, whose purpose is any; the selector keeps them off the others.
  const Json tolerate = Json::array({{{"key", "dedicated"}}});
  const int64_t vip = id(SubmitSpec(
      "vision",
      {{"type", "inference"}, {"gpus", 1}, {"nodeSelector", premium}, {"tolerations", tolerate}}));
  const int64_t tuned = id(SubmitSpec(
      "vision",
      {{"type", "training"}, {"gpus", 1}, {"nodeSelector", premium}, {"tolerations", tolerate}}));
  ASSERT_TRUE(Eventually([&] { return !NodeOf(vip).empty() && !NodeOf(tuned).empty(); }))
      << Job(vip).dump() << Job(tuned).dump();
  EXPECT_EQ(NodeOf(vip), "premium-0");
  EXPECT_EQ(NodeOf(tuned), "premium-0");
  EXPECT_EQ(Phase(picky), "Pending");
  // The stored spec keeps what was asked, in canonical form.
  EXPECT_EQ(Job(vip)["spec"]["tolerations"], tolerate);
  EXPECT_EQ(Job(vip)["spec"]["nodeSelector"], premium);
  // The CLI says the same with flags.
  CliResult cli =
      Run("submit -p vision --gpus 1 --type inference --selector gpu-tier=premium "
          "--toleration dedicated --env MODE=serve --grace-period 5 --name cli-vip -- sleep 60");
  ASSERT_EQ(cli.code, 0) << cli.output;
  const int64_t cli_vip = std::stoll(cli.output.substr(cli.output.find("job ") + 4));
  ASSERT_TRUE(Eventually([&] { return !NodeOf(cli_vip).empty(); })) << Job(cli_vip).dump();
  EXPECT_EQ(NodeOf(cli_vip), "premium-0");
  EXPECT_EQ(Job(cli_vip)["spec"]["tolerations"], tolerate);
  EXPECT_EQ(Job(cli_vip)["spec"]["env"]["MODE"], "serve");
  EXPECT_EQ(Job(cli_vip)["spec"]["gracePeriod"], 5.0);
  CliResult bad = Run("submit -p vision --gpus 1 --selector premium -- sleep 1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--selector premium: expected KEY=VALUE"), std::string::npos)
      << bad.output;

  // A node an agent registers into the inference pool gets the pool's purpose and labels, and
  // keeps its own.
  Json gpus = Json::array();
  for (int g = 0; g < 8; ++g) {
    gpus.push_back(
        {{"index", g}, {"uuid", "GPU-agent-" + std::to_string(g)}, {"model", "A100-80GB"}});
  }
  Json node = {{"node", "agent-a"},         {"cluster", "onprem"}, {"pool", "infer"},
               {"labels", {{"zone", "a"}}}, {"cpuMilli", 64000},   {"memoryMib", 524288},
               {"simulated", true},         {"gpus", gpus}};
  HttpResult registered = Http(*server_, "POST", "/api/v1/agents/register", admin_, node.dump());
  ASSERT_EQ(registered.status, 200) << registered.text;
  const Json a100 = Json::array({"A100-80GB"});
  const int64_t trainer =
      id(SubmitSpec("vision", {{"type", "training"}, {"gpus", 1}, {"gpuModels", a100}}));
  const int64_t server =
      id(SubmitSpec("vision", {{"type", "inference"},
                               {"gpus", 1},
                               {"gpuModels", a100},
                               {"nodeSelector", {{"gpu-tier", "standard"}, {"zone", "a"}}}}));
  ASSERT_TRUE(Eventually([&] { return !NodeOf(server).empty(); })) << Job(server).dump();
  EXPECT_EQ(NodeOf(server), "agent-a");
  ASSERT_TRUE(Eventually([&] {
    return reason(trainer).find("1 node in pools for inference, not training") != std::string::npos;
  })) << reason(trainer);
}

TEST_F(ServerTest, PreemptingClassesAreForAdminsAndTheScopesTheyName) {
  const std::string classes = std::string(kEstate) + R"(---
kind: PriorityClass
metadata: {name: urgent}
spec:
  value: 90
  allowedScopes: [{team: product}]
---
kind: PriorityClass
metadata: {name: low}
spec: {value: 0, preempting: false}
)";
  CliResult applied = Run("apply -f " + WriteFile("estate.yaml", classes) + " -m classes");
  ASSERT_EQ(applied.code, 0) << applied.output;
  const std::string alice = User("alice", {{"role", "member"}, {"project", "vision"}});
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  auto with = [](const std::string& cls) { return Json{{"gpus", 1}, {"priorityClass", cls}}; };
  // "high" preempts and names no scopes: admins only.
  HttpResult denied = SubmitSpec("vision", with("high"), alice);
  EXPECT_EQ(denied.status, 403) << denied.text;
  EXPECT_EQ(denied.body["error"].value("field", ""), "spec.priorityClass") << denied.text;
  const std::string message = denied.body["error"].value("message", "");
  EXPECT_NE(message.find("alice may not use priority class \"high\" in project vision"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("only admins"), std::string::npos) << message;
  EXPECT_EQ(SubmitSpec("vision", with("high")).status, 201);
  // "urgent" is open to the projects of team product, not to research (team lab).
  EXPECT_EQ(SubmitSpec("vision", with("urgent"), alice).status, 201);
  HttpResult outside = SubmitSpec("research", with("urgent"), bob);
  EXPECT_EQ(outside.status, 403) << outside.text;
  const std::string why = outside.body["error"].value("message", "");
  EXPECT_NE(why.find("bob may not use priority class \"urgent\""), std::string::npos) << why;
  EXPECT_NE(why.find("allowed only in team product"), std::string::npos) << why;
  // A class that does not preempt is everyone's.
  EXPECT_EQ(SubmitSpec("research", with("low"), bob).status, 201);
  // Only the allowed submissions became jobs; the refusals are audited as denied.
  Json jobs = Http(*server_, "GET", "/api/v1/jobs", admin_).body;
  EXPECT_EQ(jobs["items"].size(), 3u) << jobs.dump();
  Json audit = Http(*server_, "GET", "/api/v1/audit?result=denied&limit=100", admin_).body;
  std::set<std::string> users;
  for (const Json& a : audit["items"]) users.insert(a.value("user", ""));
  EXPECT_TRUE(users.count("alice") && users.count("bob")) << audit.dump();
}

TEST_F(ServerTest, BadRequestsGetAClearErrorAndTheServerKeepsServing) {
  ApplyEstate();
  struct Case {
    std::string method, path, body;
    int status;
    std::string field;  // expected error.field ("" when none)
  };
  const std::vector<Case> cases = {
      {"POST", "/api/v1/jobs", "{\"metadata\": ", 400, ""},
      {"POST", "/api/v1/jobs", "[1, 2]", 400, ""},
      {"POST", "/api/v1/jobs", "5550e910741", 400, ""},  // out of range: found by the fuzzer
      {"POST", "/api/v1/jobs",
       R"({"metadata": {"name": "x", "project": "vision"}, "spec": {"gpus": 1, "colour": 2}})", 400,
       "spec.colour"},
      {"POST", "/api/v1/jobs",
       R"({"metadata": {"name": "x", "project": "vision"}, "spec": {"gpus": "one"}})", 400,
       "spec.gpus"},
      {"POST", "/api/v1/jobs", R"({"metadata": {"name": "Bad Name", "project": "vision"}})", 400,
       "metadata.name"},
      {"POST", "/api/v1/jobs",
       R"({"metadata": {"name": "x", "project": "nowhere"}, "spec": {"command": ["true"]}})", 404,
       "metadata.project"},
      {"POST", "/api/v1/jobs",
       R"({"metadata": {"name": "x", "project": "vision"}, "spec": {"priorityClass": "vip", "command": ["true"]}})",
       400, "spec.priorityClass"},
      {"PUT", "/api/v1/projects/speech",
       R"({"metadata": {"name": "speech"}, "spec": {"team": "none"}})", 400, "spec.team"},
      {"PUT", "/api/v1/projects/speech",
       R"({"metadata": {"name": "other"}, "spec": {"team": "lab"}})", 400, "metadata.name"},
      {"GET", "/api/v1/jobs?limit=zero", "", 400, "limit"},
      {"GET", "/api/v1/no-such-thing", "", 404, ""},
      {"POST", "/api/v1/config/rollback", R"({"to": 42})", 404, ""},
  };
  for (const Case& c : cases) {
    HttpResult r = Http(*server_, c.method, c.path, admin_, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body << "\n" << r.text;
    ASSERT_TRUE(r.body.contains("error")) << r.text;
    EXPECT_FALSE(r.body["error"].value("message", "").empty()) << r.text;
    EXPECT_FALSE(r.body["error"].value("code", "").empty()) << r.text;
    EXPECT_EQ(r.body["error"].value("field", ""), c.field) << r.text;
  }
  // Deep nesting is refused before it can exhaust a stack (400,000 levels crashed the server).
  HttpResult deep = Http(*server_, "POST", "/api/v1/jobs", admin_,
                         std::string(200000, '[') + std::string(200000, ']'));
  EXPECT_EQ(deep.status, 400) << deep.text;
  EXPECT_NE(deep.text.find("nested deeper than 64"), std::string::npos) << deep.text;
  // A body over the limit is refused before it is read whole.
  HttpResult huge = Http(*server_, "POST", "/api/v1/jobs", admin_, std::string(2 << 20, ' '));
  EXPECT_EQ(huge.status, 413);
  // Nothing was half-applied: no job and no project came of any of it.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs", admin_).body["items"].size(), 0u);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/projects/speech", admin_).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/healthz", "").status, 200);
  // Every failed and denied call is in the audit log.
  CliResult audit = Run("audit --result failed -o json");
  EXPECT_GE(Json::parse(audit.output)["items"].size(), 8u) << audit.output;
}

TEST_F(ServerTest, AMemberSeesAndTouchesOnlyTheirProject) {
  ApplyEstate();
  const std::string alice = User("alice", {{"role", "member"}, {"project", "vision"}});
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  const std::string carol = User("carol", {{"role", "viewer"}, {"project", "vision"}});
  HttpResult mine = Submit("vision", 1, alice);
  ASSERT_EQ(mine.status, 201) << mine.text;
  const std::string id = std::to_string(mine.body["id"].get<int64_t>());
  ASSERT_EQ(Submit("research", 1, bob).status, 201);
  // Every endpoint that reaches alice's job, tried by bob: not found (its existence hidden).
  for (const std::string& path : {"/api/v1/jobs/" + id, "/api/v1/jobs/" + id + "/events",
                                  "/api/v1/jobs/" + id + "/explanation"}) {
    EXPECT_EQ(Http(*server_, "GET", path, bob).status, 404) << path;
  }
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/jobs/" + id + "/cancel", bob).status, 404);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs?project=vision", bob).status, 404);
  EXPECT_EQ(Submit("vision", 1, bob).status, 404);
  Json listed = Http(*server_, "GET", "/api/v1/jobs", bob).body;
  ASSERT_EQ(listed["items"].size(), 1u);
  EXPECT_EQ(listed["items"][0]["metadata"]["project"], "research");
  const Json events = Http(*server_, "GET", "/api/v1/events", bob).body;
  for (const Json& e : events["items"]) {
    EXPECT_EQ(e["project"], "research") << e.dump();
  }
  HttpResult polled = Http(*server_, "GET", "/api/v1/events?wait=1&after=0", bob);
  for (const Json& e : polled.body["items"]) EXPECT_EQ(e["project"], "research");
  // A viewer of vision reads it but may not submit or cancel.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs/" + id, carol).status, 200);
  EXPECT_EQ(Submit("vision", 1, carol).status, 403);
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/jobs/" + id + "/cancel", carol).status, 403);
  // Members administer nothing.
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/api/v1/audit"},
           {"GET", "/api/v1/users"},
           {"PUT", "/api/v1/users/mallory"},
           {"POST", "/api/v1/config/apply"},
           {"POST", "/api/v1/config/plan"},
           {"POST", "/api/v1/config/rollback"},
           {"PUT", "/api/v1/projects/vision"},
           {"DELETE", "/api/v1/clusters/onprem"},
           {"DELETE", "/api/v1/quotas/research"},
       }) {
    HttpResult r = Http(*server_, method, path, bob, R"({"metadata": {"name": "x"}})");
    EXPECT_TRUE(r.status == 403 || r.status == 400) << method << " " << path << " " << r.text;
    if (method != "PUT") {
      EXPECT_EQ(r.status, 403) << method << " " << path << " " << r.text;
    }
  }
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/tokens", bob, R"({"user": "alice"})").status, 403);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/tokens?user=alice", bob).status, 403);
  // Every documented path, with every method, as bob: nothing of alice's job comes back, and
  // her job is untouched afterwards.
  HttpResult secret = Submit("vision", 1, alice);
  ASSERT_EQ(secret.status, 201);
  const std::string secret_id = std::to_string(secret.body["id"].get<int64_t>());
  for (const std::string& p : DocumentedPaths(secret_id)) {
    for (const char* method : {"GET", "POST", "PUT", "DELETE"}) {
      HttpResult r = Http(*server_, method, p, bob, R"({"metadata": {"name": "x"}})");
      if (p.find("/jobs/" + secret_id) != std::string::npos) {
        EXPECT_TRUE(r.status == 404) << method << " " << p << ": " << r.status << " " << r.text;
      }
      // Her jobs carry "user":"alice"; their events say "submitted by alice".
      EXPECT_EQ(r.text.find("\"user\":\"alice\""), std::string::npos)
          << method << " " << p << " leaks alice's job: " << r.text.substr(0, 300);
      EXPECT_EQ(r.text.find("by alice"), std::string::npos)
          << method << " " << p << " leaks alice's events: " << r.text.substr(0, 300);
    }
  }
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs/" + secret_id, alice).body["status"]["phase"] ==
                "Cancelled",
            false);
  // Alice cancels her own job; the audit log has bob's denied attempts.
  EXPECT_EQ(Http(*server_, "POST", "/api/v1/jobs/" + id + "/cancel", alice).status, 200);
  Json denied =
      Http(*server_, "GET", "/api/v1/audit?user=bob&result=denied&limit=1000", admin_).body;
  EXPECT_GE(denied["items"].size(), 9u) << denied.dump();
  // A revoked token stops working at once.
  Json tokens = Http(*server_, "GET", "/api/v1/tokens", bob).body;
  ASSERT_EQ(tokens["items"].size(), 1u);
  const std::string token_id = tokens["items"][0]["id"];
  EXPECT_EQ(Http(*server_, "DELETE", "/api/v1/tokens/" + token_id, bob).status, 200);
  HttpResult after = Http(*server_, "GET", "/api/v1/whoami", bob);
  EXPECT_EQ(after.status, 401);
  EXPECT_NE(after.text.find("revoked"), std::string::npos);
}

// What the dashboard reads besides jobs: the estate's history, quota use, and the newest
// entries first, each scoped to what the caller may see.
TEST_F(ServerTest, HistoryAndUsageShowOnlyWhatTheCallerMaySee) {
  server_ = std::make_unique<ServerProcess>(
      kBinary, dir_.File("sampled"),
      std::vector<std::string>{"--history-interval", "0.2", "--history-retention", "1"});
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("sampled.log"));
  admin_ = server_->admin_token();
  ApplyEstate();
  const std::string bob = User("bob", {{"role", "member"}, {"project", "research"}});
  HttpResult vision = Submit("vision", 4);
  HttpResult research = Submit("research", 2, bob);
  ASSERT_EQ(vision.status, 201);
  ASSERT_EQ(research.status, 201);
  const int64_t vision_id = vision.body["id"], research_id = research.body["id"];
  ASSERT_TRUE(
      Eventually([&] { return Phase(vision_id) == "Placed" && Phase(research_id) == "Placed"; }));
  // Samples taken after both were placed: 6 of 16 GPUs allocated, 2 jobs running.
  Json h;
  ASSERT_TRUE(Eventually([&] {
    h = Http(*server_, "GET", "/api/v1/history", admin_).body;
    return h["at"].size() >= 2 && h["queue"]["running"].back() == 2;
  })) << h.dump();
  EXPECT_DOUBLE_EQ(h["interval"].get<double>(), 0.2);
  // A second of retention at 0.2 s keeps the last 5 samples, a fifth of a second apart.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  h = Http(*server_, "GET", "/api/v1/history", admin_).body;
  ASSERT_EQ(h["at"].size(), 5u) << h.dump();
  EXPECT_NEAR(h["at"][4].get<double>() - h["at"][0].get<double>(), 0.8, 0.5);
  ASSERT_EQ(h["clusters"].size(), 1u) << h.dump();
  const Json& onprem = h["clusters"][0];
  EXPECT_EQ(onprem["cluster"], "onprem");
  EXPECT_EQ(onprem["model"], "H100-80GB");
  EXPECT_EQ(onprem["gpus"].back(), 16);
  EXPECT_EQ(onprem["allocated"].back(), 6);
  EXPECT_EQ(onprem["gpus"].size(), h["at"].size());  // columns, one value per sample
  std::set<std::string> quota;
  for (const Json& q : h["quota"]) quota.insert(q["name"].get<std::string>());
  EXPECT_EQ(quota, (std::set<std::string>{"acme", "product", "lab", "vision", "research"}));
  // bob sees research and what is above it: its job, not vision's; not product's quota.
  Json hb = Http(*server_, "GET", "/api/v1/history", bob).body;
  EXPECT_EQ(hb["queue"]["running"].back(), 1) << hb.dump();
  quota.clear();
  for (const Json& q : hb["quota"]) quota.insert(q["name"].get<std::string>());
  EXPECT_EQ(quota, (std::set<std::string>{"acme", "lab", "research"}));
  std::set<std::string> usage;
  const Json rows = Http(*server_, "GET", "/api/v1/usage", bob).body;
  for (const Json& row : rows["items"]) {
    usage.insert(row["name"].get<std::string>());
    EXPECT_GE(row["fairShareRank"].get<int>(), 1) << row.dump();
    EXPECT_LE(row["fairShareRank"].get<int>(), row["siblings"].get<int>()) << row.dump();
    // lab has product beside it, though bob cannot see product.
    if (row["name"] == "lab") {
      EXPECT_EQ(row["siblings"], 2) << row.dump();
    }
  }
  EXPECT_EQ(usage, (std::set<std::string>{"acme", "lab", "research"}));
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/usage", admin_).body["items"].size(), 5u);
  // Nothing sampled after `since`; a bad `since` says which parameter.
  EXPECT_TRUE(Http(*server_, "GET", "/api/v1/history?since=9999999999", admin_).body["at"].empty());
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/history?since=soon", admin_).body["error"]["field"],
            "since");
  // The newest first, continuing with older ones; an unknown order is an error.
  Json newest = Http(*server_, "GET", "/api/v1/jobs?order=newest&limit=1", admin_).body;
  ASSERT_EQ(newest["items"].size(), 1u);
  EXPECT_EQ(newest["items"][0]["id"], research_id);
  EXPECT_EQ(newest["continue"], research_id);
  Json older =
      Http(*server_, "GET",
           "/api/v1/jobs?order=newest&limit=1000&continue=" + newest["continue"].dump(), admin_)
          .body;
  ASSERT_FALSE(older["items"].empty()) << older.dump();
  for (const Json& j : older["items"]) EXPECT_LT(j["id"].get<int64_t>(), research_id);
  EXPECT_TRUE(older["continue"].is_null());
  HttpResult sideways = Http(*server_, "GET", "/api/v1/jobs?order=sideways", admin_);
  EXPECT_EQ(sideways.status, 400);
  EXPECT_EQ(sideways.body["error"]["field"], "order");
  Json audit = Http(*server_, "GET", "/api/v1/audit?order=newest&limit=1", admin_).body;
  ASSERT_EQ(audit["items"].size(), 1u);
  EXPECT_EQ(audit["items"][0]["user"], "bob");
  EXPECT_EQ(audit["items"][0]["action"], "jobs.create");
  // after=latest: nothing old, and where the log stands.
  Json latest = Http(*server_, "GET", "/api/v1/events?after=latest", admin_).body;
  EXPECT_TRUE(latest["items"].empty());
  EXPECT_GE(latest["last"].get<int64_t>(), 3) << latest.dump();
  // The history outlives a restart: what the store kept (the last second) comes back.
  const double last = Http(*server_, "GET", "/api/v1/history", admin_).body["at"].back();
  server_->Stop();
  server_ = std::make_unique<ServerProcess>(
      kBinary, dir_.File("sampled"),
      std::vector<std::string>{"--history-interval", "0.2", "--history-retention", "3600"});
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("sampled.log"));
  h = Http(*server_, "GET", "/api/v1/history", admin_).body;
  ASSERT_GE(h["at"].size(), 4u) << h.dump();
  EXPECT_LE(h["at"][0].get<double>(), last) << h.dump();
  EXPECT_EQ(h["clusters"][0]["gpus"][0], 16) << h.dump();
}

// What a project has received counts for fair share after a restart and after a configuration
// change, as the store keeps it; and a cancel on nodes no agent runs ends at once.
TEST_F(ServerTest, FairShareOutlivesRestartsAndConfigurationChanges) {
  const std::vector<std::string> flags = {"--history-interval", "0.2"};
  server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("fair"), flags);
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("fair.log"));
  admin_ = server_->admin_token();
  ApplyEstate();
  auto share = [&](const std::string& name) {
    const Json usage = Http(*server_, "GET", "/api/v1/usage", admin_).body;
    for (const Json& row : usage["items"]) {
      if (row["name"] == name) return row["fairShare"].get<double>();
    }
    return -1.0;
  };
  HttpResult vision = Submit("vision", 8);
  ASSERT_EQ(vision.status, 201);
  const int64_t id = vision.body["id"];
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Placed"; }));
  ASSERT_TRUE(Eventually([&] { return share("vision") > 0 && share("product") > 0; }))
      << Http(*server_, "GET", "/api/v1/usage", admin_).text;
  EXPECT_EQ(share("research"), 0);
  ASSERT_EQ(Run("cancel " + std::to_string(id)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(id) == "Cancelled"; }));
  const double before = share("vision");
  EXPECT_NEAR(share("product"), before, before * 1e-6) << "vision is product's only project";
  // A configuration change rebuilds the scheduler; the share is carried over.
  CliResult apply = Run("apply -f " + WriteFile("more.yaml", std::string(kEstate) + R"(---
kind: Project
metadata: {name: extra}
spec: {team: lab}
)") + " -m more");
  ASSERT_EQ(apply.code, 0) << apply.output;
  ASSERT_TRUE(Eventually([&] { return share("extra") == 0; })) << "the new project is known";
  EXPECT_NEAR(share("vision"), before, before * 0.01);
  // Kept by the store past a restart (a sample is written every 0.2 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server_->Stop();
  server_ = std::make_unique<ServerProcess>(kBinary, dir_.File("fair"), flags);
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("fair.log"));
  ASSERT_TRUE(Eventually([&] { return share("vision") >= 0; }));
  EXPECT_NEAR(share("vision"), before, before * 0.01) << "decays by an hour's half-life only";
  EXPECT_EQ(share("research"), 0);
}

// The dashboard's files, from memory, revalidated by ETag.
TEST_F(ServerTest, ServesTheDashboard) {
  httplib::Client c("127.0.0.1", server_->port());
  auto index = c.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(index->body.find("app.js"), std::string::npos);
  EXPECT_NE(index->get_header_value("Content-Security-Policy").find("default-src 'self'"),
            std::string::npos);
  for (const char* path : {"/app.js", "/app.css", "/favicon.svg"}) {
    auto asset = c.Get(path);
    ASSERT_TRUE(asset) << path;
    EXPECT_EQ(asset->status, 200) << path;
    EXPECT_GT(asset->body.size(), 200u) << path;
    const std::string etag = asset->get_header_value("ETag");
    ASSERT_FALSE(etag.empty());
    auto again = c.Get(path, {{"If-None-Match", etag}});
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 304) << path;
    EXPECT_TRUE(again->body.empty());
  }
  EXPECT_EQ(c.Get("/app.mjs")->status, 404);
  // What a browser accepts gets gzip (Brotli is not offered: at its default quality it costs
  // seconds of CPU for a large node list).
  c.set_decompress(false);
  for (const char* path : {"/app.js", "/app.css"}) {
    auto r = c.Get(path, {{"Accept-Encoding", "gzip, deflate, br, zstd"}});
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip") << path;
  }
  auto br_only = c.Get("/app.js", {{"Accept-Encoding", "br"}});
  ASSERT_TRUE(br_only);
  EXPECT_EQ(br_only->get_header_value("Content-Encoding"), "");
  EXPECT_GT(br_only->body.size(), 1000u);
}

TEST_F(ServerTest, TeamLeadsManageTheMembersBelowThem) {
  ApplyEstate();
  const std::string lead = User("lena", {{"role", "team-lead"}, {"team", "product"}});
  // A member of research (another team) exists already.
  const std::string dave = User("dave", {{"role", "member"}, {"project", "research"}});
  auto put = [&](const std::string& user, const Json& roles) {
    return Http(*server_, "PUT", "/api/v1/users/" + user, lead,
                Json{{"spec", {{"roles", roles}}}}.dump());
  };
  EXPECT_EQ(put("erin", {{{"role", "member"}, {"project", "vision"}}}).status, 201);
  EXPECT_EQ(put("erin", {{{"role", "member"}, {"project", "research"}}}).status, 403);
  EXPECT_EQ(put("erin", {{{"role", "admin"}}}).status, 403);
  EXPECT_EQ(put("erin", {{{"role", "team-lead"}, {"team", "product"}}}).status, 403);
  // Adding dave to vision keeps his research role, which the lead could not have given.
  HttpResult both = put("dave", {{{"role", "viewer"}, {"project", "vision"}}});
  ASSERT_EQ(both.status, 200) << both.text;
  EXPECT_EQ(both.body["spec"]["roles"].size(), 2u) << both.text;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/whoami", dave).body["projects"].size(), 2u);
  // The lead lists the users it manages, with the roles it manages: erin, and dave's vision role.
  Json users = Http(*server_, "GET", "/api/v1/users", lead).body;
  ASSERT_EQ(users["items"].size(), 2u) << users.dump();
  EXPECT_EQ(users["items"][0]["metadata"]["name"], "dave");
  EXPECT_EQ(users["items"][0]["spec"]["roles"].size(), 1u) << users.dump();
  EXPECT_EQ(users["items"][1]["metadata"]["name"], "erin");
  // Members manage no one.
  EXPECT_EQ(Http(*server_, "PUT", "/api/v1/users/frank", dave, R"({"spec": {}})").status, 403);
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/users", dave).status, 403);
}

TEST_F(ServerTest, TokensExpireAndAreShownOnce) {
  // Long enough to be used once on a loaded machine (the ASan build, tests in parallel).
  CliResult created = Run("token create --description ci --expires-in 4s");
  ASSERT_EQ(created.code, 0) << created.output;
  const std::string token = created.output.substr(0, created.output.find('\n'));
  ASSERT_EQ(token.rfind("mrd_", 0), 0u) << created.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/whoami", token).status, 200);
  // Listing shows the token's id, never its secret.
  CliResult listed = Run("token list -o json");
  EXPECT_EQ(listed.output.find(token.substr(21)), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("\"description\": \"ci\""), std::string::npos) << listed.output;
  ASSERT_TRUE(
      Eventually([&] { return Http(*server_, "GET", "/api/v1/whoami", token).status == 401; }, 10));
  EXPECT_NE(Http(*server_, "GET", "/api/v1/whoami", token).text.find("expired"), std::string::npos);
  EXPECT_EQ(Run("token create --expires-in soon").code, 2);
}

TEST_F(ServerTest, AcknowledgedJobsSurviveKill9) {
  ApplyEstate();
  // Eight clients submit as fast as they can; the server is killed the moment the 200th
  // acknowledgement arrives.
  std::mutex mu;
  std::set<int64_t> acknowledged;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      while (!stop) {
        HttpResult r = Submit("vision", 0);
        if (r.status != 201) continue;
        std::lock_guard<std::mutex> lock(mu);
        acknowledged.insert(r.body["id"].get<int64_t>());
        if (acknowledged.size() >= 200 && !stop.exchange(true)) server_->Stop(SIGKILL);
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_TRUE(server_->Start()) << ReadFile(dir_.File("data.log"));
  std::set<int64_t> stored;
  Json page = Http(*server_, "GET", "/api/v1/jobs?limit=1000", admin_).body;
  for (const Json& j : page["items"]) stored.insert(j["id"].get<int64_t>());
  for (int64_t id : acknowledged) EXPECT_TRUE(stored.count(id)) << "job " << id << " was lost";
  EXPECT_GE(acknowledged.size(), 200u);
}

TEST_F(ServerTest, WatchStreamsEventsAsTheyHappen) {
  ApplyEstate();
  std::atomic<bool> seen{false};
  std::string received;
  std::thread watcher([&] {
    httplib::Client c("127.0.0.1", server_->port());
    httplib::Headers h = {{"Authorization", "Bearer " + admin_}};
    c.Get("/api/v1/watch", h, [&](const char* data, size_t n) {
      received.append(data, n);
      if (received.find("event: Submitted") != std::string::npos) {
        seen = true;
        return false;  // enough: close the stream
      }
      return true;
    });
  });
  // Give the stream a moment to open so that it sees the submission live.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(Submit("vision", 1).status, 201);
  watcher.join();
  EXPECT_TRUE(seen) << received;
  EXPECT_NE(received.find("id: "), std::string::npos);
  EXPECT_NE(received.find("\"objectKind\":\"Job\""), std::string::npos) << received;
}

TEST_F(ServerTest, MetricsInThePrometheusTextFormat) {
  ApplyEstate();
  ASSERT_EQ(Submit("vision", 1).status, 201);
  ASSERT_TRUE(Eventually([&] {
    // The job's placement shows once the cycle after the submission has run.
    return Http(*server_, "GET", "/metrics", admin_)
               .text.find("meridian_gpus_allocated{cluster=\"onprem\",model=\"H100-80GB\"} 1") !=
           std::string::npos;
  }));
  const std::string text = Http(*server_, "GET", "/metrics", admin_).text;
  for (const char* want :
       {"# TYPE meridian_api_request_duration_seconds histogram",
        "meridian_api_request_duration_seconds_bucket{route=\"jobs.create\",code=\"201\",le=",
        "# TYPE meridian_scheduler_cycle_duration_seconds histogram",
        "# TYPE meridian_store_operation_duration_seconds histogram",
        "meridian_gpus_allocated{cluster=\"onprem\",model=\"H100-80GB\"} 1",
        "meridian_gpus_free{cluster=\"onprem\",model=\"H100-80GB\"} 15",
        "# TYPE meridian_queue_depth gauge",
        "meridian_quota_used_gpus{level=\"project\",scope=\"vision\"} 1",
        "meridian_api_requests_total{route=\"jobs.create\",code=\"201\"} 1"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text.substr(0, 3000);
  }
}

TEST_F(ServerTest, CliExitCodesAndMessages) {
  EXPECT_EQ(Run("get jobs", "mrd_0000000000000000_" + std::string(48, '0')).code, 4);
  CliResult down = Cli(kBinary, "get jobs", "http://127.0.0.1:1", admin_);
  EXPECT_EQ(down.code, 3);
  EXPECT_NE(down.output.find("is `meridian server` running"), std::string::npos) << down.output;
  CliResult login = Cli(kBinary, "login --no-save", server_->url(), admin_);
  EXPECT_EQ(login.code, 0) << login.output;
  EXPECT_NE(login.output.find("as admin"), std::string::npos);
  CliResult bad = Run("get widgets");
  EXPECT_EQ(bad.code, 2);
  CliResult file = Run("submit -f " + WriteFile("job.yaml",
                                                "metadata: {name: j, project: vision}\n"
                                                "spec:\n  gpus: 1\n  gpuz: 2\n"));
  EXPECT_EQ(file.code, 2);
  EXPECT_NE(file.output.find("job.yaml:4:3: spec.gpuz: unknown field"), std::string::npos)
      << file.output;
}

// Issue 19's wrong answers, each asked as a kubectl user would: the CLI answers what was asked
// or says why not, with the documented exit code.
// Issue 19, item 4: what nothing the estate has or may be given could ever hold is refused at
// submission with its field (at its line in a file), and nothing is stored; what a pool's nodes
// could hold once they join is accepted and waits.
TEST_F(ServerTest, AJobNothingCouldEverHoldIsRefusedAtSubmissionWithItsField) {
  ApplyEstate();
  // A pool whose nodes have not joined yet: 4 H200s each.
  CliResult pool = Run("apply -f " +
                       WriteFile("h200.yaml",
                                 "kind: NodePool\nmetadata: {name: h200}\nspec: {cluster: onprem, "
                                 "gpusPerNode: 4, gpuModel: H200-141GB, cpuMilli: 64000}\n") +
                       " -m pool");
  ASSERT_EQ(pool.code, 0) << pool.output;
  const std::string file = WriteFile("big.yaml",
                                     "metadata: {name: big, project: vision}\n"
                                     "spec:\n"
                                     "  command: [train]\n"
                                     "  gpus: 16\n");
  CliResult big = Run("submit -f " + file);
  EXPECT_EQ(big.code, 2) << big.output;
  EXPECT_NE(big.output.find(file + ":4:3: spec.gpus: 16 GPUs per task, but the most any node or "
                                   "node pool has is 8"),
            std::string::npos)
      << big.output;
  struct Case {
    Json spec;
    std::string field, says;
  };
  const std::vector<Case> cases = {
      {{{"gpus", 1}, {"gpuModels", {"H100-80G"}}},
       "spec.gpuModels",
       "no node or node pool has GPUs of model H100-80G (models there: H100-80GB, H200-141GB)"},
      {{{"migProfile", "1g.10gb"}, {"gpuModels", {"H200-141GB"}}},
       "spec.migProfile",
       "\"1g.10gb\" is not a MIG profile of any GPU"},
      {{{"gpus", 1}, {"clusters", {"cloud"}}},
       "spec.clusters[0]",
       "cluster \"cloud\" does not exist (clusters: onprem)"},
      {{{"gpus", 4}, {"gpuModels", {"H200-141GB"}}, {"cpuMilli", 100000}},
       "spec.cpuMilli",
       "100000 CPU millicores per task, but the most any node or node pool with GPUs of model "
       "H200-141GB has is 64000"},
      {{{"cpuMilli", 200000}}, "spec.cpuMilli", "the most any node or node pool has is 128000"},
  };
  for (const Case& c : cases) {
    HttpResult r = SubmitSpec("vision", c.spec);
    EXPECT_EQ(r.status, 400) << c.spec.dump() << " " << r.text;
    EXPECT_EQ(r.body["error"].value("field", ""), c.field) << r.text;
    EXPECT_NE(r.body["error"].value("message", "").find(c.says), std::string::npos) << r.text;
  }
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/jobs", admin_).body["items"].size(), 0u)
      << "a refused job is not stored";
  // Four H200s: only a node of the new pool could hold it, and one may join. It waits, and says
  // why. Eight GPUs, what an H100 node has, are not refused either.
  HttpResult later = SubmitSpec("vision", {{"gpus", 4}, {"gpuModels", {"H200-141GB"}}});
  ASSERT_EQ(later.status, 201) << later.text;
  const int64_t id = later.body["id"];
  EXPECT_TRUE(Eventually([&] {
    return Job(id)["status"].value("reason", "").find("fits no node here, even idle") !=
           std::string::npos;
  })) << Job(id).dump();
  EXPECT_EQ(Submit("vision", 8).status, 201);
}

TEST_F(ServerTest, TheCliAnswersWhatWasAsked) {
  ApplyEstate();
  CliResult classes = Run("get priorityclasses");
  EXPECT_EQ(classes.code, 0) << classes.output;
  EXPECT_NE(classes.output.find("high"), std::string::npos) << classes.output;
  // The node named, not the first one listed.
  const Json nodes = Http(*server_, "GET", "/api/v1/nodes", admin_).body["items"];
  ASSERT_GE(nodes.size(), 2u);
  const std::string second = nodes[1]["name"];
  CliResult node = Run("get node " + second + " -o json");
  ASSERT_EQ(node.code, 0) << node.output;
  EXPECT_EQ(Json::parse(node.output, nullptr, false).value("name", ""), second) << node.output;
  CliResult described = Run("describe node " + second);
  EXPECT_EQ(described.code, 0) << described.output;
  EXPECT_NE(described.output.find(second), std::string::npos) << described.output;
  EXPECT_EQ(Run("get node no-such-node").code, 5);
  EXPECT_EQ(Run("get user nobody").code, 5);
  CliResult admin_user = Run("get user admin -o json");
  EXPECT_EQ(admin_user.code, 0) << admin_user.output;
  // A job is named by its number.
  CliResult word = Run("get job abc");
  EXPECT_EQ(word.code, 2);
  EXPECT_NE(word.output.find("a job is named by its id"), std::string::npos) << word.output;
  // Times in YAML keep their digits.
  const int64_t older = Submit("vision", 1).body["id"];
  const int64_t newer = Submit("vision", 1).body["id"];
  CliResult yaml = Run("get job " + std::to_string(newer) + " -o yaml");
  ASSERT_EQ(yaml.code, 0) << yaml.output;
  EXPECT_EQ(yaml.output.find("e+09"), std::string::npos) << yaml.output;
  const double submitted = Job(newer)["status"]["submittedAt"];
  EXPECT_NE(yaml.output.find("submittedAt: " + std::to_string(static_cast<int64_t>(submitted))),
            std::string::npos)
      << yaml.output;
  // A query value is one value, and a phase that does not exist is an error, not an empty list.
  CliResult injected = Run("get jobs --user 'admin&phase=Failed' -o json");
  ASSERT_EQ(injected.code, 0) << injected.output;
  EXPECT_TRUE(Json::parse(injected.output)["items"].empty()) << injected.output;
  CliResult typo = Run("get jobs --phase Runing");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.output.find("phase: \"Runing\" is not a phase"), std::string::npos) << typo.output;
  // The newest first.
  CliResult listed = Run("get jobs -o json");
  ASSERT_EQ(listed.code, 0) << listed.output;
  const Json items = Json::parse(listed.output)["items"];
  ASSERT_GE(items.size(), 2u);
  EXPECT_EQ(items[0]["id"], newer);
  EXPECT_EQ(items[1]["id"], older);
  // Bad flags exit 2, as documented, and --help 0.
  EXPECT_EQ(Run("get jobs --no-such-flag").code, 2);
  EXPECT_EQ(Run("get jobs --limit many").code, 2);
  EXPECT_EQ(Run("--help").code, 0);
}

// A CLI process left running (`get -w`): its output (stdout and stderr) read as it comes.
class CliChild {
 public:
  CliChild(const std::string& args, const std::string& server, const std::string& token) {
    int fds[2];
    if (pipe(fds) != 0) return;
    // Made before fork(): the child of a threaded process only redirects and execs.
    std::vector<std::string> command = {"/bin/sh", "-c", "exec " + kBinary + " " + args};
    std::vector<std::string> env = EnvironmentWith({{"MERIDIAN_CONFIG", "/nonexistent/config.json"},
                                                    {"MERIDIAN_SERVER", server},
                                                    {"MERIDIAN_TOKEN", token}});
    const std::vector<char*> argv = CStrings(command);
    const std::vector<char*> envp = CStrings(env);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~CliChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  // Reads until `text` has been printed (true), the process has closed its output, or `seconds`
  // have passed (false).
  bool WaitFor(const std::string& text, double seconds = 20) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (output_.find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline || fd_ < 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return output_.find(text) != std::string::npos;
      output_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // Stops it as Ctrl-C does; its exit status.
  int Interrupt() {
    kill(pid_, SIGINT);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

// Durations take units everywhere, by one parser (base/duration.h): flags and job documents.
TEST_F(ServerTest, DurationsTakeUnitsInFlagsAndDocuments) {
  ApplyEstate();
  CliResult sub = Run(
      "submit -p vision --gpus 1 --limit 1h30m --estimate 45m --grace-period 45s -o json -- true");
  ASSERT_EQ(sub.code, 0) << sub.output;
  const Json spec = Json::parse(sub.output)["spec"];
  EXPECT_EQ(spec["runtimeLimit"], 5400.0);
  EXPECT_EQ(spec["runtimeEstimate"], 2700.0);
  EXPECT_EQ(spec["gracePeriod"], 45.0);
  CliResult clock = Run("submit -p vision --gpus 1 --limit 01:00:00 -o json -- true");
  ASSERT_EQ(clock.code, 0) << clock.output;
  EXPECT_EQ(Json::parse(clock.output)["spec"]["runtimeLimit"], 3600.0);
  // A bad one names the flag, the text and the forms accepted; exit 2.
  CliResult bad = Run("submit -p vision --gpus 1 --limit soon -- true");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--limit: \"soon\" is not a duration (use 90s, 15m, 2h, 30d, 1h30m, "
                            "HH:MM:SS, MM:SS"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(Run("drain n1 --timeout 5x").code, 2);
  // The server's and the tools' duration flags too (refused while parsing: nothing starts).
  for (const char* flags : {"server --idle-timeout 2x", "bench agents --interval soon",
                            "sim replay --reclaim-idle-after 1h1h"}) {
    CliResult r = Run(flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find("is not a duration"), std::string::npos) << flags << ": " << r.output;
  }
  // --expires-in by the same parser.
  CliResult token = Run("token create --expires-in 1h30m -o json");
  ASSERT_EQ(token.code, 0) << token.output;
  const Json t = Json::parse(token.output);
  EXPECT_NEAR(t["expiresAt"].get<double>() - t["createdAt"].get<double>(), 5400, 1) << t.dump();
  HttpResult api_token =
      Http(*server_, "POST", "/api/v1/tokens", admin_, Json{{"expiresIn", "2h"}}.dump());
  ASSERT_EQ(api_token.status, 201) << api_token.text;
  EXPECT_NEAR(api_token.body["expiresAt"].get<double>() - api_token.body["createdAt"].get<double>(),
              7200, 1);
  CliResult zero = Run("token create --expires-in 0s");
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.output.find("--expires-in"), std::string::npos) << zero.output;
  // A job document: strings with units, or numbers of seconds; stored as seconds.
  const std::string doc = WriteFile(
      "job.yaml",
      "metadata: {name: train, project: vision}\nspec:\n  gpus: 1\n  command: [\"true\"]\n"
      "  gracePeriod: 2m\n  runtimeLimit: \"02:00:00\"\n  runtimeEstimate: 600\n");
  CliResult file = Run("submit -f " + doc + " -o json");
  ASSERT_EQ(file.code, 0) << file.output;
  const Json stored = Job(Json::parse(file.output)["id"])["spec"];
  EXPECT_EQ(stored["gracePeriod"], 120.0);
  EXPECT_EQ(stored["runtimeLimit"], 7200.0);
  EXPECT_EQ(stored["runtimeEstimate"], 600.0);
  const std::string wrong = WriteFile(
      "wrong.yaml",
      "metadata: {name: train, project: vision}\nspec:\n  gpus: 1\n  command: [\"true\"]\n"
      "  gracePeriod: a while\n");
  CliResult refused = Run("submit -f " + wrong);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.output.find("wrong.yaml:5:3: spec.gracePeriod: \"a while\" is not a duration"),
            std::string::npos)
      << refused.output;
  // Through the API as well (the server reads the same way).
  HttpResult api = SubmitSpec("vision", {{"gpus", 1}, {"runtimeLimit", "1d"}});
  ASSERT_EQ(api.status, 201) << api.text;
  EXPECT_EQ(api.body["spec"]["runtimeLimit"], 86400.0);
  EXPECT_EQ(SubmitSpec("vision", {{"gpus", 1}, {"gracePeriod", "soon"}}).status, 400);
}

// get jobs shows what waits or runs; --all the rest too, and -o wide with it is sacct's view.
TEST_F(ServerTest, GetJobsIsActiveByDefaultWithAHistoryView) {
  ApplyEstate();
  // A label no node has: they wait, and a cancel ends one at once.
  const Json nowhere = {{"gpus", 1}, {"nodeSelector", {{"zone", "none"}}}};
  const int64_t ended = SubmitSpec("vision", nowhere).body["id"];
  const int64_t waiting = SubmitSpec("vision", nowhere).body["id"];
  ASSERT_EQ(Run("cancel " + std::to_string(ended)).code, 0);
  ASSERT_TRUE(Eventually([&] { return Phase(ended) == "Cancelled"; })) << Phase(ended);
  CliResult active = Run("get jobs -o json");
  ASSERT_EQ(active.code, 0) << active.output;
  std::set<int64_t> ids;
  const Json listed = Json::parse(active.output);
  for (const Json& j : listed["items"]) ids.insert(j["id"].get<int64_t>());
  EXPECT_EQ(ids, (std::set<int64_t>{waiting})) << active.output;
  CliResult all = Run("get jobs --all -o json");
  ASSERT_EQ(all.code, 0) << all.output;
  EXPECT_EQ(Json::parse(all.output)["items"].size(), 2u) << all.output;
  CliResult phase = Run("get jobs --phase Cancelled -o json");
  ASSERT_EQ(phase.code, 0) << phase.output;
  ASSERT_EQ(Json::parse(phase.output)["items"].size(), 1u) << phase.output;
  EXPECT_EQ(Json::parse(phase.output)["items"][0]["id"], ended);
  CliResult history = Run("get jobs --all -o wide");
  ASSERT_EQ(history.code, 0) << history.output;
  EXPECT_EQ(history.output.rfind("ID   NAME   USER    PROJECT   PHASE       START", 0), 0u)
      << history.output;
  EXPECT_NE(history.output.find("ELAPSED    EXIT CODE"), std::string::npos) << history.output;
  EXPECT_NE(history.output.find(std::to_string(ended) + "    job    admin   vision    Cancelled"),
            std::string::npos)
      << history.output;
}

TEST_F(ServerTest, DeleteJobsObjectsAndWhatAFileNames) {
  ApplyEstate();
  // Waits: a label no node has.
  const int64_t id =
      SubmitSpec("vision", {{"gpus", 1}, {"nodeSelector", {{"zone", "none"}}}}).body["id"];
  CliResult del = Run("delete job " + std::to_string(id));
  ASSERT_EQ(del.code, 0) << del.output;
  EXPECT_NE(del.output.find("job " + std::to_string(id) + " deleted (cancelled)"),
            std::string::npos);
  EXPECT_EQ(Phase(id), "Cancelled");
  EXPECT_EQ(Run("delete job " + std::to_string(id)).code, 6);  // already ended, as cancel says
  EXPECT_EQ(Run("delete job 999").code, 5);
  EXPECT_EQ(Run("delete job abc").code, 2);
  EXPECT_EQ(Run("delete project no-such-project").code, 5);
  EXPECT_EQ(Run("delete").code, 2);
  EXPECT_EQ(Run("delete widgets w").code, 2);
  // -f: what the documents name, the last first (a project before its team).
  const std::string extra = WriteFile("extra.yaml",
                                      "kind: Team\nmetadata: {name: ops}\nspec: {organization: "
                                      "acme}\n---\nkind: Project\nmetadata: {name: infra}\n"
                                      "spec: {team: ops}\n---\nkind: PriorityClass\n"
                                      "metadata: {name: low}\nspec: {value: 1}\n");
  ASSERT_EQ(Run("apply -f " + extra).code, 0);
  ASSERT_EQ(Http(*server_, "GET", "/api/v1/projects/infra", admin_).status, 200);
  CliResult by_file = Run("delete -f " + extra);
  ASSERT_EQ(by_file.code, 0) << by_file.output;
  EXPECT_LT(by_file.output.find("PriorityClass low deleted"),
            by_file.output.find("Team ops deleted"))
      << by_file.output;
  for (const char* path :
       {"/api/v1/projects/infra", "/api/v1/teams/ops", "/api/v1/priorityclasses/low"}) {
    EXPECT_EQ(Http(*server_, "GET", path, admin_).status, 404) << path;
  }
  // Deleting again: not found, exit 5.
  EXPECT_EQ(Run("delete -f " + extra).code, 5);
  // A job document names no job; nothing is deleted when a document is wrong.
  const std::string job = WriteFile(
      "job.yaml",
      "kind: PriorityClass\nmetadata: {name: high}\nspec: {value: 100}\n---\nmetadata: {name: "
      "train, project: vision}\nspec: {gpus: 1}\n");
  CliResult refused = Run("delete -f " + job);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.output.find("a job document names no job"), std::string::npos)
      << refused.output;
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/priorityclasses/high", admin_).status, 200);
  EXPECT_EQ(Run("delete project vision -f " + job).code, 2);
  EXPECT_EQ(Run("delete -f " + WriteFile("empty.yaml", "")).code, 2);
}

TEST_F(ServerTest, VersionOfClientAndServer) {
  CliResult v = Run("version");
  ASSERT_EQ(v.code, 0) << v.output;
  HttpResult api = Http(*server_, "GET", "/api/v1/version", admin_);
  ASSERT_EQ(api.status, 200) << api.text;
  const std::string server_version = api.body.value("version", "");
  EXPECT_FALSE(server_version.empty());
  EXPECT_NE(v.output.find("Client Version: " + server_version), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("Server Version: " + server_version + " (API v1"), std::string::npos)
      << v.output;
  CliResult json = Run("version -o json");
  ASSERT_EQ(json.code, 0) << json.output;
  EXPECT_EQ(Json::parse(json.output)["server"]["version"], server_version);
  // Read access: without a valid token the server's is refused, the client's still printed.
  EXPECT_EQ(Http(*server_, "GET", "/api/v1/version", "").status, 401);
  CliResult anonymous = Run("version", "mrd_0000000000000000_" + std::string(48, '0'));
  EXPECT_EQ(anonymous.code, 4);
  EXPECT_NE(anonymous.output.find("Client Version: " + server_version), std::string::npos);
  EXPECT_EQ(Cli(kBinary, "version", "http://127.0.0.1:1", admin_).code, 3);
}

TEST_F(ServerTest, LabelSelectorsFilterOnTheServer) {
  ApplyEstate();
  auto labelled = [&](const Json& labels) {
    HttpResult r = SubmitSpec("vision", {{"gpus", 1}, {"labels", labels}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("id", int64_t{0});
  };
  const int64_t batch = labelled({{"team", "nlp"}, {"tier", "batch"}});
  const int64_t serve = labelled({{"team", "nlp"}, {"tier", "serve"}});
  const int64_t vision = labelled({{"team", "vision"}});
  auto ids = [&](const std::string& args) {
    CliResult r = Run("get jobs " + args + " -o json");
    EXPECT_EQ(r.code, 0) << args << ": " << r.output;
    std::set<int64_t> out;
    const Json body = Json::parse(r.output, nullptr, false);
    if (!body.is_object()) return out;
    for (const Json& j : body["items"]) out.insert(j["id"].get<int64_t>());
    return out;
  };
  EXPECT_EQ(ids("-l team=nlp,tier!=batch"), (std::set<int64_t>{serve}));
  EXPECT_EQ(ids("-l team=nlp"), (std::set<int64_t>{batch, serve}));
  EXPECT_EQ(ids("-l tier"), (std::set<int64_t>{batch, serve}));
  EXPECT_EQ(ids("-l '!tier'"), (std::set<int64_t>{vision}));
  EXPECT_EQ(ids("-l tier!=batch"), (std::set<int64_t>{serve, vision}));
  EXPECT_EQ(ids("--selector team==vision"), (std::set<int64_t>{vision}));
  // Pages of a selector follow `continue` on the server's scan: one a page, all of them.
  EXPECT_EQ(ids("-l team=nlp --limit 1 --all"), (std::set<int64_t>{batch, serve}));
  HttpResult page = Http(*server_, "GET", "/api/v1/jobs?labelSelector=team%3Dnlp&limit=1", admin_);
  ASSERT_EQ(page.status, 200) << page.text;
  EXPECT_EQ(page.body["items"].size(), 1u);
  EXPECT_FALSE(page.body["continue"].is_null());
  // A malformed selector is an error naming it, from the CLI and from the API.
  CliResult bad = Run("get jobs -l 'team in (a,b)'");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("-l: label selector"), std::string::npos) << bad.output;
  HttpResult api = Http(*server_, "GET", "/api/v1/jobs?labelSelector=%3Dx", admin_);
  EXPECT_EQ(api.status, 400);
  EXPECT_NE(api.body["error"].value("message", "").find("labelSelector: label selector \"=x\""),
            std::string::npos)
      << api.text;
  EXPECT_EQ(Run("get events -l team=nlp").code, 2);
  // Nodes carry their labels and are selected on them (the declared pool's have none).
  CliResult nodes = Run("get nodes -l '!no-such-label' -o json");
  ASSERT_EQ(nodes.code, 0) << nodes.output;
  const Json all_nodes = Json::parse(nodes.output)["items"];
  EXPECT_EQ(all_nodes.size(), 2u);
  EXPECT_TRUE(all_nodes[0].contains("labels")) << all_nodes[0].dump();
  CliResult none = Run("get nodes -l no-such-label -o json");
  ASSERT_EQ(none.code, 0) << none.output;
  EXPECT_TRUE(Json::parse(none.output)["items"].empty());
}

// -w prints the list, then a line per change: a job submitted after it started appears.
TEST_F(ServerTest, WatchPrintsALinePerChange) {
  ApplyEstate();
  CliChild jobs("get jobs -w", server_->url(), admin_);
  ASSERT_TRUE(jobs.WaitFor("ID   NAME")) << jobs.output();
  CliChild events("get events -w", server_->url(), admin_);
  ASSERT_TRUE(events.WaitFor("SEQ")) << events.output();
  Json job = {{"metadata", {{"name", "watched-job"}, {"project", "vision"}}},
              {"spec", {{"gpus", 1}, {"command", {"true"}}}}};
  HttpResult sub = Http(*server_, "POST", "/api/v1/jobs", admin_, job.dump());
  ASSERT_EQ(sub.status, 201) << sub.text;
  const std::string id = std::to_string(sub.body["id"].get<int64_t>());
  ASSERT_TRUE(jobs.WaitFor(id + "    watched-job   vision")) << jobs.output();
  ASSERT_TRUE(events.WaitFor("Job/" + id)) << events.output();
  // Its cancellation is a change too, though the job is no longer active.
  ASSERT_EQ(Run("cancel " + id).code, 0);
  ASSERT_TRUE(jobs.WaitFor("Cancelled")) << jobs.output();
  // The header was printed once.
  EXPECT_EQ(jobs.output().find("ID   NAME", 1), std::string::npos) << jobs.output();
  const int status = jobs.Interrupt();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  // Only what can be watched.
  EXPECT_EQ(Run("get projects -w").code, 2);
}

// `completion bash` is a valid script, generated from the CLI's own commands and flags.
TEST(Completion, BashCompletesSubcommandsResourcesAndChoices) {
  base::testing::TempDir dir;
  CliResult script = Cli(kBinary, "completion bash", "", "");
  ASSERT_EQ(script.code, 0) << script.output;
  const std::string path = WriteTestFile(dir.File("meridian.bash"), script.output);
  EXPECT_EQ(Cli("bash", "-n " + path, "", "").code, 0);
  const std::string probe = WriteTestFile(
      dir.File("probe.sh"),
      "source " + path +
          "\n"
          "try_complete() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); "
          "COMPREPLY=(); _meridian; echo \"${COMPREPLY[*]}\"; }\n"
          "try_complete meridian ge\ntry_complete meridian get j\ntry_complete meridian get -o ''\n"
          "try_complete meridian token c\ntry_complete meridian get jobs --wa\n"
          "try_complete meridian submit --grace\ntry_complete meridian --ser\n"
          "try_complete meridian get --hel\n");
  CliResult r = Cli("bash", probe, "", "");
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> lines;
  std::stringstream in(r.output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u) << r.output;
  EXPECT_EQ(lines[0], "get");
  EXPECT_EQ(lines[1], "jobs");
  EXPECT_EQ(lines[2], "table wide json yaml csv");
  EXPECT_EQ(lines[3], "create");
  EXPECT_EQ(lines[4], "--watch");
  EXPECT_EQ(lines[5], "--grace-period");
  EXPECT_EQ(lines[6], "--server");
  EXPECT_EQ(lines[7], "--help");  // the root's and the subcommand's, once
  CliResult zsh = Cli(kBinary, "completion zsh", "", "");
  ASSERT_EQ(zsh.code, 0);
  EXPECT_EQ(zsh.output.rfind("#compdef meridian\n", 0), 0u) << zsh.output;
  EXPECT_EQ(Cli(kBinary, "completion fish", "", "").code, 2);
}

TEST_F(ServerTest, EveryPathOfTheOpenApiDocumentIsServed) {
  // Every documented path must reach a handler (any answer but "no such API path").
  const std::vector<std::string> paths = DocumentedPaths("1");
  ASSERT_GE(paths.size(), 20u);
  for (const std::string& p : paths) {
    bool served = false;
    for (const char* method : {"GET", "POST", "PUT", "DELETE"}) {
      HttpResult r = Http(*server_, method, p, admin_, "{}");
      served = served || (r.status != 0 && r.text.find("no such API path") == std::string::npos);
    }
    EXPECT_TRUE(served) << p;
  }
}

// `--log-format json`: every line of the server's log is a JSON object with its time, level and
// message; a request that changes something has an access line, and a job's transitions have a
// line each. Successful reads (the health checks that Start polls) stay at debug, out of it.
TEST(ServerLogs, JsonLinesWithAccessAndTransitionLines) {
  base::testing::TempDir dir;
  ServerProcess server(kBinary, dir.File("data"), {"--log-format", "json"});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("data.log"));
  const std::string token = server.admin_token();
  const std::string estate = WriteTestFile(dir.File("estate.yaml"), kEstate);
  CliResult applied = Cli(kBinary, "apply -f " + estate + " -m first", server.url(), token);
  ASSERT_EQ(applied.code, 0) << applied.output;
  Json job = {{"metadata", {{"name", "train"}, {"project", "vision"}}},
              {"spec", {{"gpus", 8}, {"command", {"true"}}, {"runtimeEstimate", 3600}}}};
  HttpResult sub = Http(server, "POST", "/api/v1/jobs", token, job.dump());
  ASSERT_EQ(sub.status, 201) << sub.text;
  const int64_t id = sub.body["id"].get<int64_t>();
  ASSERT_TRUE(Eventually([&] { return JobPhase(server, token, id) == "Placed"; }));
  HttpResult cancel = Http(server, "POST", "/api/v1/jobs/" + std::to_string(id) + "/cancel", token);
  ASSERT_LT(cancel.status, 300) << cancel.text;
  const std::string object = "Job/" + std::to_string(id);

  std::vector<Json> lines;
  auto read = [&] {
    lines.clear();
    std::istringstream in(ReadFile(dir.File("data.log")));
    for (std::string line; std::getline(in, line);) {
      lines.push_back(Json::parse(line, nullptr, /*allow_exceptions=*/false));
    }
  };
  auto has = [&](const std::string& reason) {
    for (const Json& l : lines) {
      if (l.is_object() && l.value("kind", "") == "event" && l.value("object", "") == object &&
          l.value("reason", "") == reason) {
        return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(Eventually([&] {
    read();
    return has("Submitted") && has("Placed") && has("Cancelled");
  })) << ReadFile(dir.File("data.log"));
  bool access = false, listening = false;
  for (const Json& l : lines) {
    ASSERT_TRUE(l.is_object()) << ReadFile(dir.File("data.log"));
    for (const char* key : {"ts", "level", "program", "msg"}) {
      ASSERT_TRUE(l.contains(key) && l[key].is_string()) << key << " in " << l.dump();
    }
    EXPECT_NE(l.value("path", ""), "/healthz") << "a successful read is at debug: " << l.dump();
    if (l.value("kind", "") == "access" && l.value("method", "") == "POST" &&
        l.value("path", "") == "/api/v1/jobs") {
      access = true;
      EXPECT_EQ(l.value("status", ""), "201") << l.dump();
      EXPECT_FALSE(l.value("user", "").empty()) << "the token's user: " << l.dump();
      EXPECT_EQ(l.value("client", ""), "127.0.0.1") << l.dump();
      EXPECT_EQ(l.value("level", ""), "info") << l.dump();
      EXPECT_FALSE(l.value("ms", "").empty()) << l.dump();
    }
    if (l.value("msg", "").find("server listening on http://127.0.0.1:") != std::string::npos) {
      listening = true;
    }
  }
  EXPECT_TRUE(access) << ReadFile(dir.File("data.log"));
  EXPECT_TRUE(listening) << ReadFile(dir.File("data.log"));
}

// SIGTERM stops the dev estate in seconds: its agents stop first, while the API still answers
// their last report (they had waited out their HTTP timeout, a minute, on a server that had
// stopped reading).
TEST(DevEstate, StopsWithinSecondsOfSigtermItsAgentsFirst) {
  base::testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // the agents' tasks run under uids of their own
  // Agents only (the dev estate's Slurm cluster and its stop: meridian_slurm_e2e_test).
  ServerProcess server(kBinary, dir.File("dev"), {"--dev", "--dev-slurm", "off"});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("dev.log"));
  ASSERT_TRUE(Eventually(
      [&] {
        HttpResult nodes = Http(server, "GET", "/api/v1/nodes", server.admin_token());
        int registered = 0;
        for (const Json& n : nodes.body.value("items", Json::array())) {
          registered += n.value("source", "") == "registered";
        }
        return registered == 6;
      },
      60))
      << ReadFile(dir.File("dev.log"));
  const auto t0 = std::chrono::steady_clock::now();
  server.Stop(SIGTERM);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[figure] dev estate with 6 agents stopped %.2f s after SIGTERM\n", seconds);
  EXPECT_LT(seconds, 20) << ReadFile(dir.File("dev.log"));
  EXPECT_NE(ReadFile(dir.File("dev.log")).find("dev estate stopped"), std::string::npos);
}

TEST(ServerTls, ServesHttpsWithTheGivenCertificate) {
  base::testing::TempDir dir;
  const std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl (Debian package openssl) is needed: " << cmd;
  ServerProcess server(kBinary, dir.File("data"), {"--tls-cert", cert, "--tls-key", key});
  ASSERT_TRUE(server.Start()) << ReadFile(dir.File("data.log"));
  const std::string token = server.admin_token();
  ASSERT_TRUE(Eventually([&] {
    return Cli(kBinary, "--ca-cert " + cert + " get jobs", server.url(), token).code == 0;
  })) << Cli(kBinary, "--ca-cert " + cert + " get jobs", server.url(), token).output;
  CliResult untrusted = Cli(kBinary, "get jobs", server.url(), token);
  EXPECT_EQ(untrusted.code, 3);
  EXPECT_NE(untrusted.output.find("not trusted"), std::string::npos) << untrusted.output;
  CliResult plain =
      Cli(kBinary, "get jobs", "http://127.0.0.1:" + std::to_string(server.port()), token);
  EXPECT_NE(plain.code, 0);
}

}  // namespace
}  // namespace meridian::testing
