#include <catch2/catch.hpp>

#include <chrono>

#include "reft/token_bucket.h"

TEST_CASE("TokenBucket paces to its rate and unlimited does not wait", "[base]") {
  using Clock = std::chrono::steady_clock;
  reft::TokenBucket limited(8 << 20);  // 8 MiB/s, burst 0.4 MiB
  auto t0 = Clock::now();
  for (int i = 0; i < 8; ++i) limited.Acquire(512 << 10);  // 4 MiB -> ~0.45 s after the burst
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(s > 0.40);
  CHECK(s < 1.5);

  reft::TokenBucket unlimited(0);
  t0 = Clock::now();
  unlimited.Acquire(1ull << 40);
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 0.05);
  CHECK(unlimited.TryAcquire(1ull << 40));

  reft::TokenBucket small(1000, 1000);
  CHECK(small.TryAcquire(1000));
  CHECK_FALSE(small.TryAcquire(500));
}
