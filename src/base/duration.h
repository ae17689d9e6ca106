#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace meridian::base {

// The forms of a duration that ParseDuration takes, for error messages and help texts.
inline constexpr const char* kDurationForms =
    "90s, 15m, 2h, 30d, 1h30m, HH:MM:SS, MM:SS, D-HH:MM:SS or plain seconds";

// A duration as people type one, in seconds. One piece of code for every duration the CLI
// and the documents take, so that `--limit 2h`, `gracePeriod: 45s` and `--expires-in 30d`
// mean the same everywhere:
//   - plain seconds: "90", "1.5";
//   - numbers with units d, h, m, s, largest first, each at most once: "90s", "15m", "2h",
//     "30d", "1h30m", "1.5h", "1d12h";
//   - clock forms as Slurm writes them: "MM:SS", "HH:MM:SS", "D-HH:MM:SS" (minutes and
//     seconds below 60 after the first field).
// Negative, empty and non-finite values are refused. The message names the text and the forms
// accepted; the caller prefixes where it came from (a flag, a field).
Result<double> ParseDuration(std::string_view text);

// Seconds as sacct prints an elapsed time: "MM:SS" below an hour is not used; always
// "HH:MM:SS", and "D-HH:MM:SS" from a day on. Fractions of a second are dropped.
std::string FormatElapsed(double seconds);

// A time (seconds since the epoch) in UTC, to the second: "2026-12-06T14:40:00Z".
std::string FormatUtc(double at);

}  // namespace meridian::base
