#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace meridian::api {

// A small Prometheus registry: counters, gauges and histograms with labels, rendered in the
// text exposition format (version 0.0.4). Thread-safe. Names follow Prometheus conventions:
// base units (seconds), `_total` for counters, labels in snake_case.
class Metrics {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Describe(const std::string& name, const std::string& type, const std::string& help);
  void Add(const std::string& name, const Labels& labels, double delta);
  void Set(const std::string& name, const Labels& labels, double value);
  // Replaces every series of a gauge at once (a snapshot such as queue depth by project), so
  // that series for things that went away disappear.
  void SetAll(const std::string& name, const std::vector<std::pair<Labels, double>>& series);
  void Observe(const std::string& name, const Labels& labels, double value);

  // Families computed when scraped (the estate's GPUs and nodes, server/telemetry_metrics.h):
  // `collect` returns them in the text format, appended to what Render writes. It is called on
  // the scraping thread without this registry's lock, and must not name a family of it.
  void AddCollector(std::function<std::string()> collect);

  std::string Render() const;

 private:
  // The registry's own families; `collectors` gets a copy of the collectors, to call unlocked.
  std::string RenderFamilies(std::vector<std::function<std::string()>>* collectors) const;
  struct Family {
    std::string type;
    std::string help;
    std::map<Labels, double> values;                    // counters and gauges
    std::map<Labels, std::vector<double>> buckets;      // histograms: counts per bucket
    std::map<Labels, std::pair<double, double>> stats;  // histograms: sum, count
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::function<std::string()>> collectors_;
};

// One scrape's families written as text as each series is set: for a collector that makes
// hundreds of thousands of series per scrape (every GPU of the estate, each with its labels),
// where a registry of them would be built, sorted and freed at every scrape. Series come out in
// the order they were set, each family's together; each series is set once. Not thread-safe.
class MetricsText {
 public:
  void Describe(const std::string& name, const std::string& type, const std::string& help);
  // `name` must have been described.
  void Set(const std::string& name, const Metrics::Labels& labels, double value);
  std::string Render() const;  // families in the order described

 private:
  struct Family {
    std::string name;
    std::string head;  // HELP and TYPE
    std::string lines;
  };
  Family& Find(const std::string& name);
  std::vector<Family> families_;
  size_t last_ = 0;  // the family set last: most scrapes set one family many times in a row
};

// Upper bounds of the latency histograms, in seconds (100 us to 10 s).
const std::vector<double>& LatencyBuckets();

}  // namespace meridian::api
