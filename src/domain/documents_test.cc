#include "domain/documents.h"

#include <gtest/gtest.h>

#include "domain/agent_timing.h"
#include "domain/gpu_health.h"
#include "domain/testing/parse_documents.h"

namespace meridian::domain {
namespace {

std::vector<Document> Parse(const std::string& text, ErrorList* errors) {
  return testing::ParseDocuments(text, "estate.yaml", errors);
}

// A document with one error, and a substring of that error.
struct OneError {
  const char* yaml;
  const char* want;
};

template <size_t N>
void ExpectOneErrorEach(const OneError (&cases)[N]) {
  for (const OneError& c : cases) {
    ErrorList errors;
    Parse(c.yaml, &errors);
    ASSERT_EQ(errors.size(), 1u) << c.yaml << "\n" << errors.ToString();
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos)
        << "want " << c.want << "\ngot  " << errors.ToString();
  }
}

const char* kEstate = R"(kind: Organization
metadata: {name: acme}
---
kind: Team
metadata: {name: product}
spec: {organization: acme}
---
kind: Project
metadata: {name: vision}
spec:
  team: product
  weight: 2
---
kind: Cluster
metadata: {name: onprem}
spec: {type: on-prem, region: eu-west, prices: {H100-80GB: 2.5}}
---
kind: NodePool
metadata: {name: h100}
spec: {cluster: onprem, nodes: 4, gpusPerNode: 8, gpuModel: H100-80GB}
---
kind: Quota
metadata: {name: vision-gpus}
spec: {project: vision, guaranteedGpus: 8, limitGpus: 16}
)";

TEST(Documents, AValidEstateIsCanonical) {
  ErrorList errors;
  auto docs = Parse(kEstate, &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 6u);
  ValidateDesiredState(docs, &errors);
  EXPECT_TRUE(errors.empty()) << errors.ToString();
  EXPECT_EQ(docs[2].spec["weight"], 2.0);
  // Defaults are filled in, so that the same meaning compares equal.
  EXPECT_EQ(docs[4].spec["purpose"], "any");
  EXPECT_EQ(docs[4].spec["gpuSharing"], "mps");  // shares of its GPUs through MPS by default
  EXPECT_EQ(docs[3].spec["backend"], "agent");
  EXPECT_EQ(docs[4].line, 18);
}

TEST(Documents, EveryErrorHasFileLineAndField) {
  const OneError cases[] = {
      {"kind: Team\nmetadata: {name: t}\nspec: {organization: acme, colour: red}\n",
       "estate.yaml:3:28: spec.colour: unknown field"},
      {"kind: NodePool\nmetadata: {name: p}\nspec:\n  cluster: c\n  gpusPerNode: eight\n  "
       "gpuModel: H100-80GB\n",
       "estate.yaml:5:3: spec.gpusPerNode: must be an integer, not a string"},
      {"kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c, gpusPerNode: 65, gpuModel: x}\n",
       "spec.gpusPerNode: 65 is out of range [0, 64]"},
      {"kind: Project\nmetadata: {name: Vision}\nspec: {team: t}\n",
       "estate.yaml:2:12: metadata.name: \"Vision\" is not a valid name"},
      {"kind: Widget\nmetadata: {name: w}\n", "estate.yaml:1:1: kind: unknown kind \"Widget\""},
      {"kind: Quota\nmetadata: {name: q}\nspec: {team: a, project: b}\n",
       "exactly one of organization, team or project"},
      {"kind: Quota\nmetadata: {name: q}\nspec: {project: b, guaranteedGpus: 4, limitGpus: 2}\n",
       "spec.limitGpus: must not be below guaranteedGpus"},
      {"kind: Team\nmetadata: {name: t}\nspec:\n  organization: a\n  organization: b\n",
       "estate.yaml:5:3: spec.organization: duplicate key"},
      {"kind: Team\nmetadata: {name: t\nspec: {}\n", "estate.yaml:"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {type: moon}\n",
       "spec.type: \"moon\" is not one of on-prem, cloud"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {speedFactors: {A100-80GB: 0}}\n",
       "spec.speedFactors: A100-80GB: must be above 0"},
  };
  ExpectOneErrorEach(cases);
}

TEST(Documents, AllErrorsAreReportedNotJustTheFirst) {
  ErrorList errors;
  Parse("kind: Project\nmetadata: {name: p}\nspec: {team: 3, weight: -1, x: 1}\n", &errors);
  EXPECT_EQ(errors.size(), 3u) << errors.ToString();
}

