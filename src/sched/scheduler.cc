#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sched/plugins/cluster_constraint/cluster_constraint.h"
#include "sched/plugins/reservation/reservation.h"

namespace meridian::sched {

namespace {

// GPU milli a granted task holds, as quotas count it: MIG instances by their memory slices.
int64_t GrantedMilli(const Snapshot& s, const Placement& p) {
  int64_t milli = 0;
  for (const DeviceGrant& d : p.devices) {
    if (d.mig_profile >= 0) {
      const GpuState& g = s.gpus[d.gpu];
      milli += 1000 * s.model(g.model).mig_profiles[d.mig_profile].memory_slices /
               domain::kMigMemorySlices;
    } else {
      milli += d.milli;
    }
  }
  return milli;
}

// Once committed, a MIG grant's instance exists: giving the placement back later reuses it.
void SettleMig(Placement* p) {
  for (DeviceGrant& d : p->devices) {
    if (d.mig_profile >= 0) d.mig_change = MigChange::kNone;
  }
}

}  // namespace

Scheduler::Scheduler(Snapshot snapshot, Profile profile, QuotaTree quotas, SchedulerOptions options,
                     uint64_t seed)
    : snapshot_(std::move(snapshot)),
      profile_(std::move(profile)),
      quotas_(std::move(quotas)),
      options_(std::move(options)),
      placer_(&snapshot_, &profile_, seed) {
  // Backfill depends on the reservation filter: a profile without it gets it.
  const bool has_reservation =
      std::any_of(profile_.filters.begin(), profile_.filters.end(),
                  [](const auto& f) { return f->Name() == "reservation"; });
  if (!has_reservation) profile_.filters.push_back(std::make_unique<plugins::Reservation>());
  usage_.resize(quotas_.size());
  placer_.set_static_mig(options_.mig_static);
  gpu_capacity_ = std::max<int64_t>(1, snapshot_.TotalGpuMilli());
  cpu_capacity_ = 1;
  mem_capacity_ = 1;
  for (const NodeState& n : snapshot_.nodes) {
    cpu_capacity_ += n.cpu_capacity;
    mem_capacity_ += n.memory_capacity;
  }
}

base::Status Scheduler::Submit(JobSpec spec) {
  if (jobs_.count(spec.id)) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + " was submitted before");
  }
  if (spec.tenant < 0 || spec.tenant >= quotas_.size()) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + ": unknown tenant");
  }
  if (spec.tasks.empty()) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + ": a job needs a task");
  }
  if (std::string why = NeverFits(spec); !why.empty()) {
    return base::Status(base::StatusCode::kFailedPrecondition,
                        "job " + std::to_string(spec.id) + " fits no node here, even idle: " + why +
                            "; it waits for a node that can hold it to join");
  }
  Job j;
  // Tasks of one job keep together (racks, NVLink); a single task has nobody to keep with, and
  // skipping its group saves the cycle's bookkeeping.
  const int32_t group = spec.tasks.size() > 1 ? static_cast<int32_t>(spec.id & 0x7fffffff) : -1;
  for (TaskSpec& t : spec.tasks) {
    t.group = group;
    j.milli += t.GpuMilliTotal();
  }
  j.spec = std::move(spec);
  const int64_t id = j.spec.id;
  Enqueue(jobs_.emplace(id, std::move(j)).first->second);
  return base::Status::Ok();
}

