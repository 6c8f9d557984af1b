/// \file segments.cc
/// \brief Splits a member's coding work into contiguous segments (see segments.h).

#include "reft/protect/segments.h"

#include <algorithm>

#include "reft/protect/rebuild_analysis.h"

namespace reft::protect {
namespace {

/// Source at byte `pos` of padded shard j and how many bytes stay contiguous.
std::pair<SegmentSource, uint64_t> Locate(const SgGeometry& g, int j, uint64_t pos) {
  const uint64_t size = g.ShardSize(j);
  if (pos >= size) return {{-1, 0}, g.PaddedShard() - pos};
  const uint64_t c = g.shard_begin[j] + pos;
  auto it = std::upper_bound(g.buffers.begin(), g.buffers.end(), c,
                             [](uint64_t v, const BufferExtent& b) { return v < b.offset; });
  --it;  // buffers tile [0, total) from offset 0, so a predecessor exists
  while (it->offset + it->size <= c) ++it;  // skip zero-size buffers sharing the offset
  const uint64_t run = std::min(it->offset + it->size, g.shard_begin[j] + size) - c;
  return {{static_cast<int>(it - g.buffers.begin()), c - it->offset}, run};
}

/// Segments of [0, len) for sources (shard, base offset) in the padded shards.
std::vector<CodingSegment> Split(const SgGeometry& g,
                                 const std::vector<std::pair<int, uint64_t>>& srcs, uint64_t len) {
  std::vector<CodingSegment> out;
  for (uint64_t off = 0; off < len;) {
    CodingSegment seg;
    seg.out_offset = off;
    uint64_t n = len - off;
    for (const auto& [j, base] : srcs) {
      auto [src, run] = Locate(g, j, base + off);
      seg.sources.push_back(src);
      n = std::min(n, run);
    }
    seg.size = n;
    out.push_back(std::move(seg));
    off += n;
  }
  return out;
}

}  // namespace

std::vector<CodingSegment> AecSegments(const SgGeometry& g, int dp) {
  std::vector<std::pair<int, uint64_t>> srcs;
  for (int j = 0; j < g.m; ++j) {
    if (j != dp) srcs.emplace_back(j, static_cast<uint64_t>(AecIndex(g.m, j, dp)) * g.aec_sub);
  }
  return Split(g, srcs, g.aec_sub);
}

std::vector<CodingSegment> RsSegments(const SgGeometry& g, int dp, int q) {
  const int r = g.rs_r;
  const int t = ((dp - q) % g.m + g.m) % g.m;
  std::vector<std::pair<int, uint64_t>> srcs;
  for (int p = 0; p < g.m - r; ++p) {
    const int j = RsDataShard(g.m, r, t, p);
    srcs.emplace_back(j, static_cast<uint64_t>(AecIndex(g.m, j, t)) * g.rs_sub);
  }
  return Split(g, srcs, g.rs_sub);
}

std::vector<CodingSegment> ShardSegments(const SgGeometry& g, int j) {
  return Split(g, {{j, 0}}, g.ShardSize(j));
}

}  // namespace reft::protect
