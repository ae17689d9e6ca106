#include "domain/label_selector.h"

#include <cctype>

#include "base/strings.h"

namespace meridian::domain {

namespace {

bool LabelText(std::string_view s, bool allow_empty) {
  if (s.empty()) return allow_empty;
  if (s.size() > 253) return false;
  for (char ch : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                    ch == '.' || ch == '/';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

base::Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector out;
  if (base::Trim(text).empty()) return out;
  for (std::string_view raw : base::Split(text, ',')) {
    const std::string_view part = base::Trim(raw);
    auto bad = [&](const std::string& why) {
      return base::Status::Invalid("label selector \"" + std::string(text) + "\": \"" +
                                   std::string(part) + "\" " + why +
                                   " (use key=value, key!=value, key or !key, comma-separated)");
    };
    if (part.empty()) return bad("is empty");
    LabelRequirement r;
    std::string_view key, value;
    if (part.front() == '!') {
      r.op = LabelRequirement::Op::kNotExists;
      key = base::Trim(part.substr(1));
    } else if (size_t at = part.find("!="); at != std::string_view::npos) {
      r.op = LabelRequirement::Op::kNotEquals;
      key = base::Trim(part.substr(0, at));
      value = base::Trim(part.substr(at + 2));
    } else if (size_t eq = part.find('='); eq != std::string_view::npos) {
      r.op = LabelRequirement::Op::kEquals;
      key = base::Trim(part.substr(0, eq));
      const size_t skip = eq + 1 < part.size() && part[eq + 1] == '=' ? 2 : 1;
      value = base::Trim(part.substr(eq + skip));
    } else {
      r.op = LabelRequirement::Op::kExists;
      key = part;
    }
    if (!LabelText(key, false)) return bad("has no valid key");
    if (!LabelText(value, true)) return bad("has an invalid value");
    r.key = std::string(key);
    r.value = std::string(value);
    out.requirements_.push_back(std::move(r));
  }
  return out;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const LabelRequirement& r : requirements_) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    switch (r.op) {
      case LabelRequirement::Op::kEquals:
        if (!has || it->second != r.value) return false;
        break;
      case LabelRequirement::Op::kNotEquals:
        if (has && it->second == r.value) return false;
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

std::map<std::string, std::string> LabelsOf(const nlohmann::json& labels) {
  std::map<std::string, std::string> out;
  if (!labels.is_object()) return out;
  for (const auto& [k, v] : labels.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace meridian::domain
