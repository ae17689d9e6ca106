#include "sched/quota.h"

namespace meridian::sched {

int32_t QuotaTree::AddNode(const std::string& name, int32_t parent, double weight) {
  Node n;
  n.name = name;
  n.parent = parent;
  n.weight = weight > 0 ? weight : 1.0;
  n.entries.push_back(Entry{});
  nodes_.push_back(std::move(n));
  return static_cast<int32_t>(nodes_.size() - 1);
}

void QuotaTree::RemapModels(const std::vector<ModelId>& model_of) {
  for (Node& n : nodes_) {
    std::erase_if(n.entries, [&](Entry& e) {
      if (e.model == kNoModel) return false;  // entries[0], for any model, stays first
      const bool known = e.model >= 0 && static_cast<size_t>(e.model) < model_of.size() &&
                         model_of[static_cast<size_t>(e.model)] != kNoModel;
      if (known) e.model = model_of[static_cast<size_t>(e.model)];
      return !known;
    });
  }
}

int32_t QuotaTree::Find(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

QuotaTree::Entry* QuotaTree::FindEntry(int32_t node, ModelId model) {
  for (Entry& e : nodes_[node].entries) {
    if (e.model == model) return &e;
  }
  return nullptr;
}

const QuotaTree::Entry* QuotaTree::FindEntry(int32_t node, ModelId model) const {
  for (const Entry& e : nodes_[node].entries) {
    if (e.model == model) return &e;
  }
  return nullptr;
}

QuotaTree::Entry& QuotaTree::EnsureEntry(int32_t node, ModelId model) {
  if (Entry* e = FindEntry(node, model)) return *e;
  Entry e;
  e.model = model;
  nodes_[node].entries.push_back(e);
  return nodes_[node].entries.back();
}

void QuotaTree::SetQuota(int32_t node, ModelId model, int64_t guaranteed_milli,
                         int64_t limit_milli) {
  Entry& e = EnsureEntry(node, model);
  e.guaranteed = guaranteed_milli;
  e.limit = limit_milli;
  e.configured = true;
}

void QuotaTree::Charge(int32_t leaf, ModelId model, int64_t milli) {
  for (int32_t n = leaf; n >= 0; n = nodes_[n].parent) {
    nodes_[n].entries[0].used += milli;
    if (model != kNoModel) EnsureEntry(n, model).used += milli;
  }
}

int64_t QuotaTree::Used(int32_t node, ModelId model) const {
  const Entry* e = FindEntry(node, model);
  return e ? e->used : 0;
}

int64_t QuotaTree::Guaranteed(int32_t node, ModelId model) const {
  const Entry* e = FindEntry(node, model);
  return e ? e->guaranteed : 0;
}

int64_t QuotaTree::Limit(int32_t node, ModelId model) const {
  const Entry* e = FindEntry(node, model);
  return e ? e->limit : kUnlimited;
}

std::pair<int32_t, const QuotaTree::Entry*> QuotaTree::Exceeded(int32_t leaf, ModelId model,
                                                                int64_t milli) const {
  for (int32_t n = leaf; n >= 0; n = nodes_[n].parent) {
    for (const Entry& e : nodes_[n].entries) {
      if (!e.configured || e.limit == kUnlimited || (e.model != kNoModel && e.model != model)) {
        continue;
      }
      if (e.used + milli > e.limit) return {n, &e};
    }
  }
  return {-1, nullptr};
}

bool QuotaTree::WithinLimits(int32_t leaf, ModelId model, int64_t milli) const {
  return Exceeded(leaf, model, milli).second == nullptr;
}

std::string QuotaTree::LimitViolation(int32_t leaf, ModelId model, int64_t milli) const {
  const auto [n, e] = Exceeded(leaf, model, milli);
  if (!e) return "";
  return "quota of " + nodes_[n].name + (e->model == kNoModel ? "" : " for its GPU model") +
         ": limit " + std::to_string(e->limit / 1000.0).substr(0, 6) + " GPUs, in use " +
         std::to_string(e->used / 1000.0).substr(0, 6) + ", asked " +
         std::to_string(milli / 1000.0).substr(0, 6);
}

bool QuotaTree::WithinGuarantee(int32_t leaf, ModelId model, int64_t milli) const {
  bool any = false;
  for (int32_t n = leaf; n >= 0; n = nodes_[n].parent) {
    for (const Entry& e : nodes_[n].entries) {
      if (!e.configured || (e.model != kNoModel && e.model != model)) continue;
      any = true;
      if (e.used + milli > e.guaranteed) return false;
    }
  }
  return any;
}

bool QuotaTree::Borrowing(int32_t leaf) const {
  bool any = false;
  for (int32_t n = leaf; n >= 0; n = nodes_[n].parent) {
    for (const Entry& e : nodes_[n].entries) {
      if (!e.configured) continue;
      any = true;
      if (e.used > e.guaranteed) return true;
    }
  }
  return !any;
}

}  // namespace meridian::sched
