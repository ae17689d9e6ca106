#include "protocol/agent_protocol.h"

#include <gtest/gtest.h>

namespace meridian::protocol {
namespace {

Assignment SampleAssignment() {
  Assignment a;
  a.job = 42;
  a.task = 1;
  a.generation = 3;
  a.name = "train";
  a.project = "vision";
  a.user = "ana";
  a.stop = true;
  a.stop_reason = "preempted for job 7";
  a.stop_within = 2.5;
  DeviceGrant whole;
  whole.gpu = 2;
  whole.uuid = "GPU-2";
  whole.disable_mig = true;
  DeviceGrant slice;
  slice.gpu = 3;
  slice.uuid = "GPU-3";
  slice.milli = 143;
  slice.mig = MigGrant{"1g.10gb", 4, "create-instance"};
  DeviceGrant share;
  share.gpu = 4;
  share.uuid = "GPU-4";
  share.milli = 250;
  share.memory_mib = 2048;
  share.sharing = "mps";
  a.devices = {whole, slice, share};
  a.world_size = 2;
  a.master_addr = "n1";
  a.run.command = {"python", "train.py"};
  a.run.env = {{"A", "1"}};
  a.run.image = "pytorch:2";
  a.run.working_dir = "/w";
  a.run.grace_period = 12;
  a.run.notice_signal = "SIGUSR1";
  a.run.restart = {true, 5};
  a.run.cpu_milli = 2500;
  a.run.memory_mib = 9000;
  a.run.simulate_utilization = 0.9;
  a.run.runtime_limit = 600;
  return a;
}

TEST(AgentProtocolTest, AnAssignmentSurvivesItsJsonForm) {
  const Assignment a = SampleAssignment();
  auto back = DecodeAssignment(ToJson(a));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->job, 42);
  EXPECT_EQ(back->task, 1);
  EXPECT_EQ(back->generation, 3);
  EXPECT_TRUE(back->stop);
  EXPECT_EQ(back->stop_reason, a.stop_reason);
  EXPECT_EQ(back->stop_within, 2.5);
  ASSERT_EQ(back->devices.size(), 3u);
  EXPECT_TRUE(back->devices[0].disable_mig);
  EXPECT_FALSE(back->devices[0].mig);
  ASSERT_TRUE(back->devices[1].mig);
  EXPECT_EQ(back->devices[1].mig->profile, "1g.10gb");
  EXPECT_EQ(back->devices[1].mig->start, 4);
  EXPECT_EQ(back->devices[1].mig->change, "create-instance");
  EXPECT_EQ(back->devices[2].milli, 250);
  EXPECT_EQ(back->devices[2].memory_mib, 2048);
  EXPECT_EQ(back->devices[2].sharing, "mps");
  EXPECT_EQ(back->devices[0].sharing, "");
  EXPECT_EQ(back->world_size, 2);
  EXPECT_EQ(back->master_addr, "n1");
  EXPECT_EQ(back->run.command, a.run.command);
  EXPECT_EQ(back->run.env, a.run.env);
  EXPECT_EQ(back->run.image, "pytorch:2");
  EXPECT_EQ(back->run.grace_period, 12);
  EXPECT_EQ(back->run.notice_signal, "SIGUSR1");
  EXPECT_TRUE(back->run.restart.on_failure);
  EXPECT_EQ(back->run.restart.max_restarts, 5);
  EXPECT_EQ(back->run.cpu_milli, 2500);
  EXPECT_EQ(back->run.memory_mib, 9000);
  EXPECT_EQ(back->run.simulate_utilization, 0.9);
  EXPECT_EQ(back->run.runtime_limit, 600);
}

TEST(AgentProtocolTest, WhatATaskRunsHasTheJobSpecsDefaults) {
  // An assignment that says nothing of its run: the defaults are the job spec's, not others.
  auto a = DecodeAssignment({{"job", 1}, {"task", 0}, {"generation", 1}});
  ASSERT_TRUE(a.ok()) << a.status().message();
  const domain::JobSpec d;
  EXPECT_EQ(a->run.grace_period, d.grace_period);
  EXPECT_EQ(a->run.cpu_milli, d.cpu_milli);
  EXPECT_EQ(a->run.memory_mib, d.memory_mib);
  EXPECT_EQ(a->run.restart.max_restarts, d.restart.max_restarts);
  EXPECT_EQ(a->run.notice_signal, d.notice_signal);
  // And a spec's values reach the task unchanged.
  domain::JobSpec spec;
  spec.grace_period = 2;
  spec.restart = {true, 9};
  const TaskRun run = TaskRun::Of(spec);
  EXPECT_EQ(run.grace_period, 2);
  EXPECT_EQ(run.restart.max_restarts, 9);
}

TEST(AgentProtocolTest, AHeartbeatAndItsAnswerSurviveTheirJsonForm) {
  Heartbeat h;
  GpuSample g;
  g.index = 3;
  g.utilization = 0.5;
  g.memory_used_mib = 1024;
  g.memory_total_mib = 81559;
  g.sm_clock_mhz = 1980;
  g.ecc_single_bit = 4;
  g.ecc_double_bit = 1;
  g.remapped_rows_correctable = 2;
  g.row_remap_pending = true;
  g.xid_errors = 2;
  g.last_xid = 48;
  g.mig_instances = {"1g.10gb@0"};
  g.mig_mode_pending = true;
  g.slowdown_temperature_c = 87;
  g.throttle_reasons = 0x4;
  g.nvlink_crc_errors = 14;
  h.telemetry = {g, GpuSample{}};
  TaskReport running{7, {}};
  running.report.task = 1;
  running.report.generation = 2;
  running.report.restarts = 1;
  TaskReport exited{8, {}};
  exited.report.state = domain::TaskStatus::State::kExited;
  exited.report.exit_code = 137;
  exited.report.message = "killed";
  TaskReport unknown{9, {}};
  unknown.report.state = domain::TaskStatus::State::kExited;  // no exit code: never ran
  h.tasks = {running, exited, unknown};
  auto back = DecodeHeartbeat(ToJson(h));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->telemetry.size(), 2u);
  const GpuSample& s = back->telemetry[0];
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.utilization, 0.5);
  EXPECT_EQ(s.memory_total_mib, 81559);
  EXPECT_EQ(s.sm_clock_mhz, 1980);
  EXPECT_EQ(s.ecc_single_bit, 4);
  EXPECT_EQ(s.ecc_double_bit, 1);
  EXPECT_EQ(s.remapped_rows_correctable, 2);
  EXPECT_FALSE(s.remapped_rows_uncorrectable);
  EXPECT_EQ(s.row_remap_pending, true);
  EXPECT_FALSE(s.row_remap_failed);
  EXPECT_EQ(s.mig_mode_pending, true);
  EXPECT_FALSE(back->telemetry[1].mig_mode_pending);
  EXPECT_EQ(s.last_xid, 48);
  EXPECT_EQ(s.mig_instances, g.mig_instances);
  EXPECT_EQ(s.slowdown_temperature_c, 87);
  EXPECT_EQ(s.throttle_reasons, 0x4);
  EXPECT_EQ(s.nvlink_crc_errors, 14);
  EXPECT_FALSE(back->telemetry[1].slowdown_temperature_c);
  EXPECT_FALSE(back->telemetry[1].nvlink_crc_errors);
  // What a device cannot read stays absent on the wire and after it.
  EXPECT_FALSE(back->telemetry[1].sm_clock_mhz);
  EXPECT_FALSE(ToJson(GpuSample{}).contains("smClockMhz"));
  EXPECT_TRUE(back->telemetry_errors.empty());
  ASSERT_EQ(back->tasks.size(), 3u);
  EXPECT_EQ(back->tasks[0].job, 7);
  EXPECT_EQ(back->tasks[0].report.state, domain::TaskStatus::State::kRunning);
  EXPECT_EQ(back->tasks[0].report.generation, 2);
  EXPECT_EQ(back->tasks[0].report.restarts, 1);
  EXPECT_EQ(back->tasks[1].report.exit_code, 137);
  EXPECT_EQ(back->tasks[1].report.message, "killed");
  EXPECT_FALSE(back->tasks[2].report.exit_code);

  HeartbeatAnswer answer;
  answer.terms = {0.5, 20, 7.5};
  answer.tasks = {SampleAssignment()};
  const Json json = ToJson(answer);
  auto terms = DecodeTerms(json);
  ASSERT_TRUE(terms.ok()) << terms.status().message();
  EXPECT_EQ(terms->heartbeat_interval, 0.5);
  EXPECT_EQ(terms->lease, 20);
  EXPECT_EQ(terms->fence_grace, 7.5);
  auto tasks = DecodeAssignments(json);
  ASSERT_EQ(tasks.size(), 1u);
  ASSERT_TRUE(tasks[0].assignment.ok());
  EXPECT_EQ(tasks[0].key, std::make_tuple(int64_t{42}, int32_t{1}, int64_t{3}));
}