TEST(Documents, DesiredStateChecksReferencesAndDuplicates) {
  ErrorList errors;
  auto docs = Parse(std::string(kEstate) +
                        "---\nkind: Project\nmetadata: {name: speech}\nspec: {team: lab}\n"
                        "---\nkind: Project\nmetadata: {name: vision}\nspec: {team: product}\n"
                        "---\nkind: Policy\nmetadata: {name: fast}\n",
                    &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  ASSERT_EQ(errors.size(), 3u) << errors.ToString();
  EXPECT_NE(errors.ToString().find("Team \"lab\" does not exist"), std::string::npos);
  EXPECT_NE(errors.ToString().find("Project \"vision\" is defined twice"), std::string::npos);
  EXPECT_NE(errors.ToString().find("named \"default\""), std::string::npos);
}

// A Policy whose lease, fence grace and lost timeout cannot kill a lost node's tasks before the
// server runs them elsewhere is refused, with the figures; fields left out are derived.
TEST(Documents, PolicyTimingMustKillALostNodesTasksBeforeItsJobsRunElsewhere) {
  struct Case {
    const char* spec;
    const char* error;  // the single error's text, or "" when valid
    double lease, fence, lost;
  };
  const Case cases[] = {
      // Defaults tolerate minutes of server outage, like Slurm's SlurmdTimeout.
      {"{}", "", 266, 30, 300},
      {"{agentLease: 240, fenceGrace: 30, nodeLostTimeout: 300}", "", 240, 30, 300},
      // A policy written before agentLease existed stays valid: the longest safe lease.
      {"{nodeLostTimeout: 30}", "", 23, 3, 30},
      {"{heartbeatInterval: 0.2, nodeLostTimeout: 2}", "", 1.4, 0.2, 2},
      {"{heartbeatInterval: 0.2, agentLease: 1.5, fenceGrace: 1, nodeLostTimeout: 3}", "", 1.5, 1,
       3},
      // Exactly on the bound (1.6 + 1 + 0.4 is a hair above 3 in binary).
      {"{heartbeatInterval: 0.2, agentLease: 1.6, fenceGrace: 1, nodeLostTimeout: 3}", "", 1.6, 1,
       3},
      {"{fenceGrace: 0, agentLease: 296}", "", 296, 0, 300},
      {"{heartbeatInterval: 0.2, agentLease: 1.7, fenceGrace: 1, nodeLostTimeout: 3}",
       "estate.yaml:3:32: spec.agentLease: agentLease (1.7 s) + fenceGrace (1 s) + 2 × "
       "heartbeatInterval (0.4 s) = 3.1 s exceeds nodeLostTimeout (3 s): a lost node's tasks could "
       "still run when the server runs them elsewhere; raise nodeLostTimeout to at least 3.1 s or "
       "shorten agentLease or fenceGrace",
       0, 0, 0},
      {"{agentLease: 280}",
       "spec.agentLease: agentLease (280 s) + fenceGrace (30 s) + 2 × heartbeatInterval (4 s) = "
       "314 s exceeds nodeLostTimeout (300 s)",
       0, 0, 0},
      {"{agentLease: 240, fenceGrace: 60}", "= 304 s exceeds nodeLostTimeout (300 s)", 0, 0, 0},
      {"{heartbeatInterval: 1, agentLease: 2}",
       "spec.agentLease: 2 s is shorter than three heartbeatIntervals (3 s): one late heartbeat "
       "would stop every task",
       0, 0, 0},
      // The old minimum (three heartbeats) no longer leaves room for a lease and a fence.
      {"{heartbeatInterval: 2, nodeLostTimeout: 6}",
       "spec.nodeLostTimeout: 6 s leaves an agentLease of 1.4 s (nodeLostTimeout − fenceGrace "
       "(0.6 s) − 2 × heartbeatInterval (4 s)), shorter than three heartbeatIntervals (6 s)",
       0, 0, 0},
      {"{agentLease: 0}", "spec.agentLease: must be between 0.05 and 86400", 0, 0, 0},
  };
  for (const Case& c : cases) {
    const std::string yaml =
        std::string("kind: Policy\nmetadata: {name: default}\nspec: ") + c.spec + "\n";
    ErrorList errors;
    auto docs = Parse(yaml, &errors);
    if (std::string(c.error).empty()) {
      ASSERT_TRUE(errors.empty()) << c.spec << "\n" << errors.ToString();
      ASSERT_EQ(docs.size(), 1u);
      const Json& spec = docs[0].spec;
      EXPECT_NEAR(spec["agentLease"].get<double>(), c.lease, 1e-9) << c.spec;
      EXPECT_NEAR(spec["fenceGrace"].get<double>(), c.fence, 1e-9) << c.spec;
      EXPECT_NEAR(spec["nodeLostTimeout"].get<double>(), c.lost, 1e-9) << c.spec;
      // The server reads the same figures from the stored spec.
      const AgentTiming t = AgentTimingOf(spec);
      EXPECT_NEAR(t.agent_lease, c.lease, 1e-9) << c.spec;
      EXPECT_NEAR(t.fence_grace, c.fence, 1e-9) << c.spec;
      continue;
    }
    ASSERT_EQ(errors.size(), 1u) << c.spec << "\n" << errors.ToString();
    EXPECT_NE(errors.ToString().find(c.error), std::string::npos)
        << "want " << c.error << "\ngot  " << errors.ToString();
  }
  // A Policy stored before agentLease and fenceGrace existed gets the validator's defaults.
  const AgentTiming old =
      AgentTimingOf(Json{{"heartbeatInterval", 2.0}, {"nodeLostTimeout", 30.0}});
  EXPECT_DOUBLE_EQ(old.fence_grace, 3);
  EXPECT_DOUBLE_EQ(old.agent_lease, 23);
  const AgentTiming none = AgentTimingOf(Json::object());
  EXPECT_DOUBLE_EQ(none.node_lost_timeout, 300);
  EXPECT_DOUBLE_EQ(none.agent_lease, 266);
}

// The Policy's gpuHealth: read into the stored spec as written (the server reads it from
// there), checked field by field.
TEST(Documents, PolicyGpuHealthIsCheckedAndKept) {
  ErrorList errors;
  auto docs = Parse(
      "kind: Policy\nmetadata: {name: default}\nspec:\n  gpuHealth:\n    remediation: "
      "[/usr/local/bin/reset-gpu, \"{gpu}\"]\n    maxFaults: 2\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  const GpuHealthPolicy p = GpuHealthPolicyOf(docs[0].spec);
  EXPECT_EQ(p.remediation, (std::vector<std::string>{"/usr/local/bin/reset-gpu", "{gpu}"}));
  EXPECT_EQ(p.max_faults, 2);
  EXPECT_EQ(p.fault_window, 24 * 3600.0);
  for (const auto& [spec, error] : std::vector<std::pair<std::string, std::string>>{
           {"{gpuHealth: {maxFaults: 0}}", "spec.gpuHealth.maxFaults"},
           {"{gpuHealth: {faultWindow: 1}}", "spec.gpuHealth.faultWindow"},
           {"{gpuHealth: {remediation: reset}}", "spec.gpuHealth.remediation"},
           {"{gpuHealth: {reset: true}}", "spec.gpuHealth.reset"}}) {
    ErrorList e;
    Parse("kind: Policy\nmetadata: {name: default}\nspec: " + spec + "\n", &e);
    EXPECT_NE(e.ToString().find(error), std::string::npos) << spec << ": " << e.ToString();
  }
}

// Durations of documents take units as job specs do, in YAML as people write them.
TEST(Documents, PolicyDurationsTakeUnits) {
  ErrorList errors;
  auto docs = Parse(
      "kind: Policy\nmetadata: {name: default}\nspec:\n  fairShareHalfLife: 2h\n  "
      "starvationHorizon: 1d12h\n  firstStartWithin: 45m\n  gpuHealth:\n    faultWindow: "
      "\"12:00:00\"\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].spec["fairShareHalfLife"], 7200.0);
  EXPECT_EQ(docs[0].spec["starvationHorizon"], 129600.0);
  EXPECT_EQ(docs[0].spec["usageStretch"], 0.36) << "the default, written out";
  EXPECT_EQ(docs[0].spec["firstStartWithin"], 2700.0);
  EXPECT_EQ(docs[0].spec["firstStartPreemptsAfter"], 600.0) << "the default, written out";
  EXPECT_EQ(GpuHealthPolicyOf(docs[0].spec).fault_window, 43200.0);
  ErrorList bad;
  Parse("kind: Policy\nmetadata: {name: default}\nspec:\n  reserveAfter: 1 hour\n", &bad);
  EXPECT_NE(bad.ToString().find(":4:3: spec.reserveAfter: \"1 hour\" is not a duration"),
            std::string::npos)
      << bad.ToString();
  ErrorList negative;
  Parse("kind: Policy\nmetadata: {name: default}\nspec:\n  usageStretch: -1\n", &negative);
  EXPECT_NE(negative.ToString().find(":4:3: spec.usageStretch: must be between 0 and 100"),
            std::string::npos)
      << negative.ToString();
}

TEST(Documents, JobDocuments) {
  ErrorList errors;
  std::vector<FieldError> syntax;
  auto src = ParseYamlDocuments(
      "metadata: {name: train, project: vision}\nspec:\n  tasks: 2\n  gpus: 8\n  command: [python, "
      "train.py]\n  env: {EPOCHS: 3}\n",
      "job.yaml", &syntax);
  ASSERT_TRUE(src.ok());
  auto job = ValidateJobDocument((*src)[0], &errors);
  ASSERT_TRUE(job) << errors.ToString();
  EXPECT_EQ(job->project, "vision");
  EXPECT_EQ(job->spec["gang"], true);  // several tasks: a gang unless said otherwise
  EXPECT_EQ(job->spec["env"]["EPOCHS"], "3");
  EXPECT_EQ(job->spec["gracePeriod"], 30.0);

  src = ParseYamlDocuments(
      "{\"metadata\": {\"name\": \"x\"}, \"spec\": {\"gpus\": 1, \"gpuMilli\": 500, "
      "\"migProfile\": \"9g.1tb\"}}",
      "", &syntax);
  ASSERT_TRUE(src.ok());
  ErrorList bad;
  EXPECT_FALSE(ValidateJobDocument((*src)[0], &bad));
  EXPECT_EQ(bad.size(), 3u) << bad.ToString();  // project missing, two requests, bad profile
  EXPECT_NE(bad.ToString().find("metadata.project: is required"), std::string::npos);
}

TEST(Documents, PoolsCarryPurposeLabelsAndTaints) {
  ErrorList errors;
  auto docs = Parse(
      "kind: NodePool\nmetadata: {name: serve}\nspec:\n  cluster: c\n  purpose: inference\n"
      "  labels: {gpu-tier: premium}\n  taints:\n    - {key: dedicated, value: serving}\n"
      "    - {key: spot}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].spec["purpose"], "inference");
  EXPECT_EQ(docs[0].spec["labels"]["gpu-tier"], "premium");
  EXPECT_EQ(docs[0].spec["taints"], Json::parse(R"([{"key": "dedicated", "value": "serving"},
                                                    {"key": "spot"}])"));
  // A pool without taints keeps its canonical form as before (no empty list appears).
  auto plain = Parse("kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c}\n", &errors);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0].spec.contains("taints"));
}

// Elastic pools (docs/adr/0039): bounds, a provisioner, durations with units, a price; a fixed
// pool's canonical form keeps none of them.
TEST(Documents, ElasticPoolsHaveBoundsAProvisionerAndTimes) {
  ErrorList errors;
  auto docs = Parse(
      "kind: NodePool\nmetadata: {name: burst}\nspec:\n  cluster: c\n  gpusPerNode: 8\n"
      "  gpuModel: H200-141GB\n  provisioner: aws\n  maxNodes: 4\n  bootDelay: 2m\n"
      "  idleTimeout: 1h\n  price: {onDemand: 6, spot: 2.5}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 1u);
  const Json& spec = docs[0].spec;
  EXPECT_EQ(spec["maxNodes"], 4);
  EXPECT_EQ(spec["minNodes"], 0);
  EXPECT_EQ(spec["provisioner"], "aws");
  EXPECT_EQ(spec["bootDelay"], 120.0);
  EXPECT_EQ(spec["idleTimeout"], 3600.0);
  EXPECT_EQ(spec["price"]["spot"], 2.5);
  EXPECT_FALSE(spec.contains("joinTimeout"));  // left to bootDelay
  auto fixed = Parse("kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c}\n", &errors);
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_FALSE(fixed[0].spec.contains("maxNodes"));
  EXPECT_FALSE(fixed[0].spec.contains("bootDelay"));

  const std::pair<const char*, const char*> cases[] = {
      {"spec: {cluster: c, provisioner: aws}", "spec.maxNodes: is required when a pool is elastic"},
      {"spec: {cluster: c, provisioner: aws, maxNodes: 2, minNodes: 3}",
       "spec.minNodes: must not be above maxNodes"},
      {"spec: {cluster: c, maxNodes: 2}", "spec.provisioner: is required"},
      {"spec: {cluster: c, provisioner: aws, maxNodes: 2, nodes: 3}",
       "spec.nodes: a pool either declares its nodes or is elastic (maxNodes), not both"},
      {"spec: {cluster: c, provisioner: aws, maxNodes: 2, price: {reserved: 1}}",
       "spec.price.reserved: unknown field"},
      {"spec: {cluster: c, provisioner: aws, maxNodes: 2, bootDelay: soon}", "spec.bootDelay"},
      {"spec: {cluster: c, provisioner: AWS, maxNodes: 2}",
       "spec.provisioner: \"AWS\" is not a valid name"},
  };
  for (const auto& [spec_line, want] : cases) {
    ErrorList e;
    Parse(std::string("kind: NodePool\nmetadata: {name: p}\n") + spec_line + "\n", &e);
    EXPECT_NE(e.ToString().find(want), std::string::npos)
        << spec_line << "\nwant " << want << "\ngot  " << e.ToString();
  }
}

TEST(Documents, PoolAndPriorityClassErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c, purpose: serving}\n",
       "spec.purpose: \"serving\" is not one of any, training, inference, interactive"},
      {"kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c, gpuSharing: shared}\n",
       "spec.gpuSharing: \"shared\" is not one of mps, time-slicing, exclusive"},
      {"kind: NodePool\nmetadata: {name: p}\nspec:\n  cluster: c\n  taints:\n    - {value: x}\n",
       "estate.yaml:6:7: spec.taints[0].key: is required"},
      {"kind: NodePool\nmetadata: {name: p}\nspec:\n  cluster: c\n  taints:\n"
       "    - {key: a, effect: NoExecute}\n",
       "spec.taints[0].effect: unknown field"},
      {"kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c, taints: {key: a}}\n",
       "spec.taints: must be a list, not a mapping"},
      {"kind: NodePool\nmetadata: {name: p}\nspec: {cluster: c, taints: [{key: \"\"}]}\n",
       "spec.taints[0].key: must not be empty"},
      {"kind: PriorityClass\nmetadata: {name: high}\nspec:\n  value: 100\n  allowedScopes:\n"
       "    - {team: lab, project: research}\n",
       "spec.allowedScopes[0].project: exactly one of organization, team or project"},
      {"kind: PriorityClass\nmetadata: {name: high}\nspec: {value: 1, allowedScopes: [{group: "
       "x}]}\n",
       "spec.allowedScopes[0].group: unknown field"},
      {"kind: PriorityClass\nmetadata: {name: high}\nspec: {value: 1, allowedScopes: [team/lab]}\n",
       "spec.allowedScopes[0]: must be a mapping, not a string"},
      {"kind: PriorityClass\nmetadata: {name: high}\nspec: {value: 1, allowedScopes: [{team: "
       "Lab}]}\n",
       "spec.allowedScopes[0].team: \"Lab\" is not a valid name"},
  };
  for (const Case& c : cases) {
    ErrorList errors;
    Parse(c.yaml, &errors);
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos)
        << "want " << c.want << "\ngot  " << errors.ToString();
  }
}

TEST(Documents, PriorityClassScopesAreCanonicalAndMustExist) {
  ErrorList errors;
  auto docs =
      Parse(std::string(kEstate) +
                "---\nkind: PriorityClass\nmetadata: {name: urgent}\nspec:\n  value: 100\n"
                "  allowedScopes: [{team: product}, {project: vision}, {organization: acme}]\n"
                "---\nkind: PriorityClass\nmetadata: {name: admins}\n"
                "spec: {value: 50, allowedScopes: []}\n"
                "---\nkind: PriorityClass\nmetadata: {name: open}\nspec: {value: 0}\n",
            &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(docs.size(), 9u);
  EXPECT_EQ(
      docs[6].spec["allowedScopes"],
      Json::parse(R"([{"team": "product"}, {"project": "vision"}, {"organization": "acme"}])"));
  EXPECT_EQ(docs[6].spec["preempting"], true);
  // An empty list (admins only) stays apart from no list (the default).
  EXPECT_EQ(docs[7].spec["allowedScopes"], Json::array());
  EXPECT_FALSE(docs[8].spec.contains("allowedScopes"));
  ValidateDesiredState(docs, &errors);
  EXPECT_TRUE(errors.empty()) << errors.ToString();

  ErrorList dangling;
  auto bad = Parse(std::string(kEstate) +
                       "---\nkind: PriorityClass\nmetadata: {name: urgent}\n"
                       "spec: {value: 1, allowedScopes: [{team: lab}, {project: vision}]}\n",
                   &dangling);
  ASSERT_TRUE(dangling.empty()) << dangling.ToString();
  ValidateDesiredState(bad, &dangling);
  ASSERT_EQ(dangling.size(), 1u) << dangling.ToString();
  EXPECT_NE(dangling.ToString().find("spec.allowedScopes[0].team: Team \"lab\" does not exist"),
            std::string::npos)
      << dangling.ToString();
}

TEST(Documents, JobsSelectNodesAndTolerateTaints) {
  std::vector<FieldError> syntax;
  auto src = ParseYamlDocuments(
      "metadata: {name: serve, project: vision}\nspec:\n  type: inference\n  gpus: 1\n"
      "  command: [./serve]\n"
      "  nodeSelector: {gpu-tier: premium, zone: 3}\n"
      "  tolerations: [{key: dedicated, value: serving}, {key: spot}]\n",
      "job.yaml", &syntax);
  ASSERT_TRUE(src.ok());
  ErrorList errors;
  auto job = ValidateJobDocument((*src)[0], &errors);
  ASSERT_TRUE(job) << errors.ToString();
  EXPECT_EQ(job->spec["type"], "inference");
  EXPECT_EQ(job->spec["nodeSelector"], Json::parse(R"({"gpu-tier": "premium", "zone": "3"})"));
  EXPECT_EQ(job->spec["tolerations"],
            Json::parse(R"([{"key": "dedicated", "value": "serving"}, {"key": "spot"}])"));

  struct Case {
    const char* spec;
    const char* want;
  };
  const Case cases[] = {
      {"{gpus: 1, nodeSelector: [gpu-tier]}", "spec.nodeSelector: must be a mapping, not a list"},
      {"{gpus: 1, nodeSelector: {tier: {a: b}}}", "spec.nodeSelector.tier: must be a string"},
      {"{gpus: 1, tolerations: [{value: x}]}", "spec.tolerations[0].key: is required"},
      {"{gpus: 1, tolerations: [{key: a, operator: Exists}]}",
       "spec.tolerations[0].operator: unknown field"},
      {"{gpus: 1, type: serving}", "spec.type: \"serving\" is not one of"},
  };
  for (const Case& c : cases) {
    auto bad = ParseYamlDocuments(
        std::string("metadata: {name: x, project: p}\nspec: ") + c.spec + "\n", "", &syntax);
    ASSERT_TRUE(bad.ok()) << c.spec;
    ErrorList e;
    EXPECT_FALSE(ValidateJobDocument((*bad)[0], &e)) << c.spec;
    EXPECT_NE(e.ToString().find(c.want), std::string::npos)
        << "want " << c.want << "\ngot  " << e.ToString();
  }
}

TEST(Documents, HostileYamlEndsInAnErrorWithAPosition) {
  struct Case {
    std::string yaml;
    std::string want;
  };
  const std::vector<Case> cases = {
      // The flow mapping that made yaml-cpp 0.7 loop for ever (found by fuzz/spec_fuzzer).
      {"kind: Project\nmetadata{ :name: research}\nspec: {team: lab}\n", "estate.yaml:"},
      {"a: &x [1, 2]\nb: *x\n", "aliases (*name) are not supported"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than 64 levels"},
      {"key: \"unterminated\n", "estate.yaml:"},
  };
  for (const Case& c : cases) {
    ErrorList errors;
    Parse(c.yaml, &errors);  // returns: the point of the first case
    ASSERT_FALSE(errors.empty()) << c.yaml;
    EXPECT_GT(errors.errors()[0].line, 0) << errors.ToString();
    EXPECT_NE(errors.ToString().find(c.want), std::string::npos) << errors.ToString();
  }
}

}  // namespace
}  // namespace meridian::domain

