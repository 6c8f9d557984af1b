/// \file log_limiter.cc
#include "reft/log_limiter.h"

#include <algorithm>

namespace reft {

bool LogLimiter::Admit(uint64_t* unlogged) {
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  const double refill =
      last_ == std::chrono::steady_clock::time_point()
          ? burst_
          : std::chrono::duration<double>(now - last_).count();  // one line a second
  budget_ = std::min(burst_, budget_ + refill);
  last_ = now;
  if (budget_ < 1) {
    ++unlogged_;
    return false;
  }
  budget_ -= 1;
  *unlogged = unlogged_;
  unlogged_ = 0;
  return true;
}

}  // namespace reft
