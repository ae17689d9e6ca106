#include "base/duration.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "base/strings.h"

namespace meridian::base {

namespace {

// A non-negative decimal number that is the whole of `text` ("90", "1.5"); false otherwise.
bool ParseNumber(std::string_view text, double* out) {
  if (text.empty() || text.size() > 32) return false;
  bool digit = false, dot = false;
  for (char ch : text) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      digit = true;
    } else if (ch == '.' && !dot) {
      dot = true;
    } else {
      return false;
    }
  }
  if (!digit) return false;
  *out = std::strtod(std::string(text).c_str(), nullptr);
  return std::isfinite(*out);
}

// "1h30m", "90s", "2d": numbers each followed by a unit, units largest first and once each.
bool ParseUnits(std::string_view text, double* out) {
  static constexpr struct {
    char unit;
    double scale;
  } kUnits[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
  size_t next_unit = 0;  // units must come in kUnits' order
  double total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
      ++end;
    }
    if (end == text.size()) return false;  // a number without its unit
    double n = 0;
    if (!ParseNumber(text.substr(pos, end - pos), &n)) return false;
    const char unit = static_cast<char>(std::tolower(static_cast<unsigned char>(text[end])));
    size_t u = next_unit;
    while (u < std::size(kUnits) && kUnits[u].unit != unit) ++u;
    if (u == std::size(kUnits)) return false;  // unknown, repeated or out of order
    total += n * kUnits[u].scale;
    next_unit = u + 1;
    pos = end + 1;
  }
  *out = total;
  return true;
}

// "MM:SS", "HH:MM:SS", "D-HH:MM:SS".
bool ParseClock(std::string_view text, double* out) {
  double days = 0;
  const size_t dash = text.find('-');
  if (dash != std::string_view::npos) {
    if (!ParseNumber(text.substr(0, dash), &days) || days != std::floor(days)) return false;
    text = text.substr(dash + 1);
  }
  std::vector<std::string_view> parts = Split(text, ':');
  // With days, Slurm's form is always D-HH:MM:SS.
  if (parts.size() < 2 || parts.size() > 3 || (dash != std::string_view::npos && parts.size() != 3))
    return false;
  double total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    double n = 0;
    if (!ParseNumber(parts[i], &n)) return false;
    // The first field may be as large as it likes ("90:00"); the others are below 60, and
    // only the seconds may have a fraction.
    if (i > 0 && n >= 60) return false;
    if (i + 1 < parts.size() && n != std::floor(n)) return false;
    total = total * 60 + n;
  }
  *out = days * 86400 + total;
  return true;
}

}  // namespace

Result<double> ParseDuration(std::string_view raw) {
  const std::string_view text = Trim(raw);
  double seconds = 0;
  const bool ok =
      !text.empty() && (ParseNumber(text, &seconds) ||
                        (text.find(':') != std::string_view::npos ? ParseClock(text, &seconds)
                                                                  : ParseUnits(text, &seconds)));
  if (!ok || !std::isfinite(seconds)) {
    return Status::Invalid("\"" + std::string(raw) + "\" is not a duration (use " + kDurationForms +
                           ")");
  }
  return seconds;
}

std::string FormatElapsed(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) seconds = 0;
  const auto total = static_cast<long long>(seconds);
  const long long days = total / 86400;
  char buf[48];
  if (days > 0) {
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", days, total % 86400 / 3600,
                  total % 3600 / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", total / 3600, total % 3600 / 60,
                  total % 60);
  }
  return buf;
}

std::string FormatUtc(double at) {
  const std::time_t t = static_cast<std::time_t>(at);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace meridian::base
