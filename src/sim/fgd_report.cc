#include "sim/fgd_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/strings.h"

namespace meridian::sim {
namespace {

std::string BandText(const Band& b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%6.2f [%6.2f-%6.2f]", b.mean, b.min, b.max);
  return buf;
}

std::string MeridianPolicyName(std::string_view published) {
  // "06-FGD" -> "fgd"; the number before the dash is the artifact's own ordering.
  size_t dash = published.find('-');
  std::string_view name = dash == std::string_view::npos ? published : published.substr(dash + 1);
  if (name == "Random") return "random";
  if (name == "DotProd") return "dotprod";
  if (name == "GpuClustering") return "gpu-clustering";
  if (name == "GpuPacking") return "gpu-packing";
  if (name == "BestFit") return "best-fit";
  if (name == "FGD") return "fgd";
  return std::string(name);
}

bool ParseBand(std::string_view mean, std::string_view range, Band* b) {
  // "95.23" "[95.06-95.38]"
  if (range.size() < 5 || range.front() != '[' || range.back() != ']') return false;
  range = range.substr(1, range.size() - 2);
  size_t dash = range.find('-', 1);
  if (dash == std::string_view::npos) return false;
  try {
    b->mean = std::stod(std::string(mean));
    b->min = std::stod(std::string(range.substr(0, dash)));
    b->max = std::stod(std::string(range.substr(dash + 1)));
  } catch (...) {
    return false;
  }
  return true;
}

}  // namespace

base::Result<PublishedTable> ReadPublishedSummary(const std::string& path,
                                                  const std::string& workload) {
  std::ifstream in(path);
  if (!in) return base::Status::Io(path + ": cannot open for reading");
  PublishedTable table;
  std::vector<std::string> policies;
  int arrived = -1;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    if (w[0] == "###" && w.size() >= 4 && w[1] == "arrived") {
      long long v = 0;
      std::string pct = w[3];
      if (!pct.empty() && pct.back() == '%') pct.pop_back();
      if (!base::ParseInt64(pct, &v)) {
        return base::Status::Invalid(path + ":" + std::to_string(line_no) + ":1: bad section");
      }
      arrived = static_cast<int>(v);
      continue;
    }
    if (w[0] == "workload") {
      policies.clear();
      for (size_t i = 1; i < w.size(); ++i) policies.push_back(MeridianPolicyName(w[i]));
      continue;
    }
    if (w[0] != workload || arrived < 0) continue;
    if (w.size() != 1 + 2 * policies.size()) {
      return base::Status::Invalid(path + ":" + std::to_string(line_no) +
                                   ":1: expected a mean and a [min-max] per policy");
    }
    for (size_t p = 0; p < policies.size(); ++p) {
      Band b;
      if (!ParseBand(w[1 + 2 * p], w[2 + 2 * p], &b)) {
        return base::Status::Invalid(path + ":" + std::to_string(line_no) + ": bad value \"" +
                                     w[1 + 2 * p] + " " + w[2 + 2 * p] + "\"");
      }
      table[policies[p]][arrived] = b;
    }
  }
  if (table.empty()) {
    return base::Status::NotFound(path + ": no rows for workload \"" + workload + "\"");
  }
  return table;
}

void PrintFgdTable(const std::vector<FgdResult>& results, const PublishedTable* published,
                   std::ostream& out) {
  for (const FgdResult& r : results) {
    out << "policy " << r.policy << ": " << r.runs.size() << " seeds, " << r.seconds << " s\n";
    const std::map<int, Band>* pub = nullptr;
    if (published) {
      auto it = published->find(r.policy);
      if (it != published->end()) pub = &it->second;
    }
    char head[256];
    std::snprintf(head, sizeof head, "  %-8s %-24s %-24s %-24s%s\n", "arrived", "allocation %",
                  "frag amount %", "frag ratio %", pub ? "  published allocation %" : "");
    out << head;
    for (const FgdPointSummary& p : r.points) {
      out << "  " << p.arrived << "%" << std::string(p.arrived >= 100 ? 5 : 6, ' ')
          << BandText(p.allocation) << "   " << BandText(p.frag_amount) << "   "
          << BandText(p.frag_ratio);
      if (pub) {
        auto it = pub->find(p.arrived);
        if (it != pub->end()) out << "   " << BandText(it->second);
      }
      out << "\n";
    }
  }
}

nlohmann::json FgdJson(const std::vector<FgdResult>& results, const std::string& workload) {
  auto band = [](const Band& b) {
    return nlohmann::json{{"mean", b.mean}, {"min", b.min}, {"max", b.max}};
  };
  nlohmann::json policies = nlohmann::json::array();
  for (const FgdResult& r : results) {
    nlohmann::json points = nlohmann::json::array();
    for (const FgdPointSummary& p : r.points) {
      points.push_back({{"arrived", p.arrived},
                        {"allocation", band(p.allocation)},
                        {"fragmentation_amount", band(p.frag_amount)},
                        {"fragmentation_ratio", band(p.frag_ratio)}});
    }
    nlohmann::json seeds = nlohmann::json::array();
    for (const FgdRun& run : r.runs) {
      seeds.push_back({{"seed", run.seed}, {"tasks", run.tasks}, {"failed", run.failed}});
    }
    policies.push_back(
        {{"policy", r.policy}, {"seconds", r.seconds}, {"seeds", seeds}, {"points", points}});
  }
  nlohmann::json out = {{"workload", workload}, {"policies", policies}};
  // With one policy the object also carries its points at the top level, as the issue's
  // `--json` contract reads them.
  if (results.size() == 1) {
    out["policy"] = results[0].policy;
    out["points"] = policies[0]["points"];
  }
  return out;
}

}  // namespace meridian::sim
