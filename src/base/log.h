#pragma once
// The server's, the agents' and the shims' log: levelled, timestamped lines on stderr, as text
// or as one JSON object a line (docs/adr/0022-logs.md). A thin facade over spdlog, so that the
// rest of the code names only this header and fmt-style format strings.
//
// Thread-safety: every function may be called from any thread. Init replaces the logger; lines
// written at the same time go to the old or the new one, whole.
#include <fmt/format.h>

#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace meridian::base::log {

enum class Level { kDebug, kInfo, kWarn, kError };
enum class Format { kText, kJson };

struct LogOptions {
  std::string program = "meridian";  // the line's program: "meridian", "meridian agent", ...
  Level level = Level::kInfo;        // lines below it are dropped
  Format format = Format::kText;
  std::ostream* out = nullptr;  // where lines go (tests); nullptr: stderr
};

// Key/value pairs for a structured line: JSON members, or `key=value` after a text message.
// Keys ts, level, program and msg are the line's own and are not repeated.
using Fields = std::vector<std::pair<std::string, std::string>>;

// "debug" | "info" | "warn" | "error"; "text" | "json". Anything else is refused with a message.
Result<Level> ParseLevel(std::string_view name);
Result<Format> ParseFormat(std::string_view name);
const char* LevelName(Level level);

// Replaces the process's logger. Without a call, lines go to stderr as text at info, as
// program "meridian".
void Init(const LogOptions& options);
bool Enabled(Level level);
// Writes one line (the message is used as it is, not as a format string).
void Write(Level level, const Fields& fields, std::string_view message);

template <typename... Args>
void Log(Level level, const Fields& fields, fmt::format_string<Args...> format, Args&&... args) {
  if (Enabled(level)) Write(level, fields, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void Debug(fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kDebug, {}, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Debug(const Fields& fields, fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kDebug, fields, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Info(fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kInfo, {}, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Info(const Fields& fields, fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kInfo, fields, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kWarn, {}, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(const Fields& fields, fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kWarn, fields, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Error(fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kError, {}, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Error(const Fields& fields, fmt::format_string<Args...> format, Args&&... args) {
  Log(Level::kError, fields, format, std::forward<Args>(args)...);
}

}  // namespace meridian::base::log