std::string Scheduler::NeverFits(const JobSpec& spec) const {
  for (size_t k = 0; k < spec.tasks.size(); ++k) {
    const TaskSpec& t = spec.tasks[k];
    bool fits = false;
    std::string barred;  // why the first node that would hold it is not one it may use
    // Cordoned and lost nodes count: they may come back, and a job they could hold waits.
    for (const NodeState& n : snapshot_.nodes) {
      if (n.cpu_capacity < t.cpu_milli || n.memory_capacity < t.memory_mib) continue;
      if (t.WantsGpu()) {
        if (n.model == kNoModel || !(t.allowed_models & Bit(n.model))) continue;
        const domain::GpuModel& model = snapshot_.model(n.model);
        if (t.gpu_kind == GpuKind::kMig && !model.FindMigProfile(t.mig_profile)) continue;
        if (t.gpu_count > n.gpu_count) continue;
        if (t.gpu_kind == GpuKind::kFraction && t.gpu_memory_mib > model.memory_mib &&
            model.memory_mib > 0) {
          continue;
        }
      }
      if (!(t.allowed_clusters & Bit(n.cluster))) {
        if (barred.empty()) {
          barred = plugins::WhyNot(snapshot_, t, n.cluster);
          if (barred.empty()) {
            barred = "in cluster " + snapshot_.clusters[static_cast<size_t>(n.cluster)].name +
                     ", not one the job may use (its clusters, regions or on-prem constraint)";
          }
        }
        continue;
      }
      fits = true;
      break;
    }
    if (!fits && !barred.empty()) {
      return "task " + std::to_string(k) + " would fit only nodes it may not use: those " + barred;
    }
    if (!fits) {
      return "task " + std::to_string(k) +
             " asks more than any node has, even idle (GPUs of an allowed model, CPU, memory)";
    }
  }
  return "";
}

std::vector<double> Scheduler::Shares() const {
  // Jobs charge projects; a team or an organization has received what everything under it has.
  const size_t n = usage_.size();
  std::vector<double> gpu(n), cpu(n), mem(n);
  for (int32_t leaf = 0; leaf < static_cast<int32_t>(n); ++leaf) {
    const Usage& u = usage_[static_cast<size_t>(leaf)];
    if (u.gpu == 0 && u.cpu == 0 && u.mem == 0) continue;
    for (int32_t a = leaf; a >= 0; a = quotas_.parent(a)) {
      gpu[static_cast<size_t>(a)] += u.gpu;
      cpu[static_cast<size_t>(a)] += u.cpu;
      mem[static_cast<size_t>(a)] += u.mem;
    }
  }
  std::vector<double> share(n);
  for (size_t i = 0; i < n; ++i) {
    share[i] = std::max({gpu[i] / static_cast<double>(gpu_capacity_),
                         cpu[i] / static_cast<double>(cpu_capacity_),
                         mem[i] / static_cast<double>(mem_capacity_)}) /
               quotas_.weight(static_cast<int32_t>(i));
  }
  return share;
}

double Scheduler::FairShare(int32_t node) const { return Shares()[static_cast<size_t>(node)]; }

std::vector<Scheduler::TenantUsage> Scheduler::ExportUsage(double now) {
  AdvanceUsage(now);
  std::vector<TenantUsage> out;
  for (size_t t = 0; t < usage_.size(); ++t) {
    const Usage& u = usage_[t];
    if (u.gpu > 0 || u.cpu > 0 || u.mem > 0) {
      out.push_back({static_cast<int32_t>(t), u.gpu, u.cpu, u.mem});
    }
  }
  return out;
}

void Scheduler::RestoreUsage(const std::vector<TenantUsage>& usage, double at, double now) {
  const double dt = std::max(0.0, now - at);
  const double decay = std::exp2(-dt / options_.fair_share_half_life);
  // What the running jobs used since `at` is counted at their current rates; what Adopt counted
  // from their start times is replaced, since the saved usage holds it already.
  for (Usage& u : usage_) {
    u.gpu = static_cast<double>(u.gpu_now) * dt;
    u.cpu = static_cast<double>(u.cpu_now) * dt;
    u.mem = static_cast<double>(u.mem_now) * dt;
  }
  for (const TenantUsage& saved : usage) {
    if (saved.tenant < 0 || saved.tenant >= static_cast<int32_t>(usage_.size())) continue;
    Usage& u = usage_[static_cast<size_t>(saved.tenant)];
    u.gpu += saved.gpu * decay;
    u.cpu += saved.cpu * decay;
    u.mem += saved.mem * decay;
  }
  usage_time_ = now;
}

int64_t Scheduler::AllocatedMilli(int32_t tenant) const { return usage_[tenant].gpu_now; }

void Scheduler::AdvanceUsage(double now) {
  const double dt = std::max(0.0, now - usage_time_);
  usage_time_ = now;
  if (dt == 0) return;
  const double decay = std::exp2(-dt / options_.fair_share_half_life);
  for (Usage& u : usage_) {
    u.gpu = u.gpu * decay + static_cast<double>(u.gpu_now) * dt;
    u.cpu = u.cpu * decay + static_cast<double>(u.cpu_now) * dt;
    u.mem = u.mem * decay + static_cast<double>(u.mem_now) * dt;
  }
}

