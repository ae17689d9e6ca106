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

std::string Unschedulable::Summary() const {
  if (rejected_by.empty()) {
    return nodes_considered == 0
               ? "no node has the free GPUs asked for (count, share or MIG profile) of an "
                 "allowed model"
               : "no feasible node";
  }
  std::string out = std::to_string(nodes_considered) + " nodes considered: ";
  for (size_t i = 0; i < rejected_by.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(rejected_by[i].second) + " rejected by " + rejected_by[i].first;
  }
  return out;
}

}  // namespace meridian::sched
