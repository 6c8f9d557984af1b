#include "reft/token_bucket.h"

#include <algorithm>
#include <thread>

namespace reft {

namespace {
// Default burst: 50 ms worth of traffic, at least 64 KiB, so pacing is smooth but cheap.
double DefaultBurst(uint64_t rate) { return std::max(65536.0, rate * 0.05); }
}  // namespace

TokenBucket::TokenBucket(uint64_t rate, uint64_t burst)
    : rate_(rate),
      burst_(burst ? static_cast<double>(burst) : DefaultBurst(rate)),
      tokens_(burst_),
      last_(Clock::now()) {}

void TokenBucket::RefillLocked(Clock::time_point now) {
  double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * static_cast<double>(rate_));
  last_ = now;
}

void TokenBucket::Acquire(uint64_t bytes) {
  while (bytes > 0) {
    MutexLock lock(mu_);
    if (rate_ == 0) return;
    const double want = std::min(static_cast<double>(bytes), burst_);
    RefillLocked(Clock::now());
    if (tokens_ >= want) {
      tokens_ -= want;
      bytes -= static_cast<uint64_t>(want);
      continue;
    }
    auto wait = std::chrono::duration<double>((want - tokens_) / static_cast<double>(rate_));
    lock.Unlock();
    std::this_thread::sleep_for(wait);
  }
}

bool TokenBucket::TryAcquire(uint64_t bytes) {
  MutexLock lock(mu_);
  if (rate_ == 0) return true;
  RefillLocked(Clock::now());
  if (tokens_ < static_cast<double>(bytes)) return false;
  tokens_ -= static_cast<double>(bytes);
  return true;
}

void TokenBucket::SetRate(uint64_t rate) {
  MutexLock lock(mu_);
  RefillLocked(Clock::now());
  rate_ = rate;
  burst_ = DefaultBurst(rate);
  tokens_ = std::min(tokens_, burst_);
}

uint64_t TokenBucket::rate() const {
  MutexLock lock(mu_);
  return rate_;
}

}  // namespace reft
