#include "sched/placer.h"

#include <algorithm>
#include <cmath>

namespace meridian::sched {

Placer::Placer(Snapshot* snapshot, const Profile* profile, uint64_t seed)
    : s_(snapshot), profile_(profile), rng_(seed), index_(*snapshot) {
  visited_.assign(s_->nodes.size(), 0);
  filter_rejects_.assign(profile_->filters.size(), 0);
}

namespace {

int32_t EffectiveMilli(const TaskSpec& t, const GpuState& g) {
  if (t.gpu_milli > 0 || t.gpu_memory_mib == 0) return t.gpu_milli;
  if (g.memory_mib == 0) return 1001;  // memory unknown: a memory-only request cannot be judged
  return static_cast<int32_t>((t.gpu_memory_mib * 1000 + g.memory_mib - 1) / g.memory_mib);
}

}  // namespace

bool Placer::WholeOption(const TaskSpec& task, const NodeState& node) {
  // Idle GPUs per NVLink domain; a node has few domains, so a small linear table does.
  int16_t domains[64];
  int32_t idle_in[64];
  int n_domains = 0;
  int32_t idle_total = 0;
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    const GpuState& g = s_->gpus[node.gpu_begin + i];
    const bool reclaim = reclaim_mig_ && !static_mig_;
    if (reclaim && g.IdleMig() && g.mig_frozen) frozen_seen_ = true;
    if (!(g.Idle() || (reclaim && g.IdleMig() && !g.mig_frozen))) continue;
    ++idle_total;
    int d = 0;
    while (d < n_domains && domains[d] != g.nvlink_domain) ++d;
    if (d == n_domains) {
      if (n_domains == 64) continue;
      domains[n_domains] = g.nvlink_domain;
      idle_in[n_domains++] = 0;
    }
    ++idle_in[d];
  }
  if (idle_total < task.gpu_count) return false;
  // One domain that holds the task, the tightest such; otherwise the fullest domains first, so
  // the task spans as few domains as possible.
  int order[64];
  for (int d = 0; d < n_domains; ++d) order[d] = d;
  int single = -1;
  for (int d = 0; d < n_domains; ++d) {
    if (idle_in[d] >= task.gpu_count && (single < 0 || idle_in[d] < idle_in[single])) single = d;
  }
  if (single >= 0) {
    order[0] = single;
    n_domains = 1;
  } else {
    std::sort(order, order + n_domains, [&](int a, int b) {
      return idle_in[a] != idle_in[b] ? idle_in[a] > idle_in[b] : domains[a] < domains[b];
    });
  }
  Option opt{static_cast<int32_t>(grants_.size()), 0};
  for (int k = 0; k < n_domains && opt.count < task.gpu_count; ++k) {
    // GPUs already whole first; idle MIG GPUs go back to whole only when those do not suffice.
    for (int pass = 0; pass < (reclaim_mig_ && !static_mig_ ? 2 : 1); ++pass) {
      const bool take_mig = pass == 1;
      for (int32_t i = 0; i < node.gpu_count && opt.count < task.gpu_count; ++i) {
        const GpuState& g = s_->gpus[node.gpu_begin + i];
        if (g.nvlink_domain != domains[order[k]] ||
            !(take_mig ? g.IdleMig() && !g.mig_frozen : g.Idle())) {
          continue;
        }
        DeviceGrant grant;
        grant.gpu = node.gpu_begin + i;
        grant.milli = 1000;
        grant.memory_mib = g.memory_mib;
        if (take_mig) grant.mig_change = MigChange::kDisableMig;
        grants_.push_back(grant);
        ++opt.count;
      }
    }
  }
  options_.push_back(opt);
  return true;
}

