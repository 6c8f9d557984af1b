#pragma once
/// \file log_limiter.h
/// \brief Keeps a flood of one kind of event (refused calls, refused connections) from
/// flooding the log: a bucket of `burst` lines refilled at one line a second. A few events are
/// all logged; a flood costs a line a second, and each logged line can say how many events
/// went unlogged before it. Thread-safe.

#include <chrono>
#include <cstdint>

#include "reft/mutex.h"

namespace reft {

class LogLimiter {
 public:
  explicit LogLimiter(double burst = 10) : burst_(burst), budget_(burst) {}

  /// \brief Whether this event may be logged now. When it may, `*unlogged` is the number of
  /// events held back since the last one logged (to name in the line).
  bool Admit(uint64_t* unlogged);

 private:
  const double burst_;
  Mutex mu_;
  std::chrono::steady_clock::time_point last_ REFT_GUARDED_BY(mu_);
  double budget_ REFT_GUARDED_BY(mu_);  ///< lines that may still be logged now
  uint64_t unlogged_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft
