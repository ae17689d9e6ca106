#include "base/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

namespace meridian::base::log {
namespace {

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

const char* SpdName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    default:
      return "error";
  }
}

std::string Dump(const nlohmann::json& j) {
  // Bytes that are not UTF-8 (a path, a process's output) are replaced, not thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ISO 8601 in UTC with milliseconds: 2026-12-01T19:40:02.123Z.
void AppendTime(spdlog::log_clock::time_point t, spdlog::memory_buf_t& dest) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  fmt::format_to(std::back_inserter(dest), "{}.{:03d}Z", std::string_view(buf, n),
                 static_cast<int>(ms % 1000));
}

// Writes the line around the payload that Write made: for text, "TS LEVEL PROGRAM: payload";
// for JSON, the payload is an object ({"msg", fields...}) that gets ts, level and program first.
class LineFormatter : public spdlog::formatter {
 public:
  LineFormatter(std::string program, Format format)
      : program_(std::move(program)), format_(format), program_json_(Dump(program_)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    auto out = std::back_inserter(dest);
    if (format_ == Format::kJson) {
      dest.append(std::string_view("{\"ts\":\""));
      AppendTime(msg.time, dest);
      fmt::format_to(out, "\",\"level\":\"{}\",\"program\":{},", SpdName(msg.level), program_json_);
      dest.append(payload.substr(1));  // the payload's own opening brace is replaced
    } else {
      AppendTime(msg.time, dest);
      fmt::format_to(out, " {:<5} {}: {}", SpdName(msg.level), program_, payload);
    }
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(program_, format_);
  }

 private:
  std::string program_;
  Format format_;
  std::string program_json_;
};

struct State {
  std::shared_ptr<spdlog::logger> logger;
  Format format = Format::kText;
};

std::mutex mu;
std::shared_ptr<const State> state;  // guarded by mu
std::atomic<int> min_level{static_cast<int>(Level::kInfo)};

std::shared_ptr<const State> Make(const LogOptions& o) {
  spdlog::sink_ptr sink;
  if (o.out) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*o.out, /*force_flush=*/true);
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  auto logger = std::make_shared<spdlog::logger>(o.program, std::move(sink));
  logger->set_formatter(std::make_unique<LineFormatter>(o.program, o.format));
  logger->set_level(ToSpd(o.level));
  logger->flush_on(spdlog::level::trace);  // another process (a test, tail -f) reads it now
  auto s = std::make_shared<State>();
  s->logger = std::move(logger);
  s->format = o.format;
  return s;
}

std::shared_ptr<const State> Current() {
  std::lock_guard<std::mutex> lock(mu);
  if (!state) state = Make(LogOptions{});
  return state;
}

bool OwnKey(const std::string& key) {
  return key == "ts" || key == "level" || key == "program" || key == "msg";
}

// A text field's value is quoted (JSON-escaped) when it would not read as one word.
std::string TextValue(const std::string& v) {
  const bool plain = !v.empty() && v.find_first_of(" \t\r\n\"=") == std::string::npos;
  return plain ? v : Dump(v);
}

}  // namespace

Result<Level> ParseLevel(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  return Status::Invalid("log level " + std::string(name) +
                         ": expected debug, info, warn or error");
}

Result<Format> ParseFormat(std::string_view name) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return Status::Invalid("log format " + std::string(name) + ": expected text or json");
}

const char* LevelName(Level level) { return SpdName(ToSpd(level)); }

void Init(const LogOptions& options) {
  auto s = Make(options);
  std::lock_guard<std::mutex> lock(mu);
  state = std::move(s);
  min_level = static_cast<int>(options.level);
}

bool Enabled(Level level) { return static_cast<int>(level) >= min_level.load(); }

void Write(Level level, const Fields& fields, std::string_view message) {
  auto s = Current();
  std::string payload;
  if (s->format == Format::kJson) {
    nlohmann::json line = nlohmann::json::object();
    line["msg"] = std::string(message);
    for (const auto& [k, v] : fields) {
      if (!OwnKey(k)) line[k] = v;
    }
    payload = Dump(line);
  } else {
    payload.assign(message);
    for (const auto& [k, v] : fields) {
      if (!OwnKey(k)) payload += " " + k + "=" + TextValue(v);
    }
  }
  s->logger->log(ToSpd(level), std::string_view(payload));
}

}  // namespace meridian::base::log
