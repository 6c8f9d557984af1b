#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "reft/log_limiter.h"

TEST_CASE("LogLimiter logs a burst at once, then a line a second naming what it held back",
          "[base]") {
  reft::LogLimiter limiter(3);
  uint64_t unlogged = 99;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(limiter.Admit(&unlogged));
    CHECK(unlogged == 0);
  }
  // The flood: held back and counted (well within a second of the burst).
  for (int i = 0; i < 5; ++i) CHECK_FALSE(limiter.Admit(&unlogged));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // one line refilled
  REQUIRE(limiter.Admit(&unlogged));
  CHECK(unlogged == 5);
  CHECK_FALSE(limiter.Admit(&unlogged));
}
