#pragma once
/// \file stream_rings.h
/// \brief The rings streamed restores hand pieces over in (local_proto/stream.h), kept between
/// restores.
///
/// A ring is fresh shared memory: the kernel zeroes each page on first touch, which for a ring
/// of (in-flight pieces + 2) x 8 MiB costs a restore about what moving as many bytes does. So
/// the server makes one when it starts and reuses rings. A ring some trainer has mapped is
/// handed on only to a trainer of the same uid: the first may still map it and would see what
/// a later restore puts in. A ring goes back only once every piece in it was acknowledged.

#include <sys/types.h>

#include <deque>
#include <optional>

#include "reft/mapped_memfd.h"
#include "reft/mutex.h"

namespace reft::local {

/// \brief The slot a piece of `piece_bytes` takes in a ring: page-aligned.
uint64_t StreamRingSlotBytes(uint64_t piece_bytes);

class StreamRings {
 public:
  /// At most `max_idle` rings are kept between restores (the oldest is freed first).
  explicit StreamRings(size_t max_idle = 2) : max_idle_(max_idle) {}

  /// \brief A new ring of `bytes`, populated and sealed against writes by anyone else
  /// (F_SEAL_FUTURE_WRITE, on top of MappedMemfd's size seals).
  static Result<MappedMemfd> Create(uint64_t bytes);

  /// \brief Makes a ring of `bytes` ahead of any restore (at start), seen by no trainer yet.
  Status Warm(uint64_t bytes) REFT_EXCLUDES(mu_);

  /// \brief A ring of at least `bytes` that `owner`'s trainer may map: a kept one no trainer or
  /// only `owner`'s has seen, else a new one.
  Result<MappedMemfd> Take(uid_t owner, uint64_t bytes) REFT_EXCLUDES(mu_);

  /// \brief Keeps `ring` for `owner`'s later restores.
  void Give(uid_t owner, MappedMemfd ring) REFT_EXCLUDES(mu_);

  /// Rings kept now (for tests).
  size_t idle() const REFT_EXCLUDES(mu_);

 private:
  struct Idle {
    std::optional<uid_t> seen_by;  // nullopt: no trainer has mapped it
    MappedMemfd ring;
  };
  // Keeps `ring` as seen by `seen_by`, freeing the oldest beyond max_idle_.
  void Keep(std::optional<uid_t> seen_by, MappedMemfd ring) REFT_EXCLUDES(mu_);

  const size_t max_idle_;
  mutable Mutex mu_;
  std::deque<Idle> idle_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::local