bool Placer::FractionOptions(const TaskSpec& task, const NodeState& node) {
  int32_t chosen = -1;
  int32_t fitting = 0;
  size_t first_option = options_.size();
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    const int32_t gi = node.gpu_begin + i;
    const GpuState& g = s_->gpus[gi];
    if (!g.healthy || g.mig_enabled) continue;
    int32_t need = EffectiveMilli(task, g);
    if (need > g.free_milli || task.gpu_memory_mib > g.free_memory_mib) continue;
    ++fitting;
    switch (profile_->device_choice) {
      case DeviceChoice::kBestFit:
        if (chosen < 0 || g.free_milli < s_->gpus[chosen].free_milli) chosen = gi;
        break;
      case DeviceChoice::kRandom:
        if (rng_.Uniform(static_cast<uint64_t>(fitting)) == 0) chosen = gi;
        break;
      case DeviceChoice::kEnumerate: {
        // GPUs in the same state are interchangeable: offer one of them.
        bool duplicate = false;
        for (size_t o = first_option; o < options_.size() && !duplicate; ++o) {
          const GpuState& other = s_->gpus[grants_[options_[o].begin].gpu];
          duplicate =
              other.free_milli == g.free_milli && other.free_memory_mib == g.free_memory_mib;
        }
        if (!duplicate) {
          options_.push_back({static_cast<int32_t>(grants_.size()), 1});
          grants_.push_back({gi, need, task.gpu_memory_mib, -1, -1, MigChange::kNone});
        }
        break;
      }
    }
  }
  if (profile_->device_choice != DeviceChoice::kEnumerate && chosen >= 0) {
    options_.push_back({static_cast<int32_t>(grants_.size()), 1});
    grants_.push_back({chosen, EffectiveMilli(task, s_->gpus[chosen]), task.gpu_memory_mib, -1, -1,
                       MigChange::kNone});
  }
  return fitting > 0;
}

bool Placer::MigOptions(const NodeState& node) {
  if (node.model == kNoModel || mig_profile_of_model_[node.model] < 0) return false;
  const domain::GpuModel& model = s_->model(node.model);
  const int16_t pid = mig_profile_of_model_[node.model];
  const domain::MigProfile* profile = &model.mig_profiles[pid];
  // Best option per GPU: an existing free instance, then a new instance in free slices, then a
  // re-partition of a GPU none of whose instances is in use, then switching an idle GPU to MIG.
  DeviceGrant best;
  int best_rank = 99;
  for (int32_t i = 0; i < node.gpu_count; ++i) {
    const int32_t gi = node.gpu_begin + i;
    const GpuState& g = s_->gpus[gi];
    if (!g.healthy) continue;
    DeviceGrant grant{gi, 0, profile->memory_mib, pid, -1, MigChange::kNone};
    int rank = 99;
    if (g.mig_enabled) {
      bool any_allocated = false;
      for (const MigSlot& m : g.mig) {
        any_allocated = any_allocated || m.allocated;
        if (rank > 0 && !m.allocated && m.profile == pid) {
          rank = 0;
          grant.mig_start = m.start;
        }
      }
      if (rank > 1 && !static_mig_) {
        for (int start : profile->starts) {
          if ((g.mig_used & profile->SliceBits(start)) == 0) {
            rank = 1;
            grant.mig_start = static_cast<int8_t>(start);
            grant.mig_change = MigChange::kCreateInstance;
            break;
          }
        }
      }
      if (rank > 2 && !any_allocated && g.mig_frozen && !static_mig_) frozen_seen_ = true;
      if (rank > 2 && !any_allocated && !g.mig_frozen && !static_mig_) {
        rank = 2;
        grant.mig_start = static_cast<int8_t>(profile->starts.front());
        grant.mig_change = MigChange::kRepartition;
      }
    } else if (static_mig_) {
      continue;
    } else if (g.Idle() && g.mig_frozen) {
      frozen_seen_ = true;
    } else if (g.Idle()) {
      rank = 3;
      grant.mig_start = static_cast<int8_t>(profile->starts.front());
      grant.mig_change = MigChange::kEnableMig;
    }
    if (rank == 99 || rank > best_rank) continue;
    if (rank < best_rank) {
      // A cheaper kind of option makes the dearer ones found so far moot: reconfiguring a GPU
      // is never chosen while an instance or free slices are at hand on the node.
      options_.clear();
      grants_.clear();
      best_rank = rank;
      best = grant;
    }
    if (profile_->device_choice == DeviceChoice::kEnumerate) {
      options_.push_back({static_cast<int32_t>(grants_.size()), 1});
      grants_.push_back(grant);
    }
  }
  if (profile_->device_choice != DeviceChoice::kEnumerate && best_rank < 99) {
    options_.push_back({static_cast<int32_t>(grants_.size()), 1});
    grants_.push_back(best);
  }
  return !options_.empty();
}