int32_t Scheduler::LasLevel(double attained) const {
  int32_t level = 0;
  for (double t : options_.las_thresholds) {
    if (attained >= t) ++level;
  }
  return level;
}

bool Scheduler::FirstStartDue(const Job& j, double now) const {
  return options_.order == QueueOrder::kMeridian && options_.first_start_within > 0 &&
         j.phase == Phase::kPending && NeverStarted(j) &&
         now - j.spec.submit_time >= options_.first_start_within;
}

double Scheduler::PreemptionRank(const Job& j, double now) const {
  if (options_.order != QueueOrder::kLeastAttainedService) return j.spec.priority;
  double attained = j.attained;
  if (j.phase != Phase::kPending) {
    attained += static_cast<double>(j.milli) / 1000.0 * (now - j.start_time);
  }
  return -LasLevel(attained);
}

std::string Scheduler::QuotaBlock(const Job& j) const {
  return quotas_.LimitViolation(j.spec.tenant, kNoModel, j.milli);
}

bool Scheduler::QuotaAllows(const Job& j) const {
  return quotas_.WithinLimits(j.spec.tenant, kNoModel, j.milli);
}

void Scheduler::Rollback(const Job& j, const std::vector<Placement>& done) {
  for (size_t i = done.size(); i-- > 0;) placer_.Release(j.spec.tasks[i], done[i]);
}

void Scheduler::Shape(Job& j) {
  if (j.shaped) return;
  j.shaped = true;
  const TaskSpec& first = j.spec.tasks.front();
  if (j.spec.tasks.size() > 1) {
    j.shape_hash = j.spec.gang ? 0x9e3779b97f4a7c15ULL : 0;
    j.shape_key = j.spec.gang ? "G" : "A";
    const std::string first_key = first.FeasibilityKey();
    j.alike_tasks = true;
    for (const TaskSpec& t : j.spec.tasks) {
      const std::string task_key = t.FeasibilityKey();
      j.shape_hash = (j.shape_hash ^ t.FeasibilityHash()) * 0xbf58476d1ce4e5b9ULL;
      j.shape_key.append(1, '\x03').append(task_key);
      j.alike_tasks = j.alike_tasks && task_key == first_key && t.gpu_kind != GpuKind::kMig;
    }
  } else {  // one task: its shape as the placer remembers it (its key when first needed)
    j.shape_hash = first.FeasibilityHash();
  }
}

void Scheduler::Keep(Job& j, size_t task, Placement p, std::vector<Placement>* out) {
  placer_.Commit(j.spec.tasks[task], p, &cycle_);
  for (const DeviceGrant& d : p.devices) {
    if (d.mig_change != MigChange::kNone) j.layout_changes.push_back(d);
  }
  SettleMig(&p);
  out->push_back(std::move(p));
}

void Scheduler::Drop(Job& j, std::vector<Placement>* out) {
  Undo(j, *out);
  out->clear();
  j.layout_changes.clear();
}

Mask Scheduler::EvenClusters() const {
  Mask even = 0;
  for (size_t c = 0; c < snapshot_.clusters.size(); ++c) {
    if (snapshot_.clusters[c].even_task_layout) even |= Bit(static_cast<int>(c));
  }
  return even;
}

Mask Scheduler::Uneven(const std::vector<Placement>& placements, Mask even) const {
  std::vector<std::pair<int32_t, int32_t>> on_node;  // node, tasks there
  for (const Placement& p : placements) {
    if (p.node < 0 || !(even & Bit(snapshot_.nodes[p.node].cluster))) continue;
    auto it = std::find_if(on_node.begin(), on_node.end(),
                           [&](const auto& e) { return e.first == p.node; });
    if (it == on_node.end()) {
      on_node.emplace_back(p.node, 1);
    } else {
      ++it->second;
    }
  }
  Mask uneven = 0;
  for (const auto& [node, tasks] : on_node) {
    const int32_t cluster = snapshot_.nodes[node].cluster;
    for (const auto& [other, others] : on_node) {
      if (snapshot_.nodes[other].cluster == cluster && others != tasks) uneven |= Bit(cluster);
    }
  }
  return uneven;
}

