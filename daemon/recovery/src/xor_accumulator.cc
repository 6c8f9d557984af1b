/// \file xor_accumulator.cc
/// \brief XOR outputs accumulated from a restore's passing pieces.

#include "xor_accumulator.h"

#include <algorithm>

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
      const void* srcs[2] = {out + done, in + done};
      MutexLock stripe(stripes_[(at / kStripeBytes) % kStripes]);
      REFT_RETURN_NOT_OK(kernels::XorReduce(out + done, srcs, 2, n));
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
