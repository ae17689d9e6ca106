#include "cloud/provisioner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>

#include "base/log.h"
#include "base/testing/temp_dir.h"

namespace meridian::cloud {
namespace {

using base::StatusCode;

CreateRequest SampleRequest() {
  CreateRequest r;
  r.pool = "burst";
  r.cluster = "east";
  r.region = "us-east-1";
  r.spot = true;
  r.shape = {8, "H100-80GB", 96000, 1024 * 1024};
  r.boot_seconds = 45;
  r.price_per_hour = 98.5;
  r.nodes = {"burst-1", "burst-2"};
  r.server = "http://127.0.0.1:8080";
  r.token = "agent-bootstrap-token";
  return r;
}

TEST(CreateRequestCodec, RoundTrips) {
  const CreateRequest r = SampleRequest();
  const Json j = ToJson(r);
  EXPECT_EQ(j["shape"]["gpuModel"], "H100-80GB");
  EXPECT_EQ(j["join"]["token"], "agent-bootstrap-token");
  auto back = CreateRequestOf(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->pool, r.pool);
  EXPECT_EQ(back->cluster, r.cluster);
  EXPECT_EQ(back->region, r.region);
  EXPECT_EQ(back->spot, r.spot);
  EXPECT_EQ(back->shape.gpus, 8);
  EXPECT_EQ(back->shape.gpu_model, "H100-80GB");
  EXPECT_EQ(back->shape.cpu_milli, 96000);
  EXPECT_EQ(back->shape.memory_mib, 1024 * 1024);
  EXPECT_DOUBLE_EQ(back->boot_seconds, 45);
  EXPECT_DOUBLE_EQ(back->price_per_hour, 98.5);
  EXPECT_EQ(back->nodes, r.nodes);
  EXPECT_EQ(back->server, r.server);
  EXPECT_EQ(back->token, r.token);
  EXPECT_EQ(ToJson(*back), j);
}

TEST(CreateRequestCodec, OptionalFieldsTakeTheirDefaults) {
  auto r = CreateRequestOf(Json::parse(R"({"pool": "p", "cluster": "c", "shape": {},
      "nodes": ["n1"], "join": {"server": "http://s", "token": "t"}})"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->region, "");
  EXPECT_FALSE(r->spot);
  EXPECT_EQ(r->shape.gpus, 0);
  EXPECT_EQ(r->shape.gpu_model, "");
  EXPECT_EQ(r->shape.cpu_milli, 0);
  EXPECT_DOUBLE_EQ(r->boot_seconds, 0);
  EXPECT_DOUBLE_EQ(r->price_per_hour, 0);
}

TEST(CreateRequestCodec, ErrorsNameTheField) {
  struct Case {
    const char* name;
    std::function<void(Json&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"pool missing", [](Json& j) { j.erase("pool"); }, "pool: must be a non-empty string"},
      {"pool empty", [](Json& j) { j["pool"] = ""; }, "pool: must be a non-empty string"},
      {"cluster number", [](Json& j) { j["cluster"] = 3; }, "cluster: must be a non-empty string"},
      {"region number", [](Json& j) { j["region"] = 3; }, "region: must be a string"},
      {"spot string", [](Json& j) { j["spot"] = "yes"; }, "spot: must be true or false"},
      {"shape list", [](Json& j) { j["shape"] = Json::array(); }, "shape: must be a JSON object"},
      {"gpus negative", [](Json& j) { j["shape"]["gpus"] = -1; },
       "shape.gpus: must be an integer from 0 to 1024"},
      {"gpus fraction", [](Json& j) { j["shape"]["gpus"] = 1.5; },
       "shape.gpus: must be an integer"},
      {"gpu model missing", [](Json& j) { j["shape"].erase("gpuModel"); },
       "shape.gpuModel: must be a non-empty string"},
      {"cpu string", [](Json& j) { j["shape"]["cpuMilli"] = "4"; },
       "shape.cpuMilli: must be an integer"},
      {"boot negative", [](Json& j) { j["bootSeconds"] = -1; },
       "bootSeconds: must be a number from 0"},
      {"price string", [](Json& j) { j["pricePerHour"] = "1"; }, "pricePerHour: must be a number"},
      {"nodes empty", [](Json& j) { j["nodes"] = Json::array(); },
       "nodes: must be a non-empty list"},
      {"node empty", [](Json& j) { j["nodes"][1] = ""; }, "nodes[1]: must be a node name"},
      {"node path", [](Json& j) { j["nodes"][0] = "../etc"; }, "nodes[0]: must be a node name"},
      {"node twice", [](Json& j) { j["nodes"][1] = "burst-1"; },
       "nodes[1]: burst-1 is named twice"},
      {"join missing", [](Json& j) { j.erase("join"); }, "join: must be a JSON object"},
      {"token empty", [](Json& j) { j["join"]["token"] = ""; },
       "join.token: must be a non-empty string"},
  };
  for (const Case& c : cases) {
    Json j = ToJson(SampleRequest());
    c.edit(j);
    auto r = CreateRequestOf(j);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  EXPECT_EQ(CreateRequestOf(Json::array()).status().message(),
            "create request: must be a JSON object");
}

TEST(CreateRequestCodec, ReportsEveryErrorAtOnce) {
  Json j = ToJson(SampleRequest());
  j.erase("pool");
  j["join"]["server"] = 1;
  auto r = CreateRequestOf(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "pool: must be a non-empty string; join.server: must be a non-empty string");
}

TEST(InstanceCodec, RoundTrips) {
  const Instance i{"i-0abc", "burst-1", "burst", "running", 1700000000.25, true};
  const Json j = ToJson(i);
  EXPECT_EQ(j, Json::parse(R"({"id": "i-0abc", "node": "burst-1", "pool": "burst",
      "state": "running", "createdAt": 1700000000.25, "spot": true})"));
  auto back = InstanceOf(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->id, i.id);
  EXPECT_EQ(back->node, i.node);
  EXPECT_EQ(back->pool, i.pool);
  EXPECT_EQ(back->state, i.state);
  EXPECT_DOUBLE_EQ(back->created_at, i.created_at);
  EXPECT_TRUE(back->spot);
}

TEST(InstanceCodec, ListErrorsNameTheEntryAndField) {
  const Json good = ToJson(Instance{"i-1", "n1", "p", "booting", 1, false});
  struct Case {
    Json answer;
    std::string error;
  };
  Json no_node = good;
  no_node.erase("node");
  Json bad_state = good;
  bad_state["state"] = "stopped";
  Json bad_time = good;
  bad_time["createdAt"] = "yesterday";
  const std::vector<Case> cases = {
      {Json{{"instances", {good, good, no_node}}}, "instances[2].node: must be a non-empty string"},
      {Json{{"instances", {bad_state}}}, "instances[0].state: must be booting or running"},
      {Json{{"instances", {good, bad_time}}}, "instances[1].createdAt: must be a number"},
      {Json{{"instances", {good, 7}}}, "instances[1]: must be a JSON object"},
      {Json{{"instances", "all"}}, "instances: must be a list"},
      {Json::object(), "instances: must be a list"},
      {Json::array(), "answer: must be a JSON object"},
  };
  for (const Case& c : cases) {
    auto r = InstancesOf(c.answer);
    ASSERT_FALSE(r.ok()) << c.answer;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.answer << ": " << r.status().message();
  }
  auto ok = InstancesOf(Json{{"instances", {good, good}}});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 2u);
}

TEST(ErrorOf, CapacityAndQuotaAreUnavailableTheRestInternal) {
  struct Case {
    Json answer;
    StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Json::parse(R"({"error": {"code": "capacity", "message": "no H100 in us-east-1a"}})"),
       StatusCode::kUnavailable, "capacity: no H100 in us-east-1a"},
      {Json::parse(R"({"error": {"code": "quota", "message": "64 GPUs at most"}})"),
       StatusCode::kUnavailable, "quota: 64 GPUs at most"},
      {Json::parse(R"({"error": {"code": "invalid", "message": "no such shape"}})"),
       StatusCode::kInternal, "invalid: no such shape"},
      {Json::parse(R"({"error": {"code": "capacity"}})"), StatusCode::kUnavailable,
       "capacity: exited 1"},
      {Json::parse(R"({"error": "bad"})"), StatusCode::kInternal, "internal: exited 1"},
      {Json(), StatusCode::kInternal, "internal: exited 1"},
  };
  for (const Case& c : cases) {
    const base::Status s = ErrorOf(c.answer, "exited 1");
    EXPECT_EQ(s.code(), c.code) << c.answer;
    EXPECT_EQ(s.message(), c.message) << c.answer;
  }
}

// A provisioner program as a /bin/sh script that records its arguments and request.
class ProvisionerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    base::log::LogOptions o;
    o.format = base::log::Format::kJson;
    o.out = &log_;
    base::log::Init(o);
  }
  void TearDown() override { base::log::Init(base::log::LogOptions{}); }

  std::string Script(const std::string& body) {
    const std::string path = dir_.File("provisioner.sh");
    std::ofstream(path) << "#!/bin/sh\n"
                        << "printf '%s\\n' \"$@\" > " << dir_.File("args") << "\n"
                        << "cat > " << dir_.File("stdin") << "\n"
                        << body << "\n";
    chmod(path.c_str(), 0755);
    return path;
  }

  std::string Read(const std::string& name) {
    std::ifstream in(dir_.File(name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  base::testing::TempDir dir_;
  std::ostringstream log_;
};

TEST_F(ProvisionerTest, CreateSendsTheRequestAndReadsTheInstances) {
  const std::string script = Script(R"(echo 'creating two' >&2
echo '{"instances": [{"id": "i-1", "node": "burst-1", "pool": "burst", "state": "booting",
  "createdAt": 100, "spot": true}, {"id": "i-2", "node": "burst-2", "pool": "burst",
  "state": "booting", "createdAt": 101}]}')");
  Provisioner p({script, "--region", "us-east-1"}, 10);
  auto r = p.Create(SampleRequest());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].id, "i-1");
  EXPECT_TRUE((*r)[0].spot);
  EXPECT_EQ((*r)[1].node, "burst-2");
  EXPECT_DOUBLE_EQ((*r)[1].created_at, 101);
  EXPECT_EQ(Read("args"), "--region\nus-east-1\ncreate\n");
  EXPECT_EQ(Json::parse(Read("stdin")), ToJson(SampleRequest()));
  // Standard error went to the log, at info since it worked.
  const Json line = Json::parse(log_.str());
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["msg"], "creating two");
  EXPECT_EQ(line["verb"], "create");
  EXPECT_EQ(line["provisioner"], script);
}

TEST_F(ProvisionerTest, CreateRefusesAnAnswerThatIsNotOneInstancePerNode) {
  const std::string script = Script(
      R"(echo '{"instances": [{"id": "i-1", "node": "burst-1", "pool": "burst", "state": "booting", "createdAt": 1}]}')");
  auto r = Provisioner({script}, 10).Create(SampleRequest());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("answered 1 instance(s) for 2 node(s)"), std::string::npos)
      << r.status().message();
}

TEST_F(ProvisionerTest, ListAndDelete) {
  const std::string script = Script(R"(case "$1" in
list) echo '{"instances": [{"id": "i-7", "node": "n7", "pool": "burst", "state": "running", "createdAt": 5}]}' ;;
delete) echo '{"deleted": ["i-7", "i-8"]}' ;;
esac)");
  Provisioner p({script}, 10);
  auto listed = p.List("burst");
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].state, "running");
  EXPECT_EQ(Json::parse(Read("stdin")), Json::parse(R"({"pool": "burst"})"));
  const base::Status deleted = p.Delete("burst", {"i-7", "i-8"});
  EXPECT_TRUE(deleted.ok()) << deleted.message();
  EXPECT_EQ(Read("args"), "delete\n");
  EXPECT_EQ(Json::parse(Read("stdin")),
            Json::parse(R"({"pool": "burst", "instances": ["i-7", "i-8"]})"));
}

