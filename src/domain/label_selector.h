#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace meridian::domain {

// An equality-based label selector, as kubectl's `-l` takes one: requirements separated by
// commas, all of which must hold.
//   key=value, key==value   the label is present with this value
//   key!=value              the label is absent, or has another value
//   key                     the label is present (any value)
//   !key                    the label is absent
// Keys and values are what labels may hold (letters, digits, '-', '_', '.', '/'); values may be
// empty ("key=" selects an empty value). Set-based forms (`in (...)`) are not taken.
struct LabelRequirement {
  enum class Op { kEquals, kNotEquals, kExists, kNotExists };
  std::string key;
  Op op = Op::kExists;
  std::string value;
};

class LabelSelector {
 public:
  // An empty text selects everything. The error names the requirement that is malformed.
  static base::Result<LabelSelector> Parse(std::string_view text);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<LabelRequirement>& requirements() const { return requirements_; }

 private:
  std::vector<LabelRequirement> requirements_;
};

// The string members of a JSON object of labels (`spec.labels`, a node's `labels`); anything
// else (absent, not an object, a value that is no string) is no label.
std::map<std::string, std::string> LabelsOf(const nlohmann::json& labels);

}  // namespace meridian::domain
