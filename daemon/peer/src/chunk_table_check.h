#pragma once
/// \file chunk_table_check.h
/// \brief Checks the chunks of a FetchRegion stream against the caller's copy of the holder's
/// sealed chunk table (its manifest) without hashing the bytes a second time.
///
/// A wire chunk that is a whole sealed chunk (the common case: the wire chunk size equals the
/// store's chunk size) was already hashed once against its wire checksum, so comparing that
/// checksum with the table entry is enough. A sealed chunk the server split over several wire
/// chunks (a store chunk larger than the wire chunk) is hashed incrementally as its pieces
/// arrive and compared when its last piece is in. Sealed chunks only partly inside the fetched
/// range are left to the server, which re-verified them before serving part of them.

#include <cstdint>
#include <memory>
#include <vector>

#include "reft/checksum.h"

namespace reft::peer {

class ChunkTableCheck {
 public:
  /// `table[i]` is the XXH3-64 of bytes [i*chunk_size, min(region_size, (i+1)*chunk_size)).
  ChunkTableCheck(const std::vector<uint64_t>* table, uint64_t chunk_size, uint64_t region_size);

  enum class Result { kOk, kMismatch, kStraddles };
  /// One verified wire chunk: region bytes [offset, offset+size) now at `data`, whose XXH3-64
  /// is `wire_checksum`. kMismatch: sealed chunk `*chunk` differs from the table; kStraddles:
  /// the wire chunk crosses a sealed chunk boundary (never sent by PeerService).
  Result Add(uint64_t offset, const uint8_t* data, uint64_t size, uint64_t wire_checksum,
             uint64_t* chunk);

 private:
  const std::vector<uint64_t>* table_;
  uint64_t chunk_size_;
  uint64_t region_size_;
  uint64_t partial_chunk_ = UINT64_MAX;  // sealed chunk being hashed piece by piece
  uint64_t partial_next_ = 0;            // region offset its next piece must start at
  std::unique_ptr<ChecksumStream> partial_;
};

}  // namespace reft::peer
