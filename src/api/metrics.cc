#include "api/metrics.h"

#include <cmath>
#include <cstdio>

namespace meridian::api {

namespace {

void AppendEscaped(const std::string& v, std::string* out) {
  for (char c : v) {
    if (c == '\\' || c == '"') out->push_back('\\');
    if (c == '\n') {
      *out += "\\n";
      continue;
    }
    out->push_back(c);
  }
}

void AppendLabels(const Metrics::Labels& labels, const std::string& extra, std::string* out) {
  if (labels.empty() && extra.empty()) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out->push_back(',');
    first = false;
    *out += k;
    *out += "=\"";
    AppendEscaped(v, out);
    out->push_back('"');
  }
  if (!extra.empty()) {
    if (!first) out->push_back(',');
    *out += extra;
  }
  out->push_back('}');
}

std::string LabelText(const Metrics::Labels& labels, const std::string& extra = "") {
  std::string s;
  AppendLabels(labels, extra, &s);
  return s;
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Whole numbers exactly (a GPU's 85899345920 bytes of memory; counters), others to 15 digits.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.15g", v);
  }
  return buf;
}

}  // namespace

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                               1,      2.5,     5,      10};
  return kBuckets;
}

void Metrics::Describe(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  f.type = type;
  f.help = help;
}

void Metrics::Add(const std::string& name, const Labels& labels, double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[name].values[labels] += delta;
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[name].values[labels] = value;
}

void Metrics::SetAll(const std::string& name,
                     const std::vector<std::pair<Labels, double>>& series) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& values = families_[name].values;
  values.clear();
  for (const auto& [labels, v] : series) values[labels] = v;
}

void Metrics::Observe(const std::string& name, const Labels& labels, double value) {
  const std::vector<double>& bounds = LatencyBuckets();
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  auto& counts = f.buckets[labels];
  if (counts.empty()) counts.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (value <= bounds[i]) counts[i] += 1;
  }
  auto& [sum, count] = f.stats[labels];
  sum += value;
  count += 1;
}

void Metrics::AddCollector(std::function<std::string()> collect) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collect));
}

std::string Metrics::Render() const {
  std::vector<std::function<std::string()>> collectors;
  std::string out = RenderFamilies(&collectors);
  for (const auto& collect : collectors) out += collect();
  return out;
}

std::string Metrics::RenderFamilies(std::vector<std::function<std::string()>>* collectors) const {
  std::lock_guard<std::mutex> lock(mu_);
  *collectors = collectors_;
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
    if (f.type == "histogram") {
      const std::vector<double>& bounds = LatencyBuckets();
      for (const auto& [labels, counts] : f.buckets) {
        for (size_t i = 0; i < bounds.size(); ++i) {
          out += name + "_bucket" + LabelText(labels, "le=\"" + Number(bounds[i]) + "\"") + " " +
                 Number(counts[i]) + "\n";
        }
        const auto& [sum, count] = f.stats.at(labels);
        out += name + "_bucket" + LabelText(labels, "le=\"+Inf\"") + " " + Number(count) + "\n";
        out += name + "_sum" + LabelText(labels) + " " + Number(sum) + "\n";
        out += name + "_count" + LabelText(labels) + " " + Number(count) + "\n";
      }
    } else {
      for (const auto& [labels, v] : f.values) {
        out += name + LabelText(labels) + " " + Number(v) + "\n";
      }
    }
  }
  return out;
}

void MetricsText::Describe(const std::string& name, const std::string& type,
                           const std::string& help) {
  Family& f = Find(name);
  f.head = "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

MetricsText::Family& MetricsText::Find(const std::string& name) {
  if (last_ < families_.size() && families_[last_].name == name) return families_[last_];
  for (size_t i = 0; i < families_.size(); ++i) {
    if (families_[i].name == name) {
      last_ = i;
      return families_[i];
    }
  }
  families_.push_back({name, "", ""});
  last_ = families_.size() - 1;
  return families_.back();
}

void MetricsText::Set(const std::string& name, const Metrics::Labels& labels, double value) {
  Family& f = Find(name);
  f.lines += name;
  AppendLabels(labels, "", &f.lines);
  f.lines.push_back(' ');
  f.lines += Number(value);
  f.lines.push_back('\n');
}

std::string MetricsText::Render() const {
  size_t size = 0;
  for (const Family& f : families_) size += f.head.size() + f.lines.size();
  std::string out;
  out.reserve(size);
  for (const Family& f : families_) {
    out += f.head;
    out += f.lines;
  }
  return out;
}

}  // namespace meridian::api
