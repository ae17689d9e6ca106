#include "domain/job_spec.h"

#include <gtest/gtest.h>

#include "domain/documents.h"

namespace meridian::domain {
namespace {

// Validates a job document with `spec` (running `true` unless it names a command or an image);
// the errors, one per line, when it does not validate.
std::optional<JobDocument> Submit(Json spec, std::string* errors = nullptr) {
  if (!spec.contains("command") && !spec.contains("image")) spec["command"] = {"true"};
  const Json body = {{"metadata", {{"name", "j"}, {"project", "p"}}}, {"spec", spec}};
  const SourceDoc src{body, "", {}};
  ErrorList list;
  auto doc = ValidateJobDocument(src, &list);
  if (errors) *errors = list.ToString();
  return doc;
}

// A job with nothing to run is refused when it is submitted, naming the field, rather than
// placed and failed by its agent; an image's entrypoint is something to run.
TEST(JobSpecTest, NothingToRunIsRefusedAtSubmission) {
  std::string errors;
  EXPECT_FALSE(Submit({{"gpus", 1}, {"command", Json::array()}}, &errors));
  EXPECT_NE(errors.find("spec.command: is required"), std::string::npos) << errors;
  EXPECT_TRUE(Submit({{"gpus", 1}, {"image", "docker.io/library/busybox"}}, &errors)) << errors;
  // A spec stored before this rule decodes as it was (the rule is the submission's).
  EXPECT_TRUE(DecodeJobSpec({{"gpus", 1}}).ok());
}

TEST(JobSpecTest, AnEmptySpecHasTheDefaultsOfTheType) {
  auto doc = Submit(Json::object());
  ASSERT_TRUE(doc);
  const JobSpec d;
  const JobSpec& s = doc->typed;
  EXPECT_EQ(s.type, d.type);
  EXPECT_EQ(s.tasks, 1);
  EXPECT_EQ(s.gpu.kind, GpuRequest::Kind::kNone);
  EXPECT_EQ(s.cpu_milli, d.cpu_milli);
  EXPECT_EQ(s.memory_mib, d.memory_mib);
  EXPECT_EQ(s.grace_period, d.grace_period);
  EXPECT_EQ(s.restart.on_failure, d.restart.on_failure);
  EXPECT_EQ(s.restart.max_restarts, d.restart.max_restarts);
  EXPECT_EQ(s.notice_signal, d.notice_signal);
  EXPECT_EQ(s.simulate_utilization, d.simulate_utilization);
  EXPECT_FALSE(s.gang);
  // The canonical form writes the same defaults, so what is stored says what runs.
  EXPECT_EQ(doc->spec.at("gracePeriod").get<double>(), d.grace_period);
  EXPECT_EQ(doc->spec.at("maxRestarts").get<int64_t>(), d.restart.max_restarts);
}

TEST(JobSpecTest, TheStoredFormDecodesToWhatWasSubmitted) {
  const Json spec = {{"type", "training"},
                     {"tasks", 4},
                     {"gpuMilli", 250},
                     {"gpuMemoryMib", 2048},
                     {"cpuMilli", 3000},
                     {"nodeSelector", {{"zone", "a"}}},
                     {"tolerations", {{{"key", "gpu"}, {"value", "h100"}}, {{"key", "spot"}}}},
                     {"clusters", {"onprem"}},
                     {"gpuModels", {"H100-80GB"}},
                     {"gracePeriod", 5},
                     {"restartPolicy", "on-failure"},
                     {"maxRestarts", 7},
                     {"command", {"python", "train.py"}},
                     {"env", {{"A", "1"}}},
                     {"noticeSignal", "SIGUSR1"},
                     {"runtimeEstimate", 60},
                     {"runtimeLimit", 120}};
  auto doc = Submit(spec);
  ASSERT_TRUE(doc);
  auto back = DecodeJobSpec(doc->spec);
  ASSERT_TRUE(back.ok()) << back.status().message();
  for (const JobSpec* s : {&doc->typed, &*back}) {
    EXPECT_EQ(s->type, JobKind::kTraining);
    EXPECT_EQ(s->tasks, 4);
    EXPECT_TRUE(s->gang);  // the default for more than one task
    EXPECT_EQ(s->gpu.kind, GpuRequest::Kind::kFraction);
    EXPECT_EQ(s->gpu.milli, 250);
    EXPECT_EQ(s->gpu.memory_mib, 2048);
    EXPECT_EQ(s->cpu_milli, 3000);
    EXPECT_EQ(s->node_selector.at("zone"), "a");
    ASSERT_EQ(s->tolerations.size(), 2u);
    EXPECT_EQ(s->tolerations[0].value, "h100");
    EXPECT_EQ(s->tolerations[1].value, "");
    EXPECT_EQ(s->grace_period, 5);
    EXPECT_TRUE(s->restart.on_failure);
    EXPECT_EQ(s->restart.max_restarts, 7);
    EXPECT_EQ(s->command, (std::vector<std::string>{"python", "train.py"}));
    EXPECT_EQ(s->env.at("A"), "1");
    EXPECT_EQ(s->notice_signal, "SIGUSR1");
    EXPECT_EQ(s->runtime_limit, 120);
  }
  // And the stored form is a fixed point: validating it again gives it back unchanged.
  auto again = Submit(doc->spec);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->spec, doc->spec);
}

TEST(JobSpecTest, EachGpuRequestKindSurvivesTheStoredForm) {
  for (const Json& spec : {Json{{"gpus", 8}}, Json{{"migProfile", "1g.10gb"}}, Json::object()}) {
    auto doc = Submit(spec);
    ASSERT_TRUE(doc) << spec.dump();
    auto back = DecodeJobSpec(doc->spec);
    ASSERT_TRUE(back.ok()) << spec.dump() << ": " << back.status().message();
    EXPECT_EQ(back->gpu.kind, doc->typed.gpu.kind) << spec.dump();
    EXPECT_EQ(back->gpu.count, doc->typed.gpu.count) << spec.dump();
    EXPECT_EQ(back->gpu.mig_profile, doc->typed.gpu.mig_profile) << spec.dump();
  }
}

TEST(JobSpecTest, ErrorsNameTheField) {
  struct Case {
    Json spec;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"gpus", 1}, {"gpuMilli", 500}},
       "spec.gpus: give only one of gpus, gpuMilli and migProfile"},
      {{{"gpuMemoryMib", 100}}, "spec.gpuMemoryMib: applies only to a fraction"},
      {{{"migProfile", "9g.999gb"}}, "spec.migProfile: \"9g.999gb\" is not a MIG profile"},
      {{{"gracePeriod", -1}}, "spec.gracePeriod: must be between"},
      {{{"restartPolicy", "always"}}, "spec.restartPolicy: \"always\" is not one of"},
      {{{"runtimeEstimate", 10}, {"runtimeLimit", 5}}, "spec.runtimeEstimate: must not exceed"},
      {{{"tolerations", {{{"value", "x"}}}}}, "spec.tolerations[0].key: is required"},
      {{{"colour", "blue"}}, "spec.colour: unknown field"},
  };
  for (const Case& c : cases) {
    std::string errors;
    EXPECT_FALSE(Submit(c.spec, &errors)) << c.spec.dump();
    EXPECT_NE(errors.find(c.error), std::string::npos) << c.spec.dump() << " -> " << errors;
  }
}

