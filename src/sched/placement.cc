#include "sched/placement.h"

namespace meridian::sched {

void Unschedulable::Reject(const std::string& reason, int64_t n) {
  for (auto& [r, count] : rejected_by) {
    if (r == reason) {
      count += n;
      return;
    }
  }
  rejected_by.emplace_back(reason, n);
}

void Unschedulable::Explain(const std::string& filter, const std::string& reason, int64_t n) {
  for (Detail& d : details) {
    if (d.filter == filter && d.reason == reason) {
      d.nodes += n;
      return;
    }
  }
  details.push_back({filter, reason, n});
}

namespace {

std::string Nodes(int64_t n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

}  // namespace

std::string Unschedulable::Summary() const {
  if (rejected_by.empty()) {
    return nodes_considered == 0
               ? "no node has the free GPUs asked for (count, share or MIG profile) of an "
                 "allowed model"
               : "no feasible node";
  }
  // Details may contain commas ("training, not inference"), so parts are split by semicolons.
  std::string out = Nodes(nodes_considered) + " considered: ";
  bool first = true;
  auto part = [&](const std::string& text) {
    if (!first) out += "; ";
    first = false;
    out += text;
  };
  for (const auto& [filter, count] : rejected_by) {
    bool explained = false;
    for (const Detail& d : details) {
      if (d.filter != filter) continue;
      part(Nodes(d.nodes) + " " + d.reason);
      explained = true;
    }
    if (!explained) part(std::to_string(count) + " rejected by " + filter);
  }
  return out;
}

}  // namespace meridian::sched