namespace meridian::domain {
namespace {

// Single sign-on's document (docs/adr/0021-single-sign-on.md): every mistake named by line and
// field, references to the tenancy checked as for other documents.
TEST(Documents, IdentityProviderErrorsNameLineAndField) {
  ErrorList errors;
  auto good = Parse(R"(kind: IdentityProvider
metadata: {name: corp}
spec:
  issuer: https://login.example.com/realms/r
  clientId: meridian
  groups:
    - group: ml
      roles: [{role: member, project: vision}, {role: viewer, team: product}]
)",
                    &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ASSERT_EQ(good.size(), 1u);
  EXPECT_EQ(good[0].spec["usernameClaim"], "sub");
  EXPECT_EQ(good[0].spec["groupsClaim"], "groups");
  Parse(R"(kind: IdentityProvider
metadata: {name: bad}
spec:
  issuer: http://login.example.com
  clientId: ""
  scopes: [profile]
  groups:
    - group: ml
      roles: [{role: member}]
    - group: ops
      roles: [{role: admin, team: lab}, {role: node, node: n1}]
    - roles: [{role: viewer, project: vision}]
      colour: blue
)",
        &errors);
  const std::string all = errors.ToString();
  for (const char* want : {
           "estate.yaml:4:3: spec.issuer: \"http://login.example.com\" must be an https:// URL",
           "estate.yaml:5:3: spec.clientId: must not be empty",
           "estate.yaml:6:3: spec.scopes: must include \"openid\"",
           "spec.groups[0].roles[0].project: member needs exactly its project",
           "spec.groups[1].roles[0].role: admin is global and takes no scope",
           "spec.groups[1].roles[1].role: \"node\" is not one of admin, org-admin, team-lead",
           "spec.groups[2].group: is required",
           "spec.groups[2].colour: unknown field",
       }) {
    EXPECT_NE(all.find(want), std::string::npos) << want << "\nin:\n" << all;
  }
  // A role on a project that does not exist is found when the desired state is checked.
  ErrorList refs;
  ValidateDesiredState(good, &refs);
  EXPECT_NE(refs.ToString().find("spec.groups[0].roles[0].project: Project \"vision\" does not "
                                 "exist"),
            std::string::npos)
      << refs.ToString();
}

}  // namespace
}  // namespace meridian::domain

