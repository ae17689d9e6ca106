#include "sched/node_index.h"

#include <algorithm>
#include <atomic>

#include "sched/node_math.h"

namespace meridian::sched {

namespace {

// Each index counts its versions from its own start, far from every other's, so that a version
// names one state of one index even when a new index takes the address of one gone.
uint64_t FirstVersion() {
  static std::atomic<uint64_t> next{0};
  return (next.fetch_add(1) + 1) << 40;
}

}  // namespace

NodeIndex::NodeIndex(const Snapshot& s) : version_(FirstVersion()) {
  by_model_.resize(s.model_count() + 1);
  for (const NodeState& n : s.nodes) {
    ModelBuckets& b = by_model_[BucketsIndex(n)];
    if (static_cast<int>(b.whole.size()) < n.gpu_count + 1) b.whole.resize(n.gpu_count + 1);
  }
  where_.resize(s.nodes.size());
  free_by_model_.assign(by_model_.size(), 0);
  counted_free_.assign(s.nodes.size(), 0);
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    Insert(s, static_cast<int32_t>(i));
    Recount(s, static_cast<int32_t>(i));
  }
}

void NodeIndex::Recount(const Snapshot& s, int32_t node) {
  ++version_;
  const NodeState& n = s.nodes[node];
  if (n.model != kNoModel) {
    if (largest_.size() <= static_cast<size_t>(n.model)) largest_.resize(n.model + 1);
    Largest& l = largest_[n.model];
    l.gpus = std::max(l.gpus, n.gpu_count);
    l.cpu_milli = std::max(l.cpu_milli, n.cpu_capacity);
    l.memory_mib = std::max(l.memory_mib, n.memory_capacity);
  }
  const int64_t free = n.Usable() ? GpuMilliLeft(s, n) : 0;
  free_by_model_[BucketsIndex(n)] += free - counted_free_[node];
  counted_free_[node] = free;
}

size_t NodeIndex::BucketsIndex(const NodeState& n) const {
  return n.model == kNoModel ? by_model_.size() - 1 : static_cast<size_t>(n.model);
}

NodeIndex::Class NodeIndex::Classify(const Snapshot& s, const NodeState& n) const {
  Class c;
  if (!n.Usable()) return c;
  c.whole = 0;
  int32_t best_partial = 0;
  for (int32_t i = 0; i < n.gpu_count; ++i) {
    const GpuState& g = s.gpus[n.gpu_begin + i];
    if (!g.healthy) continue;
    if (g.mig_enabled) {
      bool room = g.mig_used != 0xFF;
      for (const MigSlot& m : g.mig) room = room || !m.allocated;
      c.mig = c.mig || room;
      if (g.IdleMig()) ++c.whole;  // whole-GPU work may take it back (MigChange::kDisableMig)
    } else if (g.Idle()) {
      ++c.whole;
    } else if (g.free_milli > best_partial) {
      best_partial = g.free_milli;
    }
  }
  if (best_partial > 0) c.partial = static_cast<int8_t>(std::min(best_partial / 100, 9));
  return c;
}

void NodeIndex::Insert(const Snapshot& s, int32_t node) {
  const NodeState& n = s.nodes[node];
  Class c = Classify(s, n);
  Where& w = where_[node];
  w = Where{};
  if (c.whole < 0) return;
  ModelBuckets& b = by_model_[BucketsIndex(n)];
  w.model = static_cast<int16_t>(BucketsIndex(n));
  w.whole = c.whole;
  w.whole_pos = static_cast<int32_t>(b.whole[c.whole].size());
  b.whole[c.whole].push_back(node);
  if (b.at_least.size() < b.whole.size()) b.at_least.resize(b.whole.size(), 0);
  for (int16_t level = 0; level <= c.whole; ++level) ++b.at_least[level];
  if (c.partial >= 0) {
    w.partial = c.partial;
    w.partial_pos = static_cast<int32_t>(b.partial[c.partial].size());
    b.partial[c.partial].push_back(node);
  }
  if (c.mig) {
    w.mig = true;
    w.mig_pos = static_cast<int32_t>(b.mig.size());
    b.mig.push_back(node);
  }
}