// GPU health travels both ways: faults to inject and remediations to run in the answer, the
// remediations' results in the next heartbeat; an answer without them has none.
TEST(AgentProtocolTest, GpuHealthOrdersAndResultsSurviveTheirJsonForm) {
  HeartbeatAnswer answer;
  answer.faults = {{2, 79, ""}, {3, 0, "temperature"}};
  answer.remediations = {{1, {"nvidia-smi", "--gpu-reset", "-i", "1"}}};
  auto orders = DecodeHealthOrders(ToJson(answer));
  ASSERT_TRUE(orders.ok()) << orders.status().message();
  ASSERT_EQ(orders->faults.size(), 2u);
  EXPECT_EQ(orders->faults[0].gpu, 2);
  EXPECT_EQ(orders->faults[0].xid, 79);
  // A warning before failure travels instead of an XID (domain/gpu_warnings.h).
  EXPECT_EQ(orders->faults[1].warning, "temperature");
  EXPECT_EQ(orders->faults[1].xid, 0);
  EXPECT_FALSE(ToJson(answer)["faults"][1].contains("xid"));
  ASSERT_EQ(orders->remediations.size(), 1u);
  EXPECT_EQ(orders->remediations[0].command.back(), "1");
  auto none = DecodeHealthOrders(ToJson(HeartbeatAnswer{}));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->faults.empty());
  EXPECT_FALSE(ToJson(HeartbeatAnswer{}).contains("faults"));
  auto bad = DecodeHealthOrders(Json{{"faults", {{{"gpu", 0}, {"xid", 0}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("faults[0].xid"), std::string::npos)
      << bad.status().message();

  Heartbeat beat;
  beat.remediations = {{1, true, "simulated reset"}, {3, false, "a row remap failed"}};
  auto back = DecodeHeartbeat(ToJson(beat));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->remediations.size(), 2u);
  EXPECT_TRUE(back->remediations[0].healthy);
  EXPECT_EQ(back->remediations[1].gpu, 3);
  EXPECT_EQ(back->remediations[1].message, "a row remap failed");
}

// What a connector did on its own (a fenced Slurm job) travels as notices; none, none sent.
TEST(AgentProtocolTest, NoticesSurviveTheirJsonForm) {
  Heartbeat beat;
  beat.notices = {{"BackendJobFenced", "cancelled Slurm job 12 (meridian-7-1, on n2)"}};
  auto back = DecodeHeartbeat(ToJson(beat));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->notices.size(), 1u);
  EXPECT_EQ(back->notices[0].reason, "BackendJobFenced");
  EXPECT_EQ(back->notices[0].message, "cancelled Slurm job 12 (meridian-7-1, on n2)");
  EXPECT_FALSE(ToJson(Heartbeat{}).contains("notices"));
  auto bad = DecodeHeartbeat(Json{{"notices", {{{"reason", "BackendJobFenced"}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("notices[0].message"), std::string::npos)
      << bad.status().message();
}

TEST(AgentProtocolTest, BadReportsAreRefusedNamingTheField) {
  struct Case {
    Json heartbeat;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"tasks", {{{"task", 0}, {"state", "Running"}}}}}, "tasks[0].job: is required"},
      {{{"tasks", {{{"job", 1}, {"state", "Sleeping"}}}}}, "tasks[0].state: must be Running or"},
      {{{"tasks", {{{"job", 1}, {"state", "Running"}, {"generation", -1}}}}},
       "tasks[0].generation: -1 is out of range"},
      {{{"tasks", {{{"job", 1}, {"state", "Running"}, {"generation", "1"}}}}},
       "tasks[0].generation: must be an integer"},
      {{{"tasks", {{{"job", 1}}}}}, "tasks[0].state: is required"},
      {{{"tasks", "all"}}, "tasks: must be a list"},
      {{{"telemetry", 3}}, "telemetry: must be a list"},
      {Json::array(), "heartbeat: must be a JSON object"},
  };
  for (const Case& c : cases) {
    auto r = DecodeHeartbeat(c.heartbeat);
    ASSERT_FALSE(r.ok()) << c.heartbeat.dump();
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.heartbeat.dump() << " -> " << r.status().message();
  }
}

// A GPU's bad figure drops that sample, not the heartbeat: its task reports still count.
TEST(AgentProtocolTest, ABadGpuSampleIsDroppedAndTheRestOfTheHeartbeatKept) {
  const Json beat = {{"telemetry",
                      {{{"index", 0}, {"utilization", 0.25}},
                       {{"index", 1}, {"utilization", 7}},
                       {{"utilization", 0.5}},
                       "hot"}},
                     {"tasks", {{{"job", 1}, {"state", "Running"}}}}};
  auto h = DecodeHeartbeat(beat);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->telemetry.size(), 1u);
  EXPECT_EQ(h->telemetry[0].utilization, 0.25);
  EXPECT_EQ(h->tasks.size(), 1u);
  ASSERT_EQ(h->telemetry_errors.size(), 3u);
  EXPECT_NE(h->telemetry_errors[0].find("telemetry[1]: utilization"), std::string::npos)
      << h->telemetry_errors[0];
  EXPECT_NE(h->telemetry_errors[1].find("index: is required"), std::string::npos)
      << h->telemetry_errors[1];
  EXPECT_NE(h->telemetry_errors[2].find("must be a JSON object"), std::string::npos);
}

TEST(AgentProtocolTest, FieldsFromANewerPeerAreIgnored) {
  Json beat = {{"tasks", {{{"job", 1}, {"state", "Running"}, {"cpuSeconds", 12}}}},
               {"agentFeature", true}};
  auto r = DecodeHeartbeat(beat);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tasks.size(), 1u);
  Json a = ToJson(SampleAssignment());
  a["devices"][0]["nvlinkPeer"] = 3;
  a["futureField"] = "x";
  EXPECT_TRUE(DecodeAssignment(a).ok());
}