bool Placer::DeviceOptions(const TaskSpec& task, const NodeState& node) {
  options_.clear();
  grants_.clear();
  switch (task.gpu_kind) {
    case GpuKind::kNone:
      options_.push_back({0, 0});
      return true;
    case GpuKind::kWhole:
      return WholeOption(task, node);
    case GpuKind::kFraction:
      return FractionOptions(task, node);
    case GpuKind::kMig:
      return MigOptions(node);
  }
  return false;
}

bool Placer::BreaksTie(int32_t node, int32_t incumbent, int64_t ties) {
  switch (profile_->tie_break) {
    case TieBreak::kRandom:
      // Reservoir sampling: each of the tied candidates wins with the same probability.
      return rng_.Uniform(static_cast<uint64_t>(ties)) == 0;
    case TieBreak::kNodeOrder:
      return node < incumbent;
  }
  return false;
}

double Placer::ScoreOf(const PluginContext& ctx, const Candidate& c) const {
  double total = 0;
  for (const WeightedScore& ws : profile_->scores) {
    double v = ws.plugin->Score(ctx, c);
    if (profile_->quantize_scores) v = std::trunc(v);
    total += ws.weight * v;
  }
  return total;
}

namespace {

// Whether the reservation was kept off is part of what is remembered: the same shape may fit
// only on the reserved nodes.
uint64_t CacheSlot(uint64_t hash, const CycleState& cycle) {
  return cycle.avoid_reserved ? hash ^ 0x5bd1e9955bd1e995ULL : hash;
}

}  // namespace

const Placer::Infeasible* Placer::Slot(uint64_t hash, const CycleState& cycle) const {
  auto it = infeasible_.find(CacheSlot(hash, cycle));
  if (it == infeasible_.end() || it->second.epoch != epoch_ ||
      (cycle.avoid_reserved && it->second.reservation != reservation_) ||
      (it->second.version != 0 && it->second.version != version_)) {
    return nullptr;
  }
  return &it->second;
}

const std::string* Placer::Known(uint64_t hash, const std::string& key, const CycleState& cycle) {
  const Infeasible* known = Slot(hash, cycle);
  if (!known || known->key != key) return nullptr;
  ++cache_hits_;
  // A pending job says why at every pass: the words are made once per answer, not per pass.
  if (known->summary.empty()) known->summary = known->why.Summary();
  return &known->summary;
}

void Placer::Remember(uint64_t hash, std::string key, const CycleState& cycle, Unschedulable why,
                      bool while_unchanged) {
  // Inside a trial that holds capacity, or changed a layout, the answer is of another state.
  if (in_trial_ && (trial_held_ > 0 || trial_changed_)) return;
  infeasible_[CacheSlot(hash, cycle)] = Infeasible{
      std::move(key), epoch_, reservation_, while_unchanged ? version_ : 0, std::move(why), {}};
}

void Placer::BeginTrial() {
  in_trial_ = true;
  trial_version_ = version_;
  trial_held_ = 0;
  trial_changed_ = false;
}

void Placer::Undo(const TaskSpec& task, const Placement& placement) {
  const uint64_t epoch = epoch_;
  Release(task, placement);
  if (!in_trial_) return;
  --trial_held_;
  // What fit nowhere before the trial fits nowhere now, with at most as much free: unless the
  // trial changed a MIG layout, which Release leaves changed.
  if (trial_changed_) return;
  epoch_ = epoch;
  if (trial_held_ == 0) version_ = trial_version_;
}

