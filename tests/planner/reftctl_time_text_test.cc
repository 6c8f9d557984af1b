// How reftctl's tables print times (tools/reftctl/time_text.h), e.g. `plan show`'s decision
// and wait-for-a-spare times: local time to the second, and the distance from now.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>

#include "time_text.h"

namespace {

// Runs the formatting in a fixed time zone, restoring the caller's afterwards.
class TimeZone {
 public:
  explicit TimeZone(const char* tz) {
    const char* old = std::getenv("TZ");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("TZ", tz, 1);
    tzset();
  }
  ~TimeZone() {
    if (had_) {
      setenv("TZ", old_.c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }

 private:
  bool had_ = false;
  std::string old_;
};

constexpr int64_t kAt = 1764671492000;  // 2025-12-02 10:31:32 UTC

}  // namespace

TEST_CASE("durations: seconds, minutes, hours, days, never negative") {
  using reft::ctl::FormatDuration;
  CHECK(FormatDuration(0) == "0s");
  CHECK(FormatDuration(45'999) == "45s");
  CHECK(FormatDuration(725'000) == "12m5s");
  CHECK(FormatDuration(12'000'000) == "3h20m");
  CHECK(FormatDuration(187'200'000) == "2d4h");
  CHECK(FormatDuration(-5'000) == "0s");
}

TEST_CASE("a unix ms time prints as local time with seconds, its offset, and how far from now") {
  using reft::ctl::FormatUnixMs;
  TimeZone utc("UTC0");
  CHECK(FormatUnixMs(kAt, kAt - 25'000) == "2025-12-02 10:31:32 +0000 (in 25s)");
  CHECK(FormatUnixMs(kAt, kAt + 12'400) == "2025-12-02 10:31:32 +0000 (12s ago)");
  CHECK(FormatUnixMs(kAt + 999, kAt + 500) == "2025-12-02 10:31:32 +0000 (now)");
  CHECK(FormatUnixMs(kAt, kAt + 3'725'000) == "2025-12-02 10:31:32 +0000 (1h2m ago)");
}

TEST_CASE("the local time zone is the one printed") {
  using reft::ctl::FormatUnixMs;
  TimeZone cet("CET-1");  // POSIX: one hour east of UTC, no daylight saving
  CHECK(FormatUnixMs(kAt, kAt) == "2025-12-02 11:31:32 +0100 (now)");
}
