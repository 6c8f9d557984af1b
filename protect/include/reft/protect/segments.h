#pragma once
/// \file segments.h
/// \brief Pointer-free description of a member's parity computation, so any backend (host
/// XorReduce / RsCodec here, a device XOR kernel on IPC-mapped buffers for AEC "in bubbles")
/// runs the same plan. Each segment is a range of the output region over which every source is
/// contiguous inside one replicated buffer, or is zero padding.

#include <cstdint>
#include <vector>

#include "reft/protect/sharding.h"

namespace reft::protect {

/// \brief One source of a segment: `size` bytes at `offset` of geometry.buffers[buffer];
/// buffer == -1 means zero padding.
struct SegmentSource {
  int buffer = -1;
  uint64_t offset = 0;
};

struct CodingSegment {
  uint64_t out_offset = 0;  ///< within the output region
  uint64_t size = 0;
  std::vector<SegmentSource> sources;  ///< in code order (RS data block order)
};

/// \brief AEC parity of member `dp`: rep/aec[out_offset, +size) = XOR of the non-padding sources
/// (all-padding segments are zero).
std::vector<CodingSegment> AecSegments(const SgGeometry& geometry, int dp);

/// \brief RS parity `q` of member `dp` (the stripe t with (t+q) mod m == dp):
/// rep/rs[q·rs_sub + out_offset, +size) = RsCodec(m−r, r).EncodeRow(q, sources).
std::vector<CodingSegment> RsSegments(const SgGeometry& geometry, int dp, int q);

/// \brief Own shard or an ARC copy of shard `j`: a plain copy, padding-free.
std::vector<CodingSegment> ShardSegments(const SgGeometry& geometry, int j);

}  // namespace reft::protect