bool Scheduler::PlaceIn(Job& j, Mask clusters, std::vector<Placement>* out, std::string* why) {
  const Mask even = j.spec.tasks.size() > 1 ? EvenClusters() & clusters : 0;
  if (even == 0) return PlaceTasks(j, clusters, out, why);
  // Slurm runs the same number of a job's tasks on each node it uses (--ntasks-per-node): two
  // tasks on one node and one on another cannot be one Slurm job. A job placed so is laid out
  // evenly on such a cluster, or placed on the others; when neither fits, that is remembered as
  // a shape that fits nowhere is (PlaceTasks), so that later passes do not place it unevenly and
  // take it back again. For alike tasks the answer holds until capacity is freed: an even layout
  // of k tasks a node needs n/k nodes that hold k each, which commits only make fewer.
  Shape(j);
  const uint64_t hash = (j.shape_hash ^ clusters ^ 0x94d049bb133111ebULL) * 0xbf58476d1ce4e5b9ULL;
  std::string key = j.shape_key +
                    "\x05"
                    "uneven@" +
                    std::to_string(clusters);
  auto said = [&] {
    if (!why) return;
    *why = std::to_string(j.spec.tasks.size()) +
           " tasks fit no layout with as many on each node of a Slurm cluster (Slurm runs as "
           "many tasks of a job on each of its nodes)" +
           ((clusters & ~even) ? "; nor do they fit in the other clusters" : "");
  };
  if (placer_.Known(hash, key, cycle_)) {
    said();
    return false;
  }
  if (!PlaceTasks(j, clusters, out, why)) return false;
  if (Uneven(*out, even) == 0) return true;
  Drop(j, out);
  Mask every_task = clusters;
  for (const TaskSpec& t : j.spec.tasks) every_task &= t.allowed_clusters;
  for (size_t c = 0; c < snapshot_.clusters.size(); ++c) {
    const Mask bit = Bit(static_cast<int>(c));
    if ((even & every_task & bit) && PlaceEvenly(j, static_cast<int32_t>(c), out)) return true;
  }
  if ((clusters & ~even) && PlaceTasks(j, clusters & ~even, out, nullptr)) return true;
  placer_.Remember(hash, std::move(key), cycle_, Unschedulable{}, !j.alike_tasks);
  said();
  return false;
}

bool Scheduler::PlaceEvenly(Job& j, int32_t c, std::vector<Placement>* out) {
  // Alike tasks of whole GPUs (or none) go k to a node as one task k times their size, whose GPUs
  // are then dealt out; others one to a node.
  const TaskSpec& first = j.spec.tasks.front();
  const bool merge =
      j.alike_tasks && (first.gpu_kind == GpuKind::kWhole || first.gpu_kind == GpuKind::kNone);
  const size_t n = j.spec.tasks.size();
  for (size_t k = merge ? n : 1; k >= 1; --k) {
    if (n % k == 0 && PlaceEvenlyBy(j, c, k, out)) return true;
  }
  return false;
}

bool Scheduler::PlaceEvenlyBy(Job& j, int32_t c, size_t k, std::vector<Placement>* out) {
  // Each group of k on a node of its own. The flags are set for this call's nodes only, and
  // unset before it returns: no pass over every node per attempt.
  cycle_.keep_off.resize(snapshot_.nodes.size(), 0);
  std::vector<int32_t> taken;
  bool placed = true;
  for (size_t begin = 0; begin < j.spec.tasks.size() && placed; begin += k) {
    TaskSpec group = j.spec.tasks[begin];
    group.allowed_clusters &= Bit(c);
    const int32_t gpus = group.gpu_kind == GpuKind::kWhole ? group.gpu_count : 0;
    group.gpu_count *= static_cast<int32_t>(k);
    group.cpu_milli *= static_cast<int64_t>(k);
    group.memory_mib *= static_cast<int64_t>(k);
    PlaceOutcome o = placer_.Place(group, cycle_);
    placed = o.placed;
    if (!placed) break;
    cycle_.keep_off[static_cast<size_t>(o.placement.node)] = 1;
    ++cycle_.kept_off;
    taken.push_back(o.placement.node);
    for (size_t i = 0; i < k; ++i) {
      Placement p;
      p.node = o.placement.node;
      p.score = o.placement.score;
      if (k == 1) {
        p.devices = o.placement.devices;
      } else {
        auto from = o.placement.devices.begin() + static_cast<ptrdiff_t>(i) * gpus;
        p.devices.assign(from, from + gpus);
      }
      Keep(j, begin + i, std::move(p), out);
    }
  }
  for (int32_t node : taken) cycle_.keep_off[static_cast<size_t>(node)] = 0;
  cycle_.kept_off = 0;
  if (!placed) Drop(j, out);
  return placed;
}

