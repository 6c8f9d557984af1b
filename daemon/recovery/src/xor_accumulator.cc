/// \file xor_accumulator.cc
/// \brief XOR outputs accumulated from a restore's passing pieces.

#include "xor_accumulator.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "reft/kernels/xor.h"

namespace reft::recovery {

void XorAccumulator::AddTerm(uint64_t from, uint64_t size, uint8_t* to, size_t output) {
  if (size == 0) return;
  terms_.push_back({from, size, to, output});
  expected_ += size;
  MutexLock lock(mu_);
  if (missing_.size() <= output) missing_.resize(output + 1, 0);
  missing_[output] += size;
}

Status XorAccumulator::AddToStretch(uint8_t* out, const uint8_t* in, uint64_t n,
                                    Written* written) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(out);
  const uintptr_t b = a + n;
  const auto copy = [&](uintptr_t lo, uintptr_t hi) {
    std::memcpy(out + (lo - a), in + (lo - a), hi - lo);
  };
  const auto add = [&](uintptr_t lo, uintptr_t hi) {
    const void* srcs[2] = {out + (lo - a), in + (lo - a)};
    return kernels::XorReduce(out + (lo - a), srcs, 2, hi - lo);
  };
  // The first written range that can overlap [a, b): the last one beginning at or before a,
  // when it reaches past a, else the first one beginning after a.
  auto it = written->upper_bound(a);
  if (it != written->begin() && std::prev(it)->second > a) --it;
  uintptr_t at = a;
  for (; at < b && it != written->end() && it->first < b; ++it) {
    if (it->first > at) copy(at, it->first);  // a gap no term reached yet
    const uintptr_t lo = std::max(at, it->first);
    const uintptr_t hi = std::min(b, it->second);
    REFT_RETURN_NOT_OK(add(lo, hi));
    at = hi;
  }
  if (at < b) copy(at, b);
  // Record [a, b) as written, merged with the ranges it overlaps or touches.
  auto first = written->upper_bound(a);
  if (first != written->begin() && std::prev(first)->second >= a) --first;
  uintptr_t lo = a;
  uintptr_t hi = b;
  auto last = first;
  for (; last != written->end() && last->first <= b; ++last) {
    lo = std::min(lo, last->first);
    hi = std::max(hi, last->second);
  }
  written->erase(first, last);
  written->emplace(lo, hi);
  return Status::OK();
}

Status XorAccumulator::Absorb(uint64_t offset, const uint8_t* data, uint64_t size,
                              std::vector<size_t>* completed) {
  for (const Term& t : terms_) {
    const uint64_t lo = std::max(offset, t.from);
    const uint64_t hi = std::min(offset + size, t.from + t.size);
    if (lo >= hi) continue;
    uint8_t* out = t.to + (lo - t.from);
    const uint8_t* in = data + (lo - offset);
    for (uint64_t done = 0; done < hi - lo;) {
      const auto at = reinterpret_cast<uintptr_t>(out + done);
      const uint64_t n = std::min<uint64_t>(hi - lo - done, kStripeBytes - at % kStripeBytes);
      Stripe& stripe = stripes_[(at / kStripeBytes) % kStripes];
      MutexLock lock(stripe.mu);
      REFT_RETURN_NOT_OK(
          AddToStretch(out + done, in + done, n, &stripe.written[at / kStripeBytes]));
      done += n;
    }
    MutexLock lock(mu_);
    absorbed_ += hi - lo;
    missing_[t.output] -= hi - lo;
    if (missing_[t.output] == 0 && completed != nullptr) completed->push_back(t.output);
  }
  return Status::OK();
}

uint64_t XorAccumulator::absorbed() const {
  MutexLock lock(mu_);
  return absorbed_;
}

}  // namespace reft::recovery