TEST(JobSpecTest, ASpecCannotHoldMegabytes) {
  Json env = Json::object();
  for (size_t i = 0; i <= kMaxEnvVars; ++i) env["V" + std::to_string(i)] = "x";
  std::string errors;
  EXPECT_FALSE(Submit({{"env", env}}, &errors));
  EXPECT_NE(errors.find("spec.env: has 1025 entries; at most 1024"), std::string::npos) << errors;
  // Few variables, but large ones.
  const Json big = {{"A", std::string(kMaxSpecTextBytes, 'x')}};
  EXPECT_FALSE(Submit({{"env", big}}, &errors));
  EXPECT_NE(errors.find("spec.env: holds"), std::string::npos) << errors;
  const Json argv = Json(std::vector<std::string>(kMaxCommandArgs + 1, "a"));
  EXPECT_FALSE(Submit({{"command", argv}}, &errors));
  EXPECT_NE(errors.find("spec.command: has"), std::string::npos) << errors;
  // At the bounds, it is accepted.
  env.erase("V0");
  EXPECT_TRUE(Submit({{"env", env}}, &errors)) << errors;
}

TEST(JobSpecTest, ADamagedStoredSpecIsAnErrorNamingTheField) {
  auto bad = DecodeJobSpec({{"gpus", "eight"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec.gpus: must be an integer"), std::string::npos)
      << bad.status().message();
}

TEST(JobSpecTest, TheSchedulersViewCarriesRequestAndConstraints) {
  auto doc = Submit({{"tasks", 2},
                     {"gpus", 4},
                     {"type", "inference"},
                     {"nodeSelector", {{"zone", "b"}}},
                     {"tolerations", {{{"key", "spot"}}}}});
  ASSERT_TRUE(doc);
  const Job j = JobOfSpec("j", "p", doc->typed);
  EXPECT_EQ(j.kind, JobKind::kInference);
  EXPECT_TRUE(j.gang);
  ASSERT_EQ(j.task_groups.size(), 1u);
  EXPECT_EQ(j.task_groups[0].replicas, 2);
  EXPECT_EQ(j.task_groups[0].request.gpu.count, 4);
  EXPECT_EQ(j.constraints.node_labels.at("zone"), "b");
  ASSERT_EQ(j.constraints.tolerations.size(), 1u);
  EXPECT_EQ(j.constraints.tolerations[0].key, "spot");
}

}  // namespace
}  // namespace meridian::domain