bool Scheduler::PlaceTasks(Job& j, Mask clusters, std::vector<Placement>* out, std::string* why) {
  out->clear();
  j.layout_changes.clear();
  // A job of several tasks may place some before one fits nowhere: what it took is undone
  // (inside TryPlace's trial, no capacity was released), and the job's shape, its tasks' shapes
  // together, is remembered as fitting nowhere until capacity is, as a task's is. Behind a large
  // gang, a deep queue is otherwise placed in part and rolled back job by job, pass after pass.
  const bool several = j.spec.tasks.size() > 1;
  Shape(j);
  uint64_t hash = 0;
  std::string key;
  if (several) {
    hash = (j.shape_hash ^ clusters) * 0xbf58476d1ce4e5b9ULL;
    key = clusters == kAll ? j.shape_key : j.shape_key + '@' + std::to_string(clusters);
    if (const std::string* known = placer_.Known(hash, key, cycle_)) {
      if (why) *why = *known;
      return false;
    }
  } else if ((j.spec.tasks.front().allowed_clusters & clusters) ==
             j.spec.tasks.front().allowed_clusters) {
    // A task placed as it is, whose shape failed since nothing was freed: the placer's answer,
    // without hashing the task, building its key and copying the reasons at every pass. The key
    // (the guard against another shape of the same hash) is built once the placer holds an
    // answer under the hash: a job placed at its first look never needs one.
    if (!j.shape_key.empty() || placer_.Remembers(j.shape_hash, cycle_)) {
      if (j.shape_key.empty()) j.shape_key = j.spec.tasks.front().FeasibilityKey();
      if (const std::string* known = placer_.Known(j.shape_hash, j.shape_key, cycle_)) {
        if (why) *why = *known;
        return false;
      }
    }
  }
  for (const TaskSpec& original : j.spec.tasks) {
    // Copy the task only when it must be narrowed to some clusters.
    TaskSpec narrowed;
    const bool narrow = (original.allowed_clusters & clusters) != original.allowed_clusters;
    if (narrow) {
      narrowed = original;
      narrowed.allowed_clusters &= clusters;
    }
    const TaskSpec& t = narrow ? narrowed : original;
    PlaceOutcome o = placer_.Place(t, cycle_);
    if (!o.placed) {
      if (why) {
        // Narrowed to some clusters (an explanation per cluster), the nodes of the others
        // were turned away by the cluster filter: that says nothing about these clusters.
        if (narrow) {
          std::erase_if(o.why.rejected_by, [&](const std::pair<std::string, int64_t>& r) {
            if (r.first != "cluster") return false;
            o.why.nodes_considered -= r.second;
            return true;
          });
        }
        *why = o.why.Summary();
      }
      Undo(j, *out);
      if (several) {
        placer_.Remember(hash, std::move(key), cycle_, std::move(o.why), !j.alike_tasks);
      }
      out->clear();
      return false;
    }
    Keep(j, out->size(), std::move(o.placement), out);  // narrowed or not, the same resources
    // A gang stays in the cluster of its first task.
    if (j.spec.gang && out->size() == 1) clusters = Bit(snapshot_.nodes[out->front().node].cluster);
  }
  return true;
}

void Scheduler::Undo(const Job& j, const std::vector<Placement>& done) {
  for (size_t i = done.size(); i-- > 0;) placer_.Undo(j.spec.tasks[i], done[i]);
}

