#pragma once
/// \file time_text.h
/// \brief Times in reftctl's human output: durations ("45s", "12m5s") and unix milliseconds as
/// local time with the distance from now ("2026-12-02 10:31:32 +0000 (in 25s)"). JSON output
/// keeps the exact numbers.

#include <cstdint>
#include <string>

namespace reft::ctl {

/// \brief "45s", "12m5s", "3h20m", "2d4h" (negative counts as 0).
std::string FormatDuration(int64_t ms);

/// \brief `unix_ms` in the local time zone, to the second, with its offset from UTC, followed by
/// how far it is from `now_ms`: "(in 25s)", "(12s ago)", "(now)" within a second.
std::string FormatUnixMs(int64_t unix_ms, int64_t now_ms);

/// \brief Unix time now, in milliseconds.
int64_t NowUnixMs();

}  // namespace reft::ctl