TEST(AgentProtocolTest, OneBadAssignmentDoesNotHideTheOthers) {
  Json good = ToJson(SampleAssignment());
  Json bad = good;
  bad["task"] = 0;
  bad["devices"][0]["gpu"] = "two";
  Json nameless = Json::object({{"devices", 3}});
  auto tasks = DecodeAssignments({{"tasks", {good, bad, nameless}}});
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_TRUE(tasks[0].assignment.ok());
  ASSERT_FALSE(tasks[1].assignment.ok());
  EXPECT_NE(tasks[1].assignment.status().message().find("tasks[1]: devices[0].gpu: must be an"),
            std::string::npos)
      << tasks[1].assignment.status().message();
  // Its key is still known, so the agent can report it rather than stop what runs under it.
  EXPECT_EQ(tasks[1].key, std::make_tuple(int64_t{42}, int32_t{0}, int64_t{3}));
  EXPECT_FALSE(tasks[2].assignment.ok());
  EXPECT_FALSE(tasks[2].key);
}

TEST(AgentProtocolTest, ARegistrationSurvivesItsJsonForm) {
  Registration r;
  r.node = "n1";
  r.cluster = "onprem";
  r.labels = {{"zone", "a"}};
  r.cpu_milli = 64000;
  r.memory_mib = 512000;
  r.simulated = true;
  r.gpus = {{0, "GPU-0", "H100-80GB", 81920, 0, true, false, true, "Slurm job 7 (alice)"},
            {1, "GPU-1", "H100-80GB", 81920, 0, true, true, false, ""}};
  r.unavailable = "drained in Slurm: maintenance";
  r.unmanaged_cpu_milli = 16000;
  r.unmanaged_memory_mib = 1000;
  auto back = DecodeRegistration(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->node, "n1");
  EXPECT_EQ(back->labels.at("zone"), "a");
  EXPECT_EQ(back->cpu_milli, 64000);
  ASSERT_EQ(back->gpus.size(), 2u);
  EXPECT_TRUE(back->gpus[1].mig_enabled);
  EXPECT_FALSE(back->gpus[1].healthy);
  EXPECT_EQ(back->gpus[0].unmanaged, "Slurm job 7 (alice)");
  EXPECT_EQ(back->gpus[1].unmanaged, "");
  EXPECT_EQ(back->unavailable, "drained in Slurm: maintenance");
  EXPECT_EQ(back->unmanaged_cpu_milli, 16000);
  EXPECT_EQ(back->unmanaged_memory_mib, 1000);
  // Held outside Meridian: never more than the node has.
  Json more = ToJson(r);
  more["unmanagedCpuMilli"] = 64001;
  auto refused = DecodeRegistration(more);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unmanagedCpuMilli"), std::string::npos)
      << refused.status().message();
  auto missing = DecodeRegistration({{"node", "n1"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cluster: is required"), std::string::npos);
}

TEST(AgentProtocolTest, TheShimsFilesSurviveTheirJsonForm) {
  ShimSpec s;
  s.argv = {"sleep", "1"};
  s.env = {{"PATH", "/bin"}};
  s.grace = 4;
  s.notice_signal = 10;
  s.lease = 15;
  s.fence_grace = 3;
  s.cgroup_procs = {"/sys/fs/cgroup/x/cgroup.procs"};
  s.uid = 200007;
  s.gid = 200007;
  s.hide_devices = {"/dev/nvidia1"};
  s.devices_dir = "/dev/nvidia-caps";
  s.devices = {{"nvidia-cap138", 234, 138, 0444}};
  auto spec = DecodeShimSpec(ToJson(s));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->argv, s.argv);
  EXPECT_EQ(spec->env, s.env);
  EXPECT_EQ(spec->grace, 4);
  EXPECT_EQ(spec->notice_signal, 10);
  EXPECT_EQ(spec->fence_grace, 3);
  EXPECT_EQ(spec->cgroup_procs, s.cgroup_procs);
  EXPECT_EQ(spec->uid, 200007);
  EXPECT_EQ(spec->gid, 200007);
  EXPECT_EQ(spec->hide_devices, s.hide_devices);
  EXPECT_EQ(spec->devices_dir, "/dev/nvidia-caps");
  ASSERT_EQ(spec->devices.size(), 1u);
  EXPECT_EQ(spec->devices[0].name, "nvidia-cap138");
  EXPECT_EQ(spec->devices[0].major, 234);
  EXPECT_EQ(spec->devices[0].minor, 138);
  EXPECT_EQ(spec->devices[0].mode, 0444);
  ShimSpec no_fence;
  EXPECT_FALSE(DecodeShimSpec(ToJson(no_fence))->fence_grace);
  EXPECT_FALSE(DecodeShimSpec(ToJson(no_fence))->uid);
  // A task never runs as root, nor as the id that setresuid reads as "unchanged".
  for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{4294967295}}) {
    Json j = ToJson(s);
    j["uid"] = bad;
    EXPECT_FALSE(DecodeShimSpec(j).ok()) << bad;
  }

  ShimExit killed;
  killed.exit_code = 137;
  killed.signal = 9;
  killed.reason = "the agent lost the server for longer than its lease";
  auto exit = DecodeShimExit(ToJson(killed));
  ASSERT_TRUE(exit.ok()) << exit.status().message();
  EXPECT_EQ(exit->exit_code, 137);
  EXPECT_EQ(exit->signal, 9);
  EXPECT_EQ(exit->reason, killed.reason);
  ShimExit never;
  never.reason = "nothing to run";
  EXPECT_FALSE(DecodeShimExit(ToJson(never))->exit_code);

  auto stop = DecodeShimStop(ToJson(ShimStop{"node n1 drained", 2}));
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->reason, "node n1 drained");
  EXPECT_EQ(stop->within, 2);
  EXPECT_FALSE(DecodeShimStop(ToJson(ShimStop{"cancelled", std::nullopt}))->within);

  auto lease = DecodeLeaseTerms(ToJson(LeaseTerms{20, 5}));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->lease, 20);
  EXPECT_EQ(lease->fence_grace, 5);
}

// The channel's messages: answers keep their status and whole body (spaces and all), a ring
// its body; anything else is refused, not read as an answer.
TEST(AgentProtocolTest, ChannelMessagesSurviveTheirTextForm) {
  auto answer = DecodeChannelMessage(ChannelAnswer(200, R"({"tasks": [], "note": "a b"})"));
  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(answer->ring);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, R"({"tasks": [], "note": "a b"})");
  auto empty = DecodeChannelMessage(ChannelAnswer(401, ""));
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->status, 401);
  EXPECT_EQ(empty->body, "");
  auto ring = DecodeChannelMessage(ChannelRing("7 {}"));
  ASSERT_TRUE(ring.has_value());
  EXPECT_TRUE(ring->ring);
  EXPECT_EQ(ring->body, "7 {}");
  for (const char* bad : {"", "ok", "20 x", "2000 x", "-20 x", "099 x", "ringing x", " 200 x"}) {
    EXPECT_FALSE(DecodeChannelMessage(bad).has_value()) << '"' << bad << '"';
  }
}

}  // namespace
}  // namespace meridian::protocol
