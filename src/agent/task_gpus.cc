// A task's GPUs before it runs and after (issue 20): the GPU put in the mode its grant wants,
// and the names the task is given. Part of Agent (agent.h); the agent's loop is in agent.cc.
#include <fstream>
#include <set>

#include "agent/agent.h"
#include "base/log.h"
#include "domain/gpu_model.h"

namespace meridian::agent {

namespace {

// The memory slices an instance "profile@start" (or a profile at a start) covers, as a bit set;
// 0 when the catalogue does not know it.
unsigned SlicesOf(const std::string& model, const std::string& profile, int start) {
  const domain::GpuModel* m = domain::GpuCatalog::Builtin().Find(model);
  const domain::MigProfile* p = m ? m->FindMigProfile(profile) : nullptr;
  if (!p || start < 0 || start + p->memory_slices > domain::kMigMemorySlices) return 0;
  return p->SliceBits(start);
}

}  // namespace

Status Agent::PrepareGpus(Task& t) {
  // What the other runs of this node hold: MIG instances, and GPUs used whole or shared.
  std::map<int32_t, std::set<std::string>> held_instances;
  std::set<int32_t> held_plain;
  for (const auto& [key, other] : tasks_) {
    if (&other == &t || other.state == "Exited") continue;
    for (const protocol::DeviceGrant& d : other.assignment.devices) {
      if (d.mig) {
        held_instances[d.gpu].insert(d.mig->profile + "@" + std::to_string(d.mig->start));
      } else {
        held_plain.insert(d.gpu);
      }
    }
  }
  t.device_names.clear();
  t.sharing.reset();
  t.mps.reset();
  t.mig_caps.reset();
  std::vector<MigInstanceIds> mig_ids;  // as the driver's capabilities name its instances
  size_t mig_grants = 0;
  for (const protocol::DeviceGrant& d : t.assignment.devices) {
    const std::string model =
        d.gpu >= 0 && d.gpu < static_cast<int32_t>(gpu_models_.size()) ? gpu_models_[d.gpu] : "";
    if (!d.mig) {
      // A whole GPU or a share of one: out of MIG mode, unless instances of other runs are on it
      // (the control plane would not grant that; the agent does not break what runs).
      if (!held_instances[d.gpu].empty()) {
        return Status(base::StatusCode::kFailedPrecondition,
                      "GPU " + std::to_string(d.gpu) +
                          " holds MIG instances of other tasks: it cannot be used whole");
      }
      if (Status s = gpus_->SetMigMode(d.gpu, false); !s.ok()) return s;
      t.device_names.push_back(d.uuid);
      if (d.milli < 1000) ShareGpu(t, d);
      continue;
    }
    if (held_plain.count(d.gpu)) {
      return Status(
          base::StatusCode::kFailedPrecondition,
          "GPU " + std::to_string(d.gpu) + " is used whole by another task: no MIG there");
    }
    // Instances in the grant's slices that no run holds are left from an earlier layout (the
    // scheduler re-partitioned an idle GPU, or an instance outlived its task): they go first.
    const unsigned wanted = SlicesOf(model, d.mig->profile, d.mig->start);
    const std::string own = d.mig->profile + "@" + std::to_string(d.mig->start);
    if (held_instances[d.gpu].count(own)) {
      return Status(
          base::StatusCode::kFailedPrecondition,
          "GPU " + std::to_string(d.gpu) + ": MIG instance " + own + " is held by another task");
    }
    for (const std::string& instance : gpus_->MigLayout(d.gpu)) {
      if (instance == own || held_instances[d.gpu].count(instance)) continue;
      const auto [profile, start] = ParseMigInstance(instance);
      if ((SlicesOf(model, profile, start) & wanted) == 0) continue;
      if (Status s = gpus_->DestroyMigInstance(d.gpu, profile, start); !s.ok()) return s;
      base::log::Info("GPU {}: destroyed MIG instance {} no task holds, for {}", d.gpu, instance,
                      own);
    }
    auto made = gpus_->CreateMigInstance(d.gpu, d.mig->profile, d.mig->start);
    if (!made.ok()) return made.status();
    t.device_names.push_back(*made);
    ++mig_grants;
    if (auto ids = gpus_->MigIds(d.gpu, *made)) mig_ids.push_back(*ids);
  }
  // On a machine whose driver grants MIG instances as capabilities, the task opens its own
  // instances' only: a /dev/nvidia-caps of its own (IsolateMounts). One the agent cannot name is
  // refused rather than started without its GPU.
  const std::vector<MigCapability> caps = MigCapabilities();
  if (!caps.empty()) {
    const int64_t major = CharDeviceMajor("nvidia-caps");
    const std::vector<MigCapability> own = OwnMigCapabilities(caps, mig_ids);
    if (major < 0 || mig_ids.size() != mig_grants || own.size() != 2 * mig_grants) {
      return Status(base::StatusCode::kFailedPrecondition,
                    "cannot find the driver's capabilities of the task's MIG instances "
                    "(/proc/driver/nvidia/capabilities, nvidia-caps in /proc/devices)");
    }
    t.mig_caps.emplace();
    for (const MigCapability& c : own) t.mig_caps->push_back({c.node(), major, c.minor, c.mode});
  }
  return Status::Ok();
}

void Agent::ShareGpu(Task& t, const protocol::DeviceGrant& d) {
  protocol::SharingNote note;
  note.gpu = d.gpu;
  note.mode = "time-slicing";
  const std::string share = std::to_string(d.milli) + " milli-GPU" +
                            (d.memory_mib > 0 ? ", " + std::to_string(d.memory_mib) + " MiB" : "");
  if (d.sharing == "time-slicing") {
    // Asked for (a development pool): the job's placement says so already.
    t.sharing = note;
    return;
  }
  if (!mps_) mps_ = std::make_unique<MpsDaemons>(o_.mps_control, o_.work_dir + "/mps");
  auto daemon = mps_->Acquire(t.job, d.gpu, d.uuid, t.uid);
  if (daemon.ok()) {
    note.mode = "mps";
    t.mps = *daemon;
  } else {
    note.why =
        daemon.status().message() + ": the share (" + share + ") is time-sliced and not enforced";
    std::ofstream(t.dir + "/output.log", std::ios::app)
        << "meridian: GPU " << d.gpu << ": " << note.why << "\n";
  }
  t.sharing = note;
}

void Agent::ReleaseDevices(const Task& t) {
  // What other runs of this node hold still (an adopted run included, whose sharing is not
  // known to this life of the agent): the shares of a GPU of this job's other tasks, the MIG
  // instances of every task.
  std::set<int32_t> shared;
  std::set<std::pair<int32_t, std::string>> instances;
  for (const auto& [key, other] : tasks_) {
    if (&other == &t || other.state == "Exited") continue;
    for (const protocol::DeviceGrant& d : other.assignment.devices) {
      if (d.mig) instances.insert({d.gpu, d.mig->profile + "@" + std::to_string(d.mig->start)});
      if (!d.mig && d.milli < 1000 && other.job == t.job) shared.insert(d.gpu);
    }
  }
  for (const protocol::DeviceGrant& d : t.assignment.devices) {
    // The job's MPS daemon on the GPU goes when no other run of the job shares the GPU (one an
    // earlier life of the agent started for an adopted run too).
    if (!d.mig && d.milli < 1000 && d.sharing != "time-slicing" && !shared.count(d.gpu)) {
      if (!mps_) mps_ = std::make_unique<MpsDaemons>(o_.mps_control, o_.work_dir + "/mps");
      mps_->Release(t.job, d.gpu, t.uid);
    }
    if (!d.mig) continue;
    if (instances.count({d.gpu, d.mig->profile + "@" + std::to_string(d.mig->start)})) continue;
    if (Status s = gpus_->DestroyMigInstance(d.gpu, d.mig->profile, d.mig->start); !s.ok()) {
      // Left in place: the next grant in these slices destroys it first (PrepareGpus).
      base::log::Warn("{}", s.message());
    }
  }
}

}  // namespace meridian::agent
