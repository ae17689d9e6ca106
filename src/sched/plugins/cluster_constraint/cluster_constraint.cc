#include "sched/plugins/cluster_constraint/cluster_constraint.h"

namespace meridian::sched::plugins {

std::string WhyNot(const Snapshot& s, const TaskSpec& task, int32_t cluster) {
  const ClusterState& c = s.clusters[static_cast<size_t>(cluster)];
  if (task.checkpoint && !c.keeps_checkpoints) {
    return "in cluster " + c.name + ", which keeps no checkpoints (storage.checkpoints)";
  }
  if (task.image && !c.runs_images) {
    return "in cluster " + c.name + ", whose back end (Slurm) runs commands, not images";
  }
  if (c.caches_data) return {};
  for (int32_t d : task.datasets) {
    const DatasetState& data = s.datasets[static_cast<size_t>(d)];
    if (!(data.located & Bit(cluster))) {
      return "in cluster " + c.name + ", which lacks dataset " + data.name +
             " and has no cache to stage it to (storage.cache)";
    }
  }
  return {};
}

}  // namespace meridian::sched::plugins
