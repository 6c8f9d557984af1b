#pragma once
/// \file xor_accumulator.h
/// \brief Parity built from a restore's stream as it passes: output bytes that are the XOR of
/// ranges of the state, accumulated from the state's pieces in whatever order and from whichever
/// fetch worker they arrive.
///
/// Why: a streamed restore never holds the whole state, yet two things need XORs of it, a lost
/// shard decoded from AEC parity (docs/recovery.md "Streamed restores") and the AEC parity of a
/// replacement node's regenerated slot. XOR is associative and commutative, so both are sums the
/// passing pieces can be added into one at a time.
///
/// The first term to reach an output byte is copied there, the later ones XORed into it: the
/// outputs need not start as zero, and a fresh buffer is written before it is ever read (no
/// zero page read, then copied on write, and one pass over the sum less per output). Which
/// output bytes hold a term already is tracked per byte range, since pieces, and so the parts
/// of terms they carry, may cover any part of an output. Output bytes no term covers are left
/// as the memory held them.

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "reft/mutex.h"
#include "reft/status.h"

namespace reft::recovery {

class XorAccumulator {
 public:
  /// \brief Output bytes [to, to+size) accumulate state bytes [from, from+size). Terms may share
  /// output bytes (that is the point) and sources. `output` groups terms (an id the caller
  /// chooses, small: ids index a vector) so that Absorb can say when a group is complete. Call
  /// before the first Absorb.
  void AddTerm(uint64_t from, uint64_t size, uint8_t* to, size_t output = 0);

  /// \brief Adds the parts of state bytes [offset, offset+size) that terms cover into their
  /// outputs (copied where no term reached an output byte yet, XORed where one did), and appends
  /// to `completed` (optional) each output group whose terms have now all been absorbed: its
  /// bytes are final. Thread-safe; each state byte must be absorbed once.
  Status Absorb(uint64_t offset, const uint8_t* data, uint64_t size,
                std::vector<size_t>* completed = nullptr);

  /// \brief Bytes of terms absorbed so far, and in all: equal once every term's range passed.
  uint64_t absorbed() const;
  uint64_t expected() const { return expected_; }

 private:
  struct Term {
    uint64_t from = 0;
    uint64_t size = 0;
    uint8_t* to = nullptr;
    size_t output = 0;
  };
  // Output addresses [begin, end) that hold a term already, keyed by begin; disjoint, and
  // adjacent ranges merged, so a stretch written by whole pieces holds one or two entries.
  using Written = std::map<uintptr_t, uintptr_t>;
  // Terms from different pieces add into the same output bytes: each kStripeBytes-aligned
  // stretch of output memory is added to under one of kStripes locks, so fetch workers whose
  // pieces land in different stretches work at once (with the bulk transport the XOR is no
  // longer far cheaper than the fetch that feeds it). The lock also guards which bytes of the
  // stretch are written.
  static constexpr uint64_t kStripeBytes = 1 << 20;
  static constexpr size_t kStripes = 64;
  struct Stripe {
    Mutex mu;
    std::unordered_map<uintptr_t, Written> written REFT_GUARDED_BY(mu);  // by stretch index
  };
  // Adds `n` bytes of `in` to `out`, all inside one stretch, whose ranges are `written`.
  static Status AddToStretch(uint8_t* out, const uint8_t* in, uint64_t n, Written* written);

  std::vector<Term> terms_;  // fixed before the first Absorb
  uint64_t expected_ = 0;
  Stripe stripes_[kStripes];
  mutable Mutex mu_;  // the counts below
  uint64_t absorbed_ REFT_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> missing_ REFT_GUARDED_BY(mu_);  // per output group: bytes not absorbed
};

}  // namespace reft::recovery
