#include "time_text.h"

#include <algorithm>
#include <chrono>
#include <ctime>

namespace reft::ctl {

std::string FormatDuration(int64_t ms) {
  const int64_t s = std::max<int64_t>(0, ms) / 1000;
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  if (s < 86400) return std::to_string(s / 3600) + "h" + std::to_string(s % 3600 / 60) + "m";
  return std::to_string(s / 86400) + "d" + std::to_string(s % 86400 / 3600) + "h";
}

std::string FormatUnixMs(int64_t unix_ms, int64_t now_ms) {
  // Floor division: a time just before the epoch is in the second before it.
  const std::time_t secs =
      static_cast<std::time_t>(unix_ms >= 0 ? unix_ms / 1000 : -((-unix_ms + 999) / 1000));
  std::tm local{};
  char buf[64] = "?";
  if (localtime_r(&secs, &local) != nullptr) {
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &local);
  }
  const int64_t delta = unix_ms - now_ms;
  std::string rel;
  if (delta >= 1000) {
    rel = "in " + FormatDuration(delta);
  } else if (delta <= -1000) {
    rel = FormatDuration(-delta) + " ago";
  } else {
    rel = "now";
  }
  return std::string(buf) + " (" + rel + ")";
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace reft::ctl
