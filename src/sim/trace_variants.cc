#include "sim/trace_variants.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "base/rng.h"

namespace meridian::sim {

namespace {

bool CpuOnly(const TraceTask& t) { return t.num_gpu == 0 || t.gpu_milli == 0; }
bool MultiGpu(const TraceTask& t) { return !CpuOnly(t) && t.num_gpu > 1; }
bool SingleGpu(const TraceTask& t) { return !CpuOnly(t) && t.num_gpu == 1; }
bool Fractional(const TraceTask& t) { return SingleGpu(t) && t.gpu_milli < 1000; }
bool Constrained(const TraceTask& t) { return !t.gpu_spec.empty(); }

// "V100M32" and "V100M16" are the family "V100": the memory suffix names a size, not a kind.
std::string Family(const std::string& model) {
  size_t m = model.find_last_of('M');
  if (m == std::string::npos || m == 0 || m + 1 == model.size()) return model;
  for (size_t i = m + 1; i < model.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(model[i]))) return model;
  }
  return model.substr(0, m);
}

// k distinct indexes of `from`, uniformly (a partial Fisher-Yates shuffle).
std::vector<size_t> Pick(std::vector<size_t> from, size_t k, base::Rng* rng) {
  for (size_t i = 0; i < k && i < from.size(); ++i) {
    std::swap(from[i], from[i + rng->Uniform(from.size() - i)]);
  }
  from.resize(std::min(k, from.size()));
  return from;
}

size_t Target(double share, size_t population) {
  return static_cast<size_t>(std::llround(share * static_cast<double>(population)));
}

base::Status CheckShare(const char* flag, const std::optional<double>& share, bool below_one) {
  if (!share) return base::Status::Ok();
  if (!(*share >= 0 && (below_one ? *share < 1 : *share <= 1))) {
    return base::Status::Invalid(std::string(flag) + ": a share in [0, " +
                                 (below_one ? "1)" : "1]") + ", got " + std::to_string(*share));
  }
  return base::Status::Ok();
}

// Moves tasks of the population in or out of a class until `share` of the population is in it.
// A task that joins or leaves takes the CPU, memory and GPU request of a random task of the
// class it lands in, and keeps its name and times.
base::Status Rebalance(std::vector<TraceTask>* tasks,
                       const std::function<bool(const TraceTask&)>& population,
                       const std::function<bool(const TraceTask&)>& member, double share,
                       const std::string& what, base::Rng* rng) {
  std::vector<size_t> in, out;
  for (size_t i = 0; i < tasks->size(); ++i) {
    if (!population((*tasks)[i])) continue;
    (member((*tasks)[i]) ? in : out).push_back(i);
  }
  const size_t target = Target(share, in.size() + out.size());
  if (target == in.size()) return base::Status::Ok();
  const bool grow = target > in.size();
  const std::vector<size_t>& donors = grow ? in : out;
  if (donors.empty()) {
    return base::Status::Invalid("the task list has no " + std::string(grow ? "" : "non-") + what +
                                 " task to draw from");
  }
  const std::vector<TraceTask> templates = [&] {
    std::vector<TraceTask> t;
    for (size_t i : donors) t.push_back((*tasks)[i]);
    return t;
  }();
  const size_t moves = grow ? target - in.size() : in.size() - target;
  for (size_t i : Pick(grow ? out : in, moves, rng)) {
    const TraceTask& d = templates[rng->Uniform(templates.size())];
    TraceTask& t = (*tasks)[i];
    t.cpu_milli = d.cpu_milli;
    t.memory_mib = d.memory_mib;
    t.num_gpu = d.num_gpu;
    t.gpu_milli = d.gpu_milli;
    t.gpu_spec = d.gpu_spec;
  }
  return base::Status::Ok();
}

base::Status SetCpuOnly(std::vector<TraceTask>* tasks, double share, base::Rng* rng) {
  // As the trace's cpuNNN lists do: the GPU tasks stay, CPU-only tasks are added or removed.
  std::vector<size_t> cpu, gpu;
  for (size_t i = 0; i < tasks->size(); ++i) (CpuOnly((*tasks)[i]) ? cpu : gpu).push_back(i);
  const size_t target =
      static_cast<size_t>(std::llround(share / (1 - share) * static_cast<double>(gpu.size())));
  if (target > cpu.size()) {
    if (cpu.empty())
      return base::Status::Invalid("the task list has no CPU-only task to draw from");
    const size_t have = cpu.size();
    for (size_t n = 0; n < target - have; ++n) {
      TraceTask t = (*tasks)[cpu[rng->Uniform(have)]];
      t.name += "-v" + std::to_string(n);
      tasks->push_back(std::move(t));
    }
  } else if (target < cpu.size()) {
    std::vector<bool> drop(tasks->size(), false);
    for (size_t i : Pick(cpu, cpu.size() - target, rng)) drop[i] = true;
    std::vector<TraceTask> kept;
    for (size_t i = 0; i < tasks->size(); ++i) {
      if (!drop[i]) kept.push_back(std::move((*tasks)[i]));
    }
    *tasks = std::move(kept);
  }
  return base::Status::Ok();
}