void Placer::EndTrial() { in_trial_ = false; }

PlaceOutcome Placer::Place(const TaskSpec& task, const CycleState& cycle) {
  PlaceOutcome out;
  const uint64_t hash = task.FeasibilityHash();
  if (const Infeasible* known = Slot(hash, cycle); known && known->key == task.FeasibilityKey()) {
    ++cache_hits_;
    // Nothing was released since the same shape failed, so the same nodes turn it away for the
    // same reasons: a pending job keeps saying why, cycle after cycle.
    out.why = known->why;
    out.why.cached = true;
    return out;
  }
  ++searches_;
  if (++stamp_ == 0) {
    std::fill(visited_.begin(), visited_.end(), 0);
    stamp_ = 1;
  }
  filter_rejects_.assign(profile_->filters.size(), 0);  // the profile may have grown
  rejected_nodes_.resize(profile_->filters.size());
  for (std::vector<int32_t>& nodes : rejected_nodes_) nodes.clear();
  int64_t gpu_rejects = 0;
  int64_t mig_waits = 0;  // nodes where only a frozen MIG layout stood in the way
  int32_t feasible_nodes = 0;
  int64_t ties = 0;
  double best_score = 0;
  std::vector<DeviceGrant> best_devices;
  PluginContext ctx{*s_, task, cycle, &index_};
  if (task.gpu_kind == GpuKind::kMig) {
    mig_profile_of_model_.assign(static_cast<size_t>(s_->model_count()), -1);
    for (int m = 0; m < s_->model_count(); ++m) {
      const domain::GpuModel& model = s_->model(static_cast<ModelId>(m));
      if (const domain::MigProfile* p = model.FindMigProfile(task.mig_profile)) {
        mig_profile_of_model_[m] = static_cast<int16_t>(p - model.mig_profiles.data());
      }
    }
  }
  index_.CandidateLists(*s_, task, &lists_);
  const int32_t limit = profile_->max_feasible_nodes;
  ++rotor_;
  for (const std::vector<int32_t>* list : lists_) {
    const size_t size = list->size();
    const size_t offset = limit > 0 ? rotor_ % size : 0;
    for (size_t k = 0; k < size; ++k) {
      const int32_t node_id = (*list)[(k + offset) % size];
      if (visited_[node_id] == stamp_) continue;
      visited_[node_id] = stamp_;
      if (cycle.kept_off > 0 && cycle.keep_off[node_id]) continue;
      ++out.why.nodes_considered;
      const NodeState& node = s_->nodes[node_id];
      bool passed = true;
      for (size_t f = 0; f < profile_->filters.size(); ++f) {
        if (!profile_->filters[f]->Filter(ctx, node)) {
          ++filter_rejects_[f];
          rejected_nodes_[f].push_back(node_id);
          passed = false;
          break;
        }
      }
      if (!passed) continue;
      frozen_seen_ = false;
      if (!DeviceOptions(task, node)) {
        // Turned away only because an idle GPU's layout changed too recently to change again.
        ++(frozen_seen_ ? mig_waits : gpu_rejects);
        continue;
      }
      ++feasible_nodes;
      if (first_fit_) {
        const Option& o = options_.front();
        out.placed = true;
        out.placement.node = node_id;
        out.placement.devices.assign(grants_.begin() + o.begin,
                                     grants_.begin() + o.begin + o.count);
        return out;
      }
      for (const Option& o : options_) {
        Candidate c{node_id, std::span<const DeviceGrant>(grants_.data() + o.begin, o.count)};
        double score = ScoreOf(ctx, c);
        if (ties == 0 || score > best_score) {
          best_score = score;
          ties = 1;
          out.placement.node = node_id;
          best_devices.assign(c.devices.begin(), c.devices.end());
        } else if (score == best_score && BreaksTie(node_id, out.placement.node, ++ties)) {
          out.placement.node = node_id;
          best_devices.assign(c.devices.begin(), c.devices.end());
        }
      }
      if (limit > 0 && feasible_nodes >= limit) break;
    }
    if (limit > 0 && feasible_nodes >= limit) break;
  }
  if (ties > 0) {
    out.placed = true;
    out.placement.devices = std::move(best_devices);
    out.placement.score = best_score;
    return out;
  }
  for (size_t f = 0; f < profile_->filters.size(); ++f) {
    if (filter_rejects_[f] == 0) continue;
    const FilterPlugin& filter = *profile_->filters[f];
    const std::string name(filter.Name());
    out.why.Reject(name, filter_rejects_[f]);
    for (int32_t node_id : rejected_nodes_[f]) {
      std::string reason = filter.Reason(ctx, s_->nodes[node_id]);
      if (!reason.empty()) out.why.Explain(name, reason);
    }
  }
  if (gpu_rejects > 0) out.why.Reject("gpu-fit", gpu_rejects);
  if (mig_waits > 0) {
    out.why.Reject("mig-reconfigure", mig_waits);
    out.why.Explain("mig-reconfigure",
                    "whose idle GPUs changed MIG layout too recently to change again "
                    "(migReconfigureInterval)");
  }
  if (cycle.kept_off == 0) Remember(hash, task.FeasibilityKey(), cycle, out.why);
  return out;
}

