/// \file stream_rings.cc
#include "stream_rings.h"

#include <algorithm>

#include "reft/local/local_server.h"

namespace reft::local {

uint64_t StreamRingSlotBytes(uint64_t piece_bytes) {
  constexpr uint64_t kPage = 4096;  // slots page-aligned: whole pages for the copies
  return (std::max<uint64_t>(piece_bytes, 1) + kPage - 1) / kPage * kPage;
}

uint64_t StreamRingBytes(uint64_t piece_bytes, int in_flight) {
  constexpr uint64_t kMaxBytes = 256ull << 20;
  const uint64_t slot = StreamRingSlotBytes(piece_bytes);
  const uint64_t wanted = static_cast<uint64_t>(std::max(in_flight, 1)) + 2;
  return slot * std::max<uint64_t>(2, std::min(wanted, kMaxBytes / slot));
}

Result<MappedMemfd> StreamRings::Create(uint64_t bytes) {
  REFT_ASSIGN_OR_RETURN(MappedMemfd ring, MappedMemfd::Create("reft-restore-ring", bytes));
  REFT_RETURN_NOT_OK(ring.Populate().WithContext("a restore stream's ring"));
  // The trainer maps it read-only: it can never change a piece reftd verified (nor the bytes a
  // slot capture is still reading).
  REFT_RETURN_NOT_OK(ring.SealFutureWrites());
  return ring;
}

Status StreamRings::Warm(uint64_t bytes) {
  if (bytes == 0) return Status::OK();
  REFT_ASSIGN_OR_RETURN(MappedMemfd ring, Create(bytes));
  Keep(std::nullopt, std::move(ring));
  return Status::OK();
}

Result<MappedMemfd> StreamRings::Take(uid_t owner, uint64_t bytes) {
  {
    MutexLock lock(mu_);
    // The owner's own first (its trainers have seen it already), then one nobody has seen.
    for (int pass = 0; pass < 2; ++pass) {
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        const bool fits = it->ring.size() >= bytes;
        const bool may = pass == 0 ? it->seen_by == owner : !it->seen_by.has_value();
        if (!fits || !may) continue;
        MappedMemfd ring = std::move(it->ring);
        idle_.erase(it);
        return ring;
      }
    }
  }
  return Create(bytes);
}

void StreamRings::Give(uid_t owner, MappedMemfd ring) { Keep(owner, std::move(ring)); }

void StreamRings::Keep(std::optional<uid_t> seen_by, MappedMemfd ring) {
  MutexLock lock(mu_);
  idle_.push_back({seen_by, std::move(ring)});
  while (idle_.size() > max_idle_) idle_.pop_front();
}

size_t StreamRings::idle() const {
  MutexLock lock(mu_);
  return idle_.size();
}

}  // namespace reft::local