bool Scheduler::TryPlace(Job& j, std::string* why) {
  // What is placed here and taken back before returning releases nothing (Placer::BeginTrial).
  Placer::Trial trial(placer_);
  std::vector<Placement> placements;
  auto excluded = excluded_.find(j.spec.tenant);
  const Mask allowed = excluded == excluded_.end() ? kAll : kAll & ~excluded->second;
  if (!PlaceIn(j, allowed, &placements, why)) {
    if (!j.spec.gang || snapshot_.clusters.size() < 2) return false;
    // The gang may fit whole in a cluster other than the one its first task preferred.
    bool placed = false;
    for (size_t c = 0; c < snapshot_.clusters.size() && !placed; ++c) {
      if (!(allowed & Bit(static_cast<int>(c)))) continue;
      placed = PlaceIn(j, Bit(static_cast<int>(c)), &placements, nullptr);
    }
    if (!placed) return false;
  }
  // Per-model limits can be checked only now that the models are known.
  std::vector<ModelId> models;
  std::vector<int64_t> millis;
  for (const Placement& p : placements) {
    models.push_back(snapshot_.nodes[p.node].model);
    millis.push_back(GrantedMilli(snapshot_, p));
  }
  for (size_t i = 0; i < placements.size(); ++i) {
    std::string v = quotas_.LimitViolation(j.spec.tenant, models[i], millis[i]);
    if (!v.empty()) {
      if (why) *why = v;
      Undo(j, placements);
      return false;
    }
  }
  j.placements = std::move(placements);
  j.charged_models = std::move(models);
  j.charged_milli = std::move(millis);
  return true;
}

void Scheduler::Start(Job& j, double now, CycleResult* out) {
  ++j.starts;
  int64_t total = 0;
  for (int64_t m : j.charged_milli) total += m;
  j.borrowed = !quotas_.WithinGuarantee(j.spec.tenant, kNoModel, total);
  for (size_t i = 0; i < j.placements.size(); ++i) {
    quotas_.Charge(j.spec.tenant, j.charged_models[i], j.charged_milli[i]);
  }
  Usage& u = usage_[j.spec.tenant];
  u.gpu_now += total;
  allocated_milli_ += total;
  for (const TaskSpec& t : j.spec.tasks) {
    u.cpu_now += t.cpu_milli;
    u.mem_now += t.memory_mib;
  }
  j.phase = Phase::kRunning;
  j.start_time = now;
  // pending_ drops the jobs a pass started at its end (Pass), together: taken out one by one
  // among the placements, they made `bench schedule` 6% slower.
  running_.push_back(j.spec.id);
  for (const Placement& p : j.placements) placer_.Settle(p);
  // A GPU whose layout this start changes keeps it for the Policy's interval (ThawMig).
  for (const DeviceGrant& d : j.layout_changes) {
    if (!ReshapesGpu(d.mig_change) || options_.mig_reconfigure_interval <= 0) continue;
    snapshot_.gpus[static_cast<size_t>(d.gpu)].mig_frozen = true;
    frozen_until_[d.gpu] = now + options_.mig_reconfigure_interval;
  }
  if (out) {
    out->started.push_back(
        {j.spec.id, j.placements, j.borrowed, j.on_loan_from, std::move(j.layout_changes)});
  }
  j.layout_changes.clear();
}

void Scheduler::Stop(Job& j, double now) {
  Rollback(j, j.placements);
  j.on_loan_from = -1;
  int64_t total = 0;
  for (size_t i = 0; i < j.placements.size(); ++i) {
    quotas_.Charge(j.spec.tenant, j.charged_models[i], -j.charged_milli[i]);
    total += j.charged_milli[i];
  }
  Usage& u = usage_[j.spec.tenant];
  u.gpu_now -= total;
  allocated_milli_ -= total;
  for (const TaskSpec& t : j.spec.tasks) {
    u.cpu_now -= t.cpu_milli;
    u.mem_now -= t.memory_mib;
  }
  j.attained += static_cast<double>(total) / 1000.0 * std::max(0.0, now - j.start_time);
  running_.erase(std::find(running_.begin(), running_.end(), j.spec.id));
}