void Placer::Commit(const TaskSpec& task, const Placement& p, CycleState* cycle) {
  if (p.node < 0) return;  // holds nothing (a task whose node left the estate while it stops)
  NodeState& node = s_->nodes[p.node];
  node.cpu_free -= task.cpu_milli;
  node.memory_free -= task.memory_mib;
  if (in_trial_) ++trial_held_;
  for (const DeviceGrant& d : p.devices) {
    GpuState& g = s_->gpus[d.gpu];
    if (d.mig_change != MigChange::kNone) {
      ++layout_changes_;
      if (in_trial_) trial_changed_ = true;
    }
    // Kept until the placement is settled (a start), so that giving it back before then (a
    // gang placed in part, a trial, an explanation) gives the GPU its layout back too.
    if (ReshapesGpu(d.mig_change) && !reshaped_.count(d.gpu)) reshaped_.emplace(d.gpu, g);
    if (d.mig_profile < 0) {
      if (d.mig_change == MigChange::kDisableMig) {
        g.mig_enabled = false;
        g.mig.clear();
        g.mig_used = 0;
        g.free_milli = 1000;
        g.free_memory_mib = g.memory_mib;
      }
      g.free_milli -= d.milli;
      g.free_memory_mib -= d.memory_mib;
      ++g.sharers;
      continue;
    }
    const domain::MigProfile& prof = s_->model(g.model).mig_profiles[d.mig_profile];
    if (d.mig_change == MigChange::kEnableMig || d.mig_change == MigChange::kRepartition) {
      g.mig_enabled = true;
      g.free_milli = 0;
      g.mig.clear();
      g.mig_used = 0;
    }
    if (d.mig_change == MigChange::kNone) {
      for (MigSlot& m : g.mig) {
        if (!m.allocated && m.profile == d.mig_profile && m.start == d.mig_start) {
          m.allocated = true;
          break;
        }
      }
    } else {
      g.mig.push_back({d.mig_profile, d.mig_start, static_cast<int8_t>(prof.memory_slices), true});
      g.mig_used |= prof.SliceBits(d.mig_start);
    }
    ++g.sharers;
  }
  if (uint32_t tag = task.AffinityTag()) {
    auto it = std::find_if(node.gpu_affinity.begin(), node.gpu_affinity.end(),
                           [tag](const auto& e) { return e.first == tag; });
    if (it == node.gpu_affinity.end()) {
      node.gpu_affinity.emplace_back(tag, 1);
    } else {
      ++it->second;
    }
  }
  index_.Update(*s_, p.node);
  version_ = ++last_epoch_;
  if (cycle && task.group >= 0) {
    auto& racks = cycle->group_racks[task.group];
    if (std::find(racks.begin(), racks.end(), node.rack) == racks.end()) racks.push_back(node.rack);
    cycle->group_cluster.emplace(task.group, node.cluster);
  }
}

