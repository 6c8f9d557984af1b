#pragma once
/// \file chunk_checksums.h
/// \brief Per-chunk XXH3-64 of a segment's payload, spread over worker threads.

#include <cstdint>
#include <vector>

#include "segment_format.h"

namespace reft::store::internal {

/// \brief One chunk to checksum.
struct ChunkRef {
  const uint8_t* data;
  uint64_t size;
};

/// \brief Appends the chunks of region `r` of `g` (table entries r.first_chunk onwards).
void AppendRegionChunks(const uint8_t* base, const Geometry& g, const reft_segment_region& r,
                        std::vector<ChunkRef>* out);
/// \brief The chunks of every region of `g` in a segment mapped at `base`, in table order.
std::vector<ChunkRef> ListChunks(const uint8_t* base, const Geometry& g);

/// \brief out[i] = Checksum64(chunks[i]). Uses up to `threads` threads (the caller's thread
/// included) when there is enough work; threads are joined before returning.
void ChecksumChunks(const std::vector<ChunkRef>& chunks, uint64_t* out, int threads);

}  // namespace reft::store::internal