TEST_F(ProvisionerTest, AFailureCarriesItsCodeAndIsLoggedAsAWarning) {
  const std::string script = Script(R"(echo 'out of H100s' >&2
echo '{"error": {"code": "capacity", "message": "no H100 in us-east-1a"}}'
exit 1)");
  auto r = Provisioner({script}, 10).Create(SampleRequest());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "capacity: no H100 in us-east-1a");
  const Json line = Json::parse(log_.str());
  EXPECT_EQ(line["level"], "warn");
  EXPECT_EQ(line["msg"], "out of H100s");
  EXPECT_EQ(line["verb"], "create");
}

TEST_F(ProvisionerTest, AFailureWithoutAnErrorObjectQuotesStandardError) {
  const std::string script = Script(R"(echo 'credentials expired' >&2
echo 'second line' >&2
exit 3)");
  auto r = Provisioner({script}, 10).List("burst");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_EQ(r.status().message(), "internal: provisioner " + dir_.File("provisioner.sh") +
                                      " list exited with status 3: credentials expired");
}

TEST_F(ProvisionerTest, AnAnswerThatIsNotJsonIsQuotedAndCut) {
  const std::string script = Script("echo 'Traceback (most recent call last):'; echo more");
  auto r = Provisioner({script}, 10).List("burst");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find(
                "list: the answer is not a JSON object: 'Traceback (most recent call last):'"),
            std::string::npos)
      << r.status().message();

  const std::string long_line(1000, 'x');
  const std::string script2 = Script("echo " + long_line);
  r = Provisioner({script2}, 10).List("burst");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("'" + std::string(200, 'x') + "...'"), std::string::npos) << m;
  EXPECT_EQ(m.find(std::string(201, 'x')), std::string::npos) << m;
}

TEST_F(ProvisionerTest, AnAnswerWithTheWrongShapeNamesTheField) {
  const std::string script = Script(
      R"(echo '{"instances": [{"id": "i-1", "node": "", "pool": "burst", "state": "booting", "createdAt": 1}]}')");
  auto r = Provisioner({script}, 10).List("burst");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("instances[0].node: must be a non-empty string"),
            std::string::npos)
      << r.status().message();
  const std::string script2 = Script(R"(echo '{"deleted": "all"}')");
  const base::Status s = Provisioner({script2}, 10).Delete("burst", {"i-1"});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deleted: must be a list of ids"), std::string::npos) << s.message();
}

TEST_F(ProvisionerTest, AProgramThatDoesNotAnswerInTimeIsKilled) {
  const std::string script = Script("exec sleep 30");
  const auto start = std::chrono::steady_clock::now();
  auto r = Provisioner({script}, 0.5).List("burst");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("did not answer"), std::string::npos) << r.status().message();
  EXPECT_LT(took, 10);
}

TEST_F(ProvisionerTest, AProgramThatCannotStartIsAnError) {
  auto r = Provisioner({dir_.File("missing")}, 10).List("burst");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing"), std::string::npos) << r.status().message();
  EXPECT_FALSE(Provisioner({}, 10).List("burst").ok());
}

}  // namespace
}  // namespace meridian::cloud
