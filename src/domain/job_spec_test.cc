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
      {{{"ports", {8888, 70000}}}, "spec.ports[1]: must be between 1 and 65535, not 70000"},
      {{{"ports", {"8888"}}}, "spec.ports[0]: must be an integer, not a string"},
      {{{"ports", 8888}}, "spec.ports: must be a list"},
  };
  for (const Case& c : cases) {
    std::string errors;
    EXPECT_FALSE(Submit(c.spec, &errors)) << c.spec.dump();
    EXPECT_NE(errors.find(c.error), std::string::npos) << c.spec.dump() << " -> " << errors;
  }
}

// The ports a task serves are kept as given, for `submit` and `describe` to say how to reach them.
TEST(JobSpecTest, PortsAreKeptForPortForward) {
  auto doc = Submit({{"type", "interactive"}, {"ports", {8888, 6006}}});
  ASSERT_TRUE(doc);
  auto back = DecodeJobSpec(doc->spec);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ports, (std::vector<int64_t>{8888, 6006}));
}

// Durations are seconds, or strings with units (base/duration.h); the stored form is seconds.
TEST(JobSpecTest, DurationsTakeUnitsAndAreStoredAsSeconds) {
  std::string errors;
  auto doc = Submit({{"gracePeriod", "45s"},
                     {"runtimeLimit", "1h30m"},
                     {"runtimeEstimate", "01:00:00"},
                     {"minRuntime", 600}},
                    &errors);
  ASSERT_TRUE(doc) << errors;
  EXPECT_EQ(doc->spec["gracePeriod"], 45.0);
  EXPECT_EQ(doc->spec["runtimeLimit"], 5400.0);
  EXPECT_EQ(doc->spec["runtimeEstimate"], 3600.0);
  EXPECT_EQ(doc->spec["minRuntime"], 600.0);
  EXPECT_EQ(doc->typed.runtime_limit, 5400.0);
  auto back = DecodeJobSpec(doc->spec);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->grace_period, 45.0);
  // A bad one names the field, the text and the forms accepted; one past its bound says so.
  EXPECT_FALSE(Submit({{"runtimeLimit", "soon"}}, &errors));
  EXPECT_NE(errors.find("spec.runtimeLimit: \"soon\" is not a duration (use 90s, 15m"),
            std::string::npos)
      << errors;
  EXPECT_FALSE(Submit({{"gracePeriod", "2h"}}, &errors));
  EXPECT_NE(errors.find("spec.gracePeriod: must be between 0 and 3600"), std::string::npos)
      << errors;
  EXPECT_FALSE(Submit({{"gracePeriod", true}}, &errors));
  EXPECT_NE(errors.find("spec.gracePeriod: must be a duration"), std::string::npos) << errors;
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
// Slurm's --array forms: ranges, lists, steps and a limit on how many run at once.
TEST(JobSpecTest, ArraysTakeSlurmsForms) {
  struct Case {
    std::string text;
    std::vector<int64_t> indices;  // empty: refused
    int64_t max_running = 0;
  };
  const std::vector<Case> cases = {
      {"0-3", {0, 1, 2, 3}},
      {"1,3,5-7", {1, 3, 5, 6, 7}},
      {"0-9:4", {0, 4, 8}},
      {"0-7%2", {0, 1, 2, 3, 4, 5, 6, 7}, 2},
      {"5", {5}},
      {"1,3,5-7:2%1", {1, 3, 5, 7}, 1},
      {"", {}},
      {"3-1", {}},
      {"0-3,2", {}},
      {"a-b", {}},
      {"0-3%0", {}},
      {"0-3:0", {}},
      {"-1", {}},
      {"0-100000", {}},
      {"0-99999999", {}},
      {"1,,2", {}},
  };
  for (const Case& c : cases) {
    auto a = ParseArray(c.text);
    if (c.indices.empty()) {
      EXPECT_FALSE(a.ok()) << c.text;
      continue;
    }
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().message();
    EXPECT_EQ(a->Indices(), c.indices) << c.text;
    EXPECT_EQ(a->Count(), static_cast<int64_t>(c.indices.size())) << c.text;
    EXPECT_EQ(a->max_running, c.max_running) << c.text;
  }
  EXPECT_EQ(ParseArray("0-49999%50")->Count(), 50000);
}

TEST(JobSpecTest, ArrayAndDependenciesAreReadNamingTheField) {
  auto doc = Submit({{"array", "0-9%2"}, {"dependencies", {"afterok:12:13", "afterany:14"}}});
  ASSERT_TRUE(doc);
  ASSERT_TRUE(doc->typed.array);
  EXPECT_EQ(doc->typed.array->Count(), 10);
  EXPECT_EQ(doc->typed.array->max_running, 2);
  ASSERT_EQ(doc->typed.dependencies.size(), 2u);
  EXPECT_EQ(doc->typed.dependencies[0].kind, DependencyKind::kAfterOk);
  EXPECT_EQ(doc->typed.dependencies[0].jobs, (std::vector<int64_t>{12, 13}));
  EXPECT_EQ(DependencyText(doc->typed.dependencies[1]), "afterany:14");
  // The canonical form keeps both as written, and decodes back to the same.
  auto back = DecodeJobSpec(doc->spec);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->array->text, "0-9%2");
  EXPECT_EQ(back->dependencies.size(), 2u);

  std::string errors;
  EXPECT_FALSE(Submit({{"array", "9-0"}}, &errors));
  EXPECT_NE(errors.find("spec.array: "), std::string::npos) << errors;
  EXPECT_FALSE(Submit({{"dependencies", {"afterok:12", "after:13"}}}, &errors));
  EXPECT_NE(errors.find("spec.dependencies[1]: "), std::string::npos) << errors;
  EXPECT_FALSE(Submit({{"dependencies", {"afterok:"}}}, &errors));
  EXPECT_NE(errors.find("spec.dependencies[0]: "), std::string::npos) << errors;
  EXPECT_FALSE(Submit({{"dependencies", {"afterok"}}}, &errors));
  EXPECT_NE(errors.find("spec.dependencies[0]: "), std::string::npos) << errors;
  EXPECT_FALSE(Submit({{"dependencies", "afterok:12"}}, &errors));
  EXPECT_NE(errors.find("spec.dependencies: must be a list"), std::string::npos) << errors;
}

}  // namespace meridian::domain