namespace meridian::domain {
namespace {

const char* kSites = R"(kind: Cluster
metadata: {name: onprem}
spec:
  network: {egressPricePerGib: 0.02, bandwidthGbps: {cloud: 10}}
  storage:
    checkpoints: /shared/checkpoints
    cache: /shared/cache
    cacheCapacityGib: 500
    stagingCommand: [rsync, -a, "{source}/", "{target}/"]
---
kind: Cluster
metadata: {name: cloud}
spec: {type: cloud}
---
kind: Dataset
metadata: {name: imagenet}
spec:
  sizeGib: 150
  locations:
  - {cluster: onprem, path: /shared/datasets/imagenet}
  - {cluster: cloud, url: "s3://bucket/imagenet"}
)";

TEST(Documents, DatasetsAndSitesAreReadIntoTheirTypes) {
  ErrorList errors;
  auto docs = Parse(kSites, &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  const Cluster onprem = ClusterOfSpec(docs[0].name, docs[0].spec);
  EXPECT_DOUBLE_EQ(onprem.egress_per_gib, 0.02);
  EXPECT_EQ(onprem.bandwidth_gbps, (std::map<std::string, double>{{"cloud", 10}}));
  EXPECT_EQ(onprem.storage.checkpoints, "/shared/checkpoints");
  EXPECT_EQ(onprem.storage.cache, "/shared/cache");
  EXPECT_DOUBLE_EQ(onprem.storage.cache_capacity_gib, 500);
  EXPECT_EQ(onprem.storage.staging_command.size(), 4u);
  const Cluster cloud = ClusterOfSpec(docs[1].name, docs[1].spec);
  EXPECT_TRUE(cloud.storage.checkpoints.empty());
  const Dataset d = DatasetOfSpec(docs[2].name, docs[2].spec);
  EXPECT_DOUBLE_EQ(d.size_gib, 150);
  ASSERT_EQ(d.locations.size(), 2u);
  EXPECT_EQ(d.locations[0].path, "/shared/datasets/imagenet");
  EXPECT_EQ(d.locations[1].url, "s3://bucket/imagenet");
  EXPECT_EQ(d.locations[1].cluster, "cloud");
}

TEST(Documents, DatasetAndStorageErrorsNameTheField) {
  const OneError cases[] = {
      {"kind: Dataset\nmetadata: {name: d}\nspec: {locations: [{cluster: c, path: /d}]}\n",
       "estate.yaml:3:1: spec.sizeGib: is required"},
      {"kind: Dataset\nmetadata: {name: d}\nspec: {sizeGib: 1}\n", "spec.locations: is required"},
      {"kind: Dataset\nmetadata: {name: d}\nspec: {sizeGib: 1, locations: [{cluster: c}]}\n",
       "spec.locations[0].path: give exactly one of path and url"},
      {"kind: Dataset\nmetadata: {name: d}\nspec: {sizeGib: 1, locations: [{cluster: c, path: "
       "d}]}\n",
       "spec.locations[0].path: must be an absolute path"},
      {"kind: Dataset\nmetadata: {name: d}\nspec: {sizeGib: 1, locations: [{cluster: c, url: "
       "bucket}]}\n",
       "spec.locations[0].url: \"bucket\" must be a URL"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {storage: {cache: shared}}\n",
       "spec.storage.cache: must be an absolute path"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {storage: {stagingCommand: [cp, x, y]}}\n",
       "spec.storage.stagingCommand: must name both {source} and {target}"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {network: {bandwidthGbps: {b: 0}}}\n",
       "spec.network.bandwidthGbps: b: must be above 0"},
      {"kind: Cluster\nmetadata: {name: c}\nspec: {network: {egress: 1}}\n",
       "spec.network.egress: unknown field"},
  };
  ExpectOneErrorEach(cases);
  // References: a location's cluster and a link's other end must exist.
  ErrorList errors;
  auto docs = Parse(
      "kind: Cluster\nmetadata: {name: a}\nspec: {network: {bandwidthGbps: {mars: 1}}}\n---\n"
      "kind: Dataset\nmetadata: {name: d}\nspec: {sizeGib: 1, locations: [{cluster: b, path: "
      "/d}]}\n",
      &errors);
  ASSERT_TRUE(errors.empty()) << errors.ToString();
  ValidateDesiredState(docs, &errors);
  ASSERT_EQ(errors.size(), 2u) << errors.ToString();
  EXPECT_NE(errors.ToString().find("spec.network.bandwidthGbps.mars: Cluster \"mars\" does not "
                                   "exist"),
            std::string::npos);
  EXPECT_NE(errors.ToString().find("spec.locations[0].cluster: Cluster \"b\" does not exist"),
            std::string::npos);
}

TEST(Documents, AJobNamesItsDatasetsAndAsksForACheckpointFolder) {
  std::vector<FieldError> syntax;
  auto src = ParseYamlDocuments(
      "metadata: {name: train, project: vision}\nspec:\n  gpus: 1\n  command: [train]\n"
      "  datasets: [imagenet, laion, imagenet]\n  checkpoint: true\n",
      "job.yaml", &syntax);
  ASSERT_TRUE(src.ok());
  ErrorList errors;
  auto job = ValidateJobDocument((*src)[0], &errors);
  ASSERT_TRUE(job) << errors.ToString();
  EXPECT_EQ(job->typed.datasets, (std::vector<std::string>{"imagenet", "laion"}));
  EXPECT_TRUE(job->typed.checkpoint);
  const Job j = JobOfSpec(job->name, job->project, job->typed);
  EXPECT_EQ(j.datasets, job->typed.datasets);
  EXPECT_TRUE(j.constraints.checkpoint);
  // Stored and decoded again, the same.
  auto again = DecodeJobSpec(job->spec);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->datasets, job->typed.datasets);

  src = ParseYamlDocuments(
      "metadata: {name: t, project: v}\nspec: {command: [x], datasets: [ImageNet], dataset: "
      "imagenet}\n",
      "job.yaml", &syntax);
  ASSERT_TRUE(src.ok());
  ErrorList bad;
  EXPECT_FALSE(ValidateJobDocument((*src)[0], &bad));
  EXPECT_NE(bad.ToString().find("spec.datasets[0]: \"ImageNet\" is not a dataset name"),
            std::string::npos)
      << bad.ToString();
  EXPECT_NE(bad.ToString().find("spec.dataset: unknown field"), std::string::npos)
      << bad.ToString();
}

}  // namespace
}  // namespace meridian::domain
