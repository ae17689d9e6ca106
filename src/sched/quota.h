#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/snapshot.h"

namespace meridian::sched {

inline constexpr int64_t kUnlimited = -1;

// The tenancy tree (organization > team > project) with a guaranteed share and a limit of GPU
// capacity (milli-GPU) at each node, per GPU model or for any model, and what each node uses
// now. A project may borrow idle capacity beyond its guarantee up to its limits; what it uses
// beyond the guarantee of any node on its path is "borrowed", and is reclaimed first when an
// owner needs its guarantee back. Not thread-safe.
class QuotaTree {
 public:
  // Adds a node under `parent` (-1 for a root); `weight` is its fair-share weight (> 0).
  int32_t AddNode(const std::string& name, int32_t parent, double weight = 1.0);
  // Sets the guarantee and limit of `node` for `model` (kNoModel: all models together).
  void SetQuota(int32_t node, ModelId model, int64_t guaranteed_milli, int64_t limit_milli);

  // Renumbers GPU models (`model_of[old]`, kNoModel: no longer known, its quotas dropped), so
  // that a tree built against one snapshot holds for another of the same models.
  void RemapModels(const std::vector<ModelId>& model_of);

  int32_t Find(const std::string& name) const;
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  const std::string& name(int32_t node) const { return nodes_[node].name; }
  int32_t parent(int32_t node) const { return nodes_[node].parent; }
  double weight(int32_t node) const { return nodes_[node].weight; }

  // What `leaf` and its ancestors would use with `milli` more of `model` against their limits:
  // empty when it fits, otherwise a sentence naming the node and limit that stops it.
  std::string LimitViolation(int32_t leaf, ModelId model, int64_t milli) const;
  // LimitViolation(...).empty(), without the sentence: for callers that ask only whether.
  bool WithinLimits(int32_t leaf, ModelId model, int64_t milli) const;
  // True when `milli` more of `model` keeps `leaf` and every ancestor within the guarantees
  // configured for them, and at least one guarantee applies (without one nothing is owned).
  bool WithinGuarantee(int32_t leaf, ModelId model, int64_t milli) const;
  // True when `leaf` or an ancestor uses more than a configured guarantee, or when no guarantee
  // applies to `leaf` at all: such use is borrowed and the first to be reclaimed.
  bool Borrowing(int32_t leaf) const;

  // Records `milli` of `model` taken (positive) or given back (negative) by `leaf`.
  void Charge(int32_t leaf, ModelId model, int64_t milli);
  int64_t Used(int32_t node, ModelId model) const;
  int64_t Guaranteed(int32_t node, ModelId model) const;
  int64_t Limit(int32_t node, ModelId model) const;

 private:
  struct Entry {
    ModelId model = kNoModel;  // kNoModel: any model
    int64_t guaranteed = 0;
    int64_t limit = kUnlimited;
    int64_t used = 0;
    bool configured = false;  // set by SetQuota; entries made by Charge only count use
  };
  // The node whose limit `milli` more would pass, and its entry that says so; {-1, null} when
  // none would.
  std::pair<int32_t, const Entry*> Exceeded(int32_t leaf, ModelId model, int64_t milli) const;
  struct Node {
    std::string name;
    int32_t parent = -1;
    double weight = 1.0;
    std::vector<Entry> entries;  // entries[0] is the any-model entry
  };
  Entry* FindEntry(int32_t node, ModelId model);
  const Entry* FindEntry(int32_t node, ModelId model) const;
  Entry& EnsureEntry(int32_t node, ModelId model);

  std::vector<Node> nodes_;
};

}  // namespace meridian::sched