void Scheduler::RedoMigLayout(Placement* p) const {
  // A stored MIG grant says how its instance was made then; a snapshot built afresh (a restart:
  // agents register GPUs without their layout) may lack the instance, or MIG mode itself. The
  // grant is adopted with the change that makes it again on this snapshot.
  for (DeviceGrant& d : p->devices) {
    if (d.gpu < 0 || d.gpu >= static_cast<int32_t>(snapshot_.gpus.size())) continue;
    const GpuState& g = snapshot_.gpus[static_cast<size_t>(d.gpu)];
    if (d.mig_profile < 0) {
      // A whole GPU or a share on a GPU its agent registered in MIG mode: the scheduler took it
      // out of MIG mode since (registrations are not updated for it), and takes it out again.
      if (g.mig_enabled && g.IdleMig()) d.mig_change = MigChange::kDisableMig;
      continue;
    }
    const domain::MigProfile& prof = snapshot_.model(g.model).mig_profiles[d.mig_profile];
    const uint8_t bits = prof.SliceBits(d.mig_start);
    bool free_instance = false;
    for (const MigSlot& m : g.mig) {
      free_instance =
          free_instance || (!m.allocated && m.profile == d.mig_profile && m.start == d.mig_start);
    }
    if (free_instance) {
      d.mig_change = MigChange::kNone;
    } else if (g.mig_enabled && (g.mig_used & bits) == 0) {
      d.mig_change = MigChange::kCreateInstance;
    } else if (g.Idle()) {
      d.mig_change = MigChange::kEnableMig;
    }
  }
}

void Scheduler::Restore(Job& j) {
  for (size_t i = 0; i < j.placements.size(); ++i) {
    placer_.Commit(j.spec.tasks[i], j.placements[i], &cycle_);
  }
}

void Scheduler::Finish(int64_t id, double now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase == Phase::kPending ||
      it->second.phase == Phase::kDone) {
    return;
  }
  AdvanceUsage(now);
  Stop(it->second, now);
  it->second.phase = Phase::kDone;
  it->second.placements.clear();
}

base::Status Scheduler::Adopt(JobSpec spec, const std::vector<Placement>& placements,
                              double start_time) {
  if (jobs_.count(spec.id)) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + " was submitted before");
  }
  if (spec.tenant < 0 || spec.tenant >= quotas_.size()) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + ": unknown tenant");
  }
  if (placements.size() != spec.tasks.size()) {
    return base::Status::Invalid("job " + std::to_string(spec.id) + ": " +
                                 std::to_string(placements.size()) + " placements for " +
                                 std::to_string(spec.tasks.size()) + " tasks");
  }
  Job j;
  j.spec = std::move(spec);
  j.starts = 1;  // it runs
  std::vector<Placement> adopted = placements;
  for (Placement& p : adopted) {
    if (p.node >= 0 && p.node < static_cast<int32_t>(snapshot_.nodes.size())) RedoMigLayout(&p);
  }
  for (size_t i = 0; i < adopted.size(); ++i) {
    const Placement& p = adopted[i];
    if (p.node < 0 || p.node >= static_cast<int32_t>(snapshot_.nodes.size()) ||
        !placer_.Fits(j.spec.tasks[i], p)) {
      Rollback(j, std::vector<Placement>(adopted.begin(), adopted.begin() + i));
      return base::Status(base::StatusCode::kFailedPrecondition,
                          "job " + std::to_string(j.spec.id) + ": task " + std::to_string(i) +
                              " no longer fits where it was placed");
    }
    placer_.Commit(j.spec.tasks[i], p, &cycle_);
    j.milli += j.spec.tasks[i].GpuMilliTotal();
    j.charged_models.push_back(snapshot_.nodes[p.node].model);
    j.charged_milli.push_back(GrantedMilli(snapshot_, p));
  }
  for (Placement& p : adopted) SettleMig(&p);
  j.placements = std::move(adopted);
  const int64_t id = j.spec.id;
  auto it = jobs_.emplace(id, std::move(j)).first;
  AdvanceUsage(start_time);
  Start(it->second, start_time, nullptr);
  return base::Status::Ok();
}

