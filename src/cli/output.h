#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace meridian::cli {

using Json = nlohmann::json;

// A table as kubectl prints one: upper-case headers, columns padded to their widest cell.
struct Table {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  // Prints the headers and rows; returns the columns' widths, for rows printed later under them
  // (`get -w`).
  std::vector<size_t> Print(std::ostream& out) const;
  // The rows alone, padded to `widths` where they fit (a longer cell pushes the rest right).
  void PrintRows(std::ostream& out, const std::vector<size_t>& widths) const;
};

// JSON as YAML (block style), for `-o yaml`.
std::string ToYaml(const Json& value);

// "3m", "2h", "5d": how long ago `then` was, from `now` (seconds since the epoch).
std::string Age(double then, double now);
// "YYYY-MM-DDTHH:MM:SS" in UTC, as sacct prints times; "Unknown" when there is none.
std::string UtcTimestamp(double t);
// A number without a trailing ".0" ("8", "0.5").
std::string Num(const Json& value);

}  // namespace meridian::cli