bool Placer::Fits(const TaskSpec& task, const Placement& p) const {
  if (p.node < 0) return true;  // holds nothing
  const NodeState& node = s_->nodes[p.node];
  if (node.cpu_free < task.cpu_milli || node.memory_free < task.memory_mib) return false;
  for (const DeviceGrant& d : p.devices) {
    const GpuState& g = s_->gpus[d.gpu];
    if (d.mig_profile < 0) {
      if (d.mig_change == MigChange::kDisableMig) {
        if (!g.IdleMig() || g.mig_frozen) return false;
        continue;
      }
      if (g.mig_enabled || g.free_milli < d.milli || g.free_memory_mib < d.memory_mib) return false;
      if (d.milli == 1000 && !g.Idle()) return false;
      continue;
    }
    const domain::MigProfile& prof = s_->model(g.model).mig_profiles[d.mig_profile];
    const uint8_t bits = prof.SliceBits(d.mig_start);
    switch (d.mig_change) {
      case MigChange::kNone: {
        bool free_instance = false;
        for (const MigSlot& m : g.mig) {
          free_instance = free_instance ||
                          (!m.allocated && m.profile == d.mig_profile && m.start == d.mig_start);
        }
        if (!free_instance) return false;
        break;
      }
      case MigChange::kCreateInstance:
        if (!g.mig_enabled || (g.mig_used & bits)) return false;
        break;
      case MigChange::kRepartition:
        if (g.mig_frozen) return false;
        for (const MigSlot& m : g.mig) {
          if (m.allocated) return false;
        }
        break;
      case MigChange::kEnableMig:
        if (!g.Idle() || g.mig_frozen) return false;
        break;
      case MigChange::kDisableMig:
        return false;  // a MIG grant never leaves MIG mode
    }
  }
  return true;
}

void Placer::Release(const TaskSpec& task, const Placement& p) {
  if (p.node < 0) return;  // held nothing
  NodeState& node = s_->nodes[p.node];
  node.cpu_free += task.cpu_milli;
  node.memory_free += task.memory_mib;
  for (const DeviceGrant& d : p.devices) {
    GpuState& g = s_->gpus[d.gpu];
    --g.sharers;
    if (d.mig_profile < 0) {
      g.free_milli += d.milli;
      g.free_memory_mib += d.memory_mib;
      continue;
    }
    for (MigSlot& m : g.mig) {
      if (m.allocated && m.profile == d.mig_profile && m.start == d.mig_start) {
        m.allocated = false;  // the instance stays: the layout changes only when asked to
        break;
      }
    }
  }
  // A layout change that was never settled goes with the last placement that held the GPU.
  for (const DeviceGrant& d : p.devices) {
    auto before = reshaped_.find(d.gpu);
    if (before == reshaped_.end() || s_->gpus[d.gpu].sharers != 0) continue;
    const bool healthy = s_->gpus[d.gpu].healthy;
    s_->gpus[d.gpu] = before->second;
    s_->gpus[d.gpu].healthy = healthy;
    reshaped_.erase(before);
  }
  if (uint32_t tag = task.AffinityTag()) {
    auto it = std::find_if(node.gpu_affinity.begin(), node.gpu_affinity.end(),
                           [tag](const auto& e) { return e.first == tag; });
    if (it != node.gpu_affinity.end() && --it->second == 0) node.gpu_affinity.erase(it);
  }
  index_.Update(*s_, p.node);
  epoch_ = version_ = ++last_epoch_;
}

void Placer::Settle(const Placement& p) {
  for (const DeviceGrant& d : p.devices) reshaped_.erase(d.gpu);
}

void Placer::NodeAdded(int32_t node) {
  visited_.resize(s_->nodes.size(), 0);
  index_.Add(*s_, node);
  InvalidateCache();
}

void Placer::NodeChanged(int32_t node) {
  index_.Update(*s_, node);
  InvalidateCache();
}

}  // namespace meridian::sched
