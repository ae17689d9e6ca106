#include "sim/demo.h"

#include <cstdio>
#include <map>
#include <memory>

#include "domain/job.h"
#include "sched/assembly.h"
#include "sched/placer.h"
#include "sim/synthetic.h"

namespace meridian::sim {
namespace {

domain::Job MakeJob(std::string name, domain::JobKind kind, int replicas, domain::Request r) {
  domain::Job j;
  j.name = std::move(name);
  j.kind = kind;
  j.project = "vision";
  j.task_groups.push_back({"main", replicas, r});
  return j;
}

std::vector<domain::Job> ExampleJobs() {
  using domain::GpuRequest;
  using domain::JobKind;
  std::vector<domain::Job> jobs;
  domain::Job train =
      MakeJob("llm-pretrain", JobKind::kTraining, 2, {96000, 768 * 1024, GpuRequest::Whole(8)});
  train.gang = true;
  train.datasets = {"common-crawl"};
  jobs.push_back(train);
  domain::Job finetune =
      MakeJob("vit-finetune", JobKind::kTraining, 1, {32000, 256 * 1024, GpuRequest::Whole(4)});
  finetune.datasets = {"imagenet"};
  finetune.constraints.on_prem_only = true;
  jobs.push_back(finetune);
  jobs.push_back(
      MakeJob("notebook-alice", JobKind::kInteractive, 1, {8000, 64 * 1024, GpuRequest::Whole(1)}));
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(MakeJob("embed-serve-" + std::to_string(i), JobKind::kInference, 1,
                           {4000, 16 * 1024, GpuRequest::Fraction(250, 16 * 1024)}));
  }
  jobs.push_back(
      MakeJob("mig-eval", JobKind::kBatch, 2, {4000, 32 * 1024, GpuRequest::Mig("3g.40gb")}));
  domain::Job cheap =
      MakeJob("batch-transcode", JobKind::kBatch, 4, {4000, 16 * 1024, GpuRequest::Whole(1)});
  cheap.constraints.gpu_models = {"T4", "L40S"};
  jobs.push_back(cheap);
  jobs.push_back(MakeJob("etl-cpu", JobKind::kBatch, 2, {16000, 64 * 1024, GpuRequest::None()}));
  domain::Job huge = MakeJob("too-big", JobKind::kTraining, 1, {1000, 1024, GpuRequest::Whole(16)});
  jobs.push_back(huge);
  return jobs;
}

}  // namespace

base::Status RunDemo(std::ostream& out) {
  std::vector<domain::Cluster> clusters;
  std::vector<domain::Node> nodes;
  SyntheticEstate({12, 8, 7}, &clusters, &nodes);
  auto snap = sched::Snapshot::Build(clusters, nodes, domain::GpuCatalog::Builtin());
  if (!snap.ok()) return snap.status();
  const domain::GpuCatalog& catalog = domain::GpuCatalog::Builtin();

  std::vector<domain::Job> jobs = ExampleJobs();
  std::vector<sched::TaskSpec> all;
  std::vector<std::vector<sched::TaskSpec>> per_job;
  for (size_t j = 0; j < jobs.size(); ++j) {
    base::Status valid = domain::ValidateJob(jobs[j], catalog);
    if (!valid.ok()) return base::Status::Invalid("job " + jobs[j].name + ": " + valid.message());
    per_job.push_back(sched::TasksForJob(jobs[j], *snap, static_cast<int32_t>(j)));
    all.insert(all.end(), per_job.back().begin(), per_job.back().end());
  }
  auto profile = sched::BuildProfile(sched::Assembly{}, snap->nodes.size(), all);
  if (!profile.ok()) return profile.status();

  out << "Meridian placement demo: a synthetic hybrid estate (the control plane comes next)\n\n";
  for (const sched::ClusterState& c : snap->clusters) {
    int gpus = 0;
    std::map<std::string, int> models;
    for (const sched::NodeState& n : snap->nodes) {
      if (&snap->clusters[n.cluster] != &c) continue;
      gpus += n.gpu_count;
      if (n.model != sched::kNoModel) models[snap->model(n.model).name] += n.gpu_count;
    }
    out << "  " << c.name << " (" << (c.kind == domain::SiteKind::kOnPrem ? "on-prem" : "cloud")
        << ", " << c.region << "): " << gpus << " GPUs:";
    for (const auto& [m, k] : models) out << " " << k << "x" << m;
    out << "\n";
  }
  out << "\n";

  sched::Placer placer(&*snap, &*profile, 1);
  sched::CycleState cycle;
  for (size_t j = 0; j < jobs.size(); ++j) {
    out << "job " << jobs[j].name << " (" << per_job[j].size() << " task"
        << (per_job[j].size() == 1 ? "" : "s") << ")\n";
    for (size_t t = 0; t < per_job[j].size(); ++t) {
      const sched::TaskSpec& task = per_job[j][t];
      sched::PlaceOutcome o = placer.Place(task, cycle);
      if (!o.placed) {
        out << "  task " << t << ": pending: " << o.why.Summary() << "\n";
        continue;
      }
      placer.Commit(task, o.placement, &cycle);
      const sched::NodeState& n = snap->nodes[o.placement.node];
      out << "  task " << t << ": " << snap->clusters[n.cluster].name << "/" << n.name;
      if (!o.placement.devices.empty()) {
        out << " " << snap->model(n.model).name << " GPU";
        for (const sched::DeviceGrant& d : o.placement.devices) {
          out << " " << d.gpu - n.gpu_begin;
          if (d.mig_profile >= 0) {
            out << "[MIG " << snap->model(n.model).mig_profiles[d.mig_profile].name << " @slice "
                << static_cast<int>(d.mig_start)
                << (d.mig_change == sched::MigChange::kNone ? "" : ", reconfigure") << "]";
          } else if (d.milli < 1000) {
            out << "[" << d.milli << "m]";
          }
        }
      }
      out << "\n";
    }
  }
  out << "\n";
  for (size_t ci = 0; ci < snap->clusters.size(); ++ci) {
    int64_t total = 0, used = 0;
    double cost = 0;
    for (const sched::NodeState& n : snap->nodes) {
      if (n.cluster != static_cast<int32_t>(ci)) continue;
      for (int32_t g = 0; g < n.gpu_count; ++g) {
        const sched::GpuState& gpu = snap->gpus[n.gpu_begin + g];
        total += 1000;
        const int64_t taken = gpu.mig_enabled ? 1000 : 1000 - gpu.free_milli;
        used += taken;
        if (gpu.sharers > 0) cost += snap->clusters[ci].price_by_model[gpu.model];
      }
    }
    char line[160];
    std::snprintf(line, sizeof line, "  %-12s %5.1f of %3lld GPUs in use, %6.2f per hour\n",
                  snap->clusters[ci].name.c_str(), used / 1000.0,
                  static_cast<long long>(total / 1000), cost);
    out << line;
  }
  return base::Status::Ok();
}

}  // namespace meridian::sim