base::Status SetConstrained(std::vector<TraceTask>* tasks, const std::vector<TraceNode>& nodes,
                            double share, base::Rng* rng) {
  std::map<std::string, std::vector<std::string>> models_of;  // family -> its models
  std::map<std::string, int64_t> gpus_of;
  for (const TraceNode& n : nodes) {
    if (n.model.empty() || n.gpus == 0) continue;
    std::vector<std::string>& models = models_of[Family(n.model)];
    if (std::find(models.begin(), models.end(), n.model) == models.end()) {
      models.push_back(n.model);
    }
    gpus_of[Family(n.model)] += n.gpus;
  }
  std::vector<size_t> in, out;
  for (size_t i = 0; i < tasks->size(); ++i) {
    if (CpuOnly((*tasks)[i])) continue;
    (Constrained((*tasks)[i]) ? in : out).push_back(i);
  }
  const size_t target = Target(share, in.size() + out.size());
  if (target <= in.size()) {
    for (size_t i : Pick(in, in.size() - target, rng)) (*tasks)[i].gpu_spec.clear();
    return base::Status::Ok();
  }
  for (size_t i : Pick(out, target - in.size(), rng)) {
    TraceTask& t = (*tasks)[i];
    // The families with a node that can hold the task, weighted by their GPUs.
    std::map<std::string, int64_t> fits;
    for (const TraceNode& n : nodes) {
      if (!n.model.empty() && n.gpus >= t.num_gpu && n.cpu_milli >= t.cpu_milli &&
          n.memory_mib >= t.memory_mib) {
        fits[Family(n.model)] = gpus_of[Family(n.model)];
      }
    }
    int64_t total = 0;
    for (const auto& [family, gpus] : fits) total += gpus;
    if (total == 0) continue;  // no node holds it at all: constraining it changes nothing
    int64_t draw = static_cast<int64_t>(rng->Uniform(static_cast<uint64_t>(total)));
    for (const auto& [family, gpus] : fits) {
      if (draw < gpus) {
        t.gpu_spec = models_of[family];
        break;
      }
      draw -= gpus;
    }
  }
  return base::Status::Ok();
}

}  // namespace

std::string TraceVariant::Name() const {
  std::string name;
  auto add = [&](const char* what, const std::optional<double>& share) {
    if (!share) return;
    if (!name.empty()) name += "-";
    name += what + std::to_string(std::lround(*share * 100));
  };
  add("cpuonly", cpu_only);
  add("multigpu", multi_gpu);
  add("fractional", fractional);
  add("constrained", constrained);
  return name;
}

base::Result<std::vector<TraceTask>> VaryTrace(std::vector<TraceTask> tasks,
                                               const std::vector<TraceNode>& nodes,
                                               const TraceVariant& v) {
  if (auto s = CheckShare("--cpu-only", v.cpu_only, true); !s.ok()) return s;
  if (auto s = CheckShare("--multi-gpu", v.multi_gpu, false); !s.ok()) return s;
  if (auto s = CheckShare("--fractional", v.fractional, false); !s.ok()) return s;
  if (auto s = CheckShare("--constrained", v.constrained, false); !s.ok()) return s;
  base::Rng rng(v.seed);
  auto with = [](const char* flag, base::Status s) {
    return s.ok() ? s : base::Status::Invalid(std::string(flag) + ": " + s.message());
  };
  if (v.cpu_only) {
    if (auto s = with("--cpu-only", SetCpuOnly(&tasks, *v.cpu_only, &rng)); !s.ok()) return s;
  }
  if (v.multi_gpu) {
    auto gpu = [](const TraceTask& t) { return !CpuOnly(t); };
    if (auto s =
            with("--multi-gpu", Rebalance(&tasks, gpu, MultiGpu, *v.multi_gpu, "multi-GPU", &rng));
        !s.ok()) {
      return s;
    }
  }
  if (v.fractional) {
    if (auto s = with("--fractional", Rebalance(&tasks, SingleGpu, Fractional, *v.fractional,
                                                "fractional single-GPU", &rng));
        !s.ok()) {
      return s;
    }
  }
  if (v.constrained) {
    if (auto s = SetConstrained(&tasks, nodes, *v.constrained, &rng); !s.ok()) return s;
  }
  return tasks;
}

std::string AlibabaTasksCsv(const std::vector<TraceTask>& tasks) {
  std::ostringstream out;
  out << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
         "deletion_time,scheduled_time\n";
  auto time = [](int64_t t) { return t < 0 ? std::string() : std::to_string(t); };
  for (const TraceTask& t : tasks) {
    std::string spec;
    for (const std::string& m : t.gpu_spec) spec += (spec.empty() ? "" : "|") + m;
    out << t.name << ',' << t.cpu_milli << ',' << t.memory_mib << ',' << t.num_gpu << ','
        << t.gpu_milli << ',' << spec << ',' << t.qos << ',' << t.phase << ',' << t.creation_time
        << ',' << time(t.deletion_time) << ',' << time(t.scheduled_time) << '\n';
  }
  return out.str();
}

}  // namespace meridian::sim
