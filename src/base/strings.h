#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meridian::base {

// Splits on a single character; empty fields are kept.
std::vector<std::string_view> Split(std::string_view text, char sep);

std::string_view Trim(std::string_view text);

// Parses a whole string as a signed 64-bit integer; false when it is not one.
bool ParseInt64(std::string_view text, long long* out);

// A number as people write it: no trailing zeros, at most 6 significant digits ("0.5", "50").
std::string Decimal(double v);

}  // namespace meridian::base