void NodeIndex::Remove(int32_t node) {
  Where& w = where_[node];
  if (w.whole < 0) return;
  auto swap_remove = [this](std::vector<int32_t>& list, int32_t pos, int32_t Where::*pos_field) {
    int32_t last = list.back();
    list[pos] = last;
    where_[last].*pos_field = pos;
    list.pop_back();
  };
  ModelBuckets& b = by_model_[w.model];
  // Copy the positions: swap_remove may rewrite where_[node] when the node is last in a list.
  Where old = w;
  swap_remove(b.whole[old.whole], old.whole_pos, &Where::whole_pos);
  for (int16_t level = 0; level <= old.whole; ++level) --b.at_least[level];
  if (old.partial >= 0) swap_remove(b.partial[old.partial], old.partial_pos, &Where::partial_pos);
  if (old.mig) swap_remove(b.mig, old.mig_pos, &Where::mig_pos);
  where_[node] = Where{};
}

void NodeIndex::Add(const Snapshot& s, int32_t node) {
  const NodeState& n = s.nodes[node];
  ModelBuckets& b = by_model_[BucketsIndex(n)];
  if (static_cast<int>(b.whole.size()) < n.gpu_count + 1) b.whole.resize(n.gpu_count + 1);
  if (where_.size() <= static_cast<size_t>(node)) where_.resize(node + 1);
  if (counted_free_.size() <= static_cast<size_t>(node)) counted_free_.resize(node + 1, 0);
  Insert(s, node);
  Recount(s, node);
}

void NodeIndex::Update(const Snapshot& s, int32_t node) {
  Recount(s, node);
  Class c = Classify(s, s.nodes[node]);
  const Where& w = where_[node];
  if (c.whole == w.whole && c.partial == w.partial && c.mig == w.mig) return;
  Remove(node);
  Insert(s, node);
}

void NodeIndex::CandidateLists(const Snapshot& s, const TaskSpec& t,
                               std::vector<const std::vector<int32_t>*>* out) const {
  out->clear();
  const int models = static_cast<int>(by_model_.size()) - 1;
  auto allowed = [&](int m) { return (t.allowed_models & Bit(m)) != 0; };
  size_t max_whole = 0;
  for (const ModelBuckets& b : by_model_) max_whole = std::max(max_whole, b.whole.size());
  auto add_whole_from = [&](size_t first_level) {
    for (size_t level = first_level; level < max_whole; ++level) {
      for (int m = 0; m < models; ++m) {
        if (allowed(m) && level < by_model_[m].whole.size() && !by_model_[m].whole[level].empty()) {
          out->push_back(&by_model_[m].whole[level]);
        }
      }
    }
  };
  switch (t.gpu_kind) {
    case GpuKind::kNone: {
      const ModelBuckets& cpu = by_model_.back();
      for (const auto& list : cpu.whole) {
        if (!list.empty()) out->push_back(&list);
      }
      for (size_t level = 0; level < max_whole; ++level) {
        for (int m = 0; m < models; ++m) {
          if (level < by_model_[m].whole.size() && !by_model_[m].whole[level].empty()) {
            out->push_back(&by_model_[m].whole[level]);
          }
        }
      }
      return;
    }
    case GpuKind::kWhole:
      add_whole_from(static_cast<size_t>(t.gpu_count));
      return;
    case GpuKind::kFraction: {
      int first = std::min(t.gpu_milli / 100, kPartialBuckets - 1);
      for (int b = first; b < kPartialBuckets; ++b) {
        for (int m = 0; m < models; ++m) {
          if (allowed(m) && !by_model_[m].partial[b].empty()) {
            out->push_back(&by_model_[m].partial[b]);
          }
        }
      }
      add_whole_from(1);
      return;
    }
    case GpuKind::kMig: {
      Mask with_profile = 0;
      for (int m = 0; m < models; ++m) {
        if (allowed(m) && s.model(static_cast<ModelId>(m)).FindMigProfile(t.mig_profile)) {
          with_profile |= Bit(m);
          if (!by_model_[m].mig.empty()) out->push_back(&by_model_[m].mig);
        }
      }
      for (size_t level = 1; level < max_whole; ++level) {
        for (int m = 0; m < models; ++m) {
          if ((with_profile & Bit(m)) && level < by_model_[m].whole.size() &&
              !by_model_[m].whole[level].empty()) {
            out->push_back(&by_model_[m].whole[level]);
          }
        }
      }
      return;
    }
  }
}

}  // namespace meridian::sched