void Scheduler::AdoptStopping(JobSpec spec, std::vector<Placement> placements, double start_time,
                              int64_t preempted_for) {
  if (jobs_.count(spec.id) || spec.tenant < 0 || spec.tenant >= quotas_.size()) return;
  Job j;
  j.spec = std::move(spec);
  j.starts = 1;                            // it ran
  placements.resize(j.spec.tasks.size());  // a task with no placement holds nothing
  for (size_t i = 0; i < placements.size(); ++i) {
    Placement& p = placements[i];
    if (p.node >= static_cast<int32_t>(snapshot_.nodes.size())) p.node = -1;
    if (p.node >= 0) {
      // A GPU gone or unhealthy is nobody's to take; what else the task held, it holds still.
      const NodeState& n = snapshot_.nodes[static_cast<size_t>(p.node)];
      std::erase_if(p.devices, [&](const DeviceGrant& d) {
        return d.gpu < n.gpu_begin || d.gpu >= n.gpu_begin + n.gpu_count ||
               !snapshot_.gpus[static_cast<size_t>(d.gpu)].healthy;
      });
      RedoMigLayout(&p);
      // Taken by a job adopted before it (the stored state disagreed with itself): that job
      // holds it, and this one cannot hold it twice.
      if (!placer_.Fits(j.spec.tasks[i], p)) p = Placement{};
    }
    placer_.Commit(j.spec.tasks[i], p, &cycle_);
    j.milli += j.spec.tasks[i].GpuMilliTotal();
    j.charged_models.push_back(p.node >= 0 ? snapshot_.nodes[p.node].model : kNoModel);
    j.charged_milli.push_back(GrantedMilli(snapshot_, p));
  }
  for (Placement& p : placements) SettleMig(&p);
  j.placements = std::move(placements);
  const int64_t id = j.spec.id;
  auto it = jobs_.emplace(id, std::move(j)).first;
  AdvanceUsage(start_time);
  Start(it->second, start_time, nullptr);
  it->second.phase = Phase::kStopping;
  it->second.stopping_for = preempted_for;
}

void Scheduler::Cancel(int64_t id, double now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  if (it->second.phase == Phase::kRunning || it->second.phase == Phase::kStopping) {
    Finish(id, now);
  }
  pending_.Remove(id);
  std::erase(running_, id);
  if (reserved_job_ == id) reserved_job_ = -1;
  ForgetEstimate();  // the id may come back as another job
  jobs_.erase(it);
}

void Scheduler::Evicting(int64_t id, int64_t preempted_for) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != Phase::kRunning) return;
  it->second.phase = Phase::kStopping;
  it->second.stopping_for = preempted_for;
  ForgetEstimate();  // a stopping job is given back now, though it holds what it held
}

void Scheduler::Evicted(int64_t id, double now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.phase != Phase::kStopping) return;
  AdvanceUsage(now);
  Stop(it->second, now);
  it->second.phase = Phase::kPending;
  it->second.stopping_for = -1;
  it->second.placements.clear();
  Enqueue(it->second);
}

base::Result<int32_t> Scheduler::AddNode(const domain::Node& node) {
  auto index = snapshot_.AddNode(node);
  if (!index.ok()) return index.status();
  const NodeState& n = snapshot_.nodes[static_cast<size_t>(*index)];
  for (int32_t g = n.gpu_begin; g < n.gpu_begin + n.gpu_count; ++g) {
    gpu_capacity_ += snapshot_.gpus[static_cast<size_t>(g)].healthy ? 1000 : 0;
  }
  cpu_capacity_ += n.cpu_capacity;
  mem_capacity_ += n.memory_capacity;
  placer_.NodeAdded(*index);
  return index;
}

void Scheduler::SetSchedulable(int32_t node, bool schedulable) {
  if (node < 0 || node >= static_cast<int32_t>(snapshot_.nodes.size())) return;
  NodeState& n = snapshot_.nodes[static_cast<size_t>(node)];
  if (n.schedulable == schedulable) return;
  n.schedulable = schedulable;
  placer_.NodeChanged(node);
}

void Scheduler::SetReachable(int32_t node, bool reachable) {
  if (node < 0 || node >= static_cast<int32_t>(snapshot_.nodes.size())) return;
  NodeState& n = snapshot_.nodes[static_cast<size_t>(node)];
  if (n.reachable == reachable) return;
  n.reachable = reachable;
  placer_.NodeChanged(node);
}

}  // namespace meridian::sched
