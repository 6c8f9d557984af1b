#pragma once
/// \file token_bucket.h
/// \brief A byte-rate limiter shared by everything that moves bulk data (peer streams, the
/// persistent tier, benchmarks emulating a network/storage bandwidth ratio).

#include <chrono>
#include <cstdint>
#include "reft/mutex.h"

namespace reft {

/// \brief Token bucket: `rate` bytes/s refill, at most `burst` bytes banked. Thread-safe; many
/// streams may share one bucket (a per-peer or per-tier limit). rate 0 = unlimited.
class TokenBucket {
 public:
  explicit TokenBucket(uint64_t rate_bytes_per_s, uint64_t burst_bytes = 0);

  /// \brief Blocks until `bytes` may be sent, then takes them. Requests larger than the burst
  /// are served in burst-sized installments, so a big chunk cannot starve smaller ones forever.
  void Acquire(uint64_t bytes);
  /// \brief Takes `bytes` if available now; false otherwise.
  bool TryAcquire(uint64_t bytes);
  /// \brief Changes the rate (0 = unlimited) without losing banked tokens.
  void SetRate(uint64_t rate_bytes_per_s);
  uint64_t rate() const;

 private:
  using Clock = std::chrono::steady_clock;
  void RefillLocked(Clock::time_point now) REFT_REQUIRES(mu_);

  mutable Mutex mu_;
  uint64_t rate_ REFT_GUARDED_BY(mu_);
  double burst_ REFT_GUARDED_BY(mu_);
  double tokens_ REFT_GUARDED_BY(mu_);
  Clock::time_point last_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft
