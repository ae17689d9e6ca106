// How a node shares its tasks' GPUs, as its agent reports it (issue 20). Part of NodeService
// (nodes.h).
#include <algorithm>

#include "server/nodes.h"

namespace meridian::server {

base::Result<int64_t> NodeService::ApplySharing(const std::string& node,
                                                const std::vector<protocol::TaskReport>& tasks) {
  struct News {
    int64_t job;
    std::string project;
    std::string type;
    std::string message;
  };
  std::vector<News> news;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto here = assigned_.find(node);
    if (here == assigned_.end()) return 0;
    for (const protocol::TaskReport& t : tasks) {
      if (!t.sharing) continue;
      // Only of runs assigned to the node, and of a GPU their grant shares.
      auto run = here->second.find({t.job, t.report.task});
      if (run == here->second.end() || run->second.assignment.generation != t.report.generation) {
        continue;
      }
      const protocol::SharingNote& n = *t.sharing;
      const auto& devices = run->second.assignment.devices;
      auto d = std::find_if(devices.begin(), devices.end(), [&](const protocol::DeviceGrant& g) {
        return g.gpu == n.gpu && !g.mig && g.milli < 1000;
      });
      if (d == devices.end()) continue;
      if (!sharing_said_.insert({t.job, t.report.task, t.report.generation, t.report.restarts})
               .second) {
        continue;
      }
      const std::string gpu = "GPU " + std::to_string(n.gpu) + " of node " + node;
      const std::string task = " (task " + std::to_string(t.report.task) + ")";
      std::string memory = d->memory_mib > 0 ? std::to_string(d->memory_mib) + " MiB" : "";
      if (n.mode == "mps") {
        // MPS holds a job's tasks to their memory and to their share of the SMs; the MPS
        // servers of different jobs on the GPU (one per job) are time-sliced by the GPU.
        news.push_back({t.job, run->second.assignment.project, "Normal",
                        gpu + " shared through MPS: held to " +
                            (memory.empty() ? "" : memory + " of its memory and to ") +
                            std::to_string(d->milli / 10) +
                            "% of its compute within its job's turns (other jobs' shares of "
                            "the GPU take turns with it)" +
                            task});
      } else if (!n.why.empty()) {
        news.push_back({t.job, run->second.assignment.project, "Warning",
                        gpu + " time-sliced: " + n.why.substr(0, 512) + task});
      } else {
        news.push_back({t.job, run->second.assignment.project, "Normal",
                        gpu + " time-sliced as its pool shares GPUs (gpuSharing: time-slicing): " +
                            "the share is not enforced" + task});
      }
    }
    if (sharing_said_.size() > 100000) sharing_said_.clear();  // bounded; said again at worst
  }
  if (news.empty()) return 0;
  const double now = clock_->Now();
  int64_t seq = 0;
  base::Status s = store_->Write([&](store::Tx& tx) {
    for (const News& n : news) {
      auto e = tx.AppendEvent(
          {0, now, "Job", std::to_string(n.job), n.project, n.type, "GpuShared", n.message});
      if (!e.ok()) return e.status();
      seq = *e;
    }
    return base::Status::Ok();
  });
  if (!s.ok()) return s;
  return seq;
}

}  // namespace meridian::server
