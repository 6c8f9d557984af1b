/// \file encoder.cc
/// \brief Member-local redundancy encoding on the host, zero-copy: runs the segment plans of
/// segments.h with XorReduce / RsCodec::EncodeRow straight on the registered buffers.

#include <algorithm>
#include <cstring>
#include <vector>

#include "reft/kernels/rs.h"
#include "reft/kernels/xor.h"
#include "reft/protect/codec.h"
#include "reft/protect/segments.h"

namespace reft::protect {
namespace {

/// Size of the shared zero block standing in for padding sources of RS segments.
constexpr uint64_t kZeroBlock = 1 << 20;

const uint8_t* ZeroBlock() {
  static const std::vector<uint8_t> zeros(kZeroBlock, 0);
  return zeros.data();
}

/// Pointers of the geometry's buffers in order; nullptr for a buffer missing from a partial
/// source.
Result<std::vector<const uint8_t*>> ResolveBuffers(const SgGeometry& g,
                                                   const ReplicatedSource& src, bool partial) {
  std::vector<const uint8_t*> ptrs;
  for (const auto& b : g.buffers) {
    auto it = src.find(b.name);
    if (it == src.end() && partial) {
      ptrs.push_back(nullptr);
      continue;
    }
    if (it == src.end())
      return Status::InvalidArgument("encode: replicated buffer '" + b.name + "' not provided");
    if (it->second.size != b.size || (b.size > 0 && it->second.data == nullptr)) {
      return Status::InvalidArgument("encode: buffer '" + b.name + "' has " +
                                     std::to_string(it->second.size) + " bytes, the layout says " +
                                     std::to_string(b.size));
    }
    ptrs.push_back(it->second.data);
  }
  return ptrs;
}

/// The source's bytes; nullptr for padding and for a buffer a partial source lacks.
const uint8_t* Ptr(const std::vector<const uint8_t*>& bufs, const SegmentSource& s) {
  if (s.buffer < 0) return nullptr;
  const uint8_t* base = bufs[static_cast<size_t>(s.buffer)];
  return base == nullptr ? nullptr : base + s.offset;
}

/// Copies every segment whose buffer is present (a copy segment has one non-padding source).
void CopySegments(const std::vector<CodingSegment>& segs, const std::vector<const uint8_t*>& bufs,
                  uint8_t* out) {
  for (const auto& s : segs) {
    const uint8_t* src = Ptr(bufs, s.sources[0]);
    if (src != nullptr) std::memcpy(out + s.out_offset, src, s.size);
  }
}

/// InvalidArgument naming the first buffer a parity reads that a partial source lacks.
Status CheckParitySources(const SgGeometry& g, const std::vector<CodingSegment>& segs,
                          const std::vector<const uint8_t*>& bufs, const char* what) {
  for (const auto& s : segs) {
    for (const auto& src : s.sources) {
      if (src.buffer >= 0 && bufs[static_cast<size_t>(src.buffer)] == nullptr) {
        return Status::InvalidArgument(std::string("encode: the ") + what + " parity reads '" +
                                       g.buffers[static_cast<size_t>(src.buffer)].name +
                                       "', which is not in this memory");
      }
    }
  }
  return Status::OK();
}

Status XorSegments(const std::vector<CodingSegment>& segs, const std::vector<const uint8_t*>& bufs,
                   uint8_t* out, int threads) {
  std::vector<const void*> live;
  for (const auto& s : segs) {
    live.clear();
    for (const auto& src : s.sources) {
      if (src.buffer >= 0) live.push_back(Ptr(bufs, src));  // padding XORs as zero
    }
    if (live.empty()) {
      std::memset(out + s.out_offset, 0, s.size);
    } else {
      REFT_RETURN_NOT_OK(
          kernels::XorReduce(out + s.out_offset, live.data(), live.size(), s.size, threads));
    }
  }
  return Status::OK();
}

Status RsRow(const kernels::RsCodec& codec, int q, const std::vector<CodingSegment>& segs,
             const std::vector<const uint8_t*>& bufs, uint8_t* out) {
  std::vector<const uint8_t*> data(static_cast<size_t>(codec.k()));
  for (const auto& s : segs) {
    // Padding reads the zero block, so such segments are processed in zero-block pieces.
    for (uint64_t done = 0; done < s.size;) {
      bool padded = false;
      for (size_t i = 0; i < data.size(); ++i) {
        const uint8_t* p = Ptr(bufs, s.sources[i]);
        padded |= p == nullptr;
        data[i] = p == nullptr ? ZeroBlock() : p + done;
      }
      const uint64_t n = padded ? std::min(kZeroBlock, s.size - done) : s.size - done;
      REFT_RETURN_NOT_OK(codec.EncodeRow(q, data.data(), out + s.out_offset + done, n));
      done += n;
    }
  }
  return Status::OK();
}

}  // namespace

Status EncodeMember(const SgGeometry& g, const Scheme& scheme, int dp,
                    const ReplicatedSource& source,
                    const std::map<std::string, MutableSpan>& regions, int threads,
                    bool partial_source) {
  if (dp < 0 || dp >= g.m)
    return Status::InvalidArgument("encode: dp " + std::to_string(dp) + " outside the SG");
  if (scheme.rs > 0 && scheme.rs != g.rs_r) {
    return Status::InvalidArgument("encode: geometry built for rs" + std::to_string(g.rs_r) +
                                   ", scheme is " + scheme.ToString());
  }
  REFT_ASSIGN_OR_RETURN(auto bufs, ResolveBuffers(g, source, partial_source));
  auto region = [&](const std::string& name, uint64_t size) -> Result<uint8_t*> {
    auto it = regions.find(name);
    if (it == regions.end()) return static_cast<uint8_t*>(nullptr);
    if (it->second.size != size || (size > 0 && it->second.data == nullptr)) {
      return Status::InvalidArgument("encode: region '" + name + "' has " +
                                     std::to_string(it->second.size) + " bytes, the layout says " +
                                     std::to_string(size));
    }
    return it->second.data;
  };
  REFT_ASSIGN_OR_RETURN(uint8_t * own, region(kRegionShard, g.ShardSize(dp)));
  if (own != nullptr) CopySegments(ShardSegments(g, dp), bufs, own);
  for (int o = 1; o <= scheme.arc; ++o) {
    const int j = (dp + o) % g.m;
    REFT_ASSIGN_OR_RETURN(uint8_t * dst, region(ArcRegionName(o), g.ShardSize(j)));
    if (dst != nullptr) CopySegments(ShardSegments(g, j), bufs, dst);
  }
  if (scheme.aec) {
    REFT_ASSIGN_OR_RETURN(uint8_t * dst, region(kRegionAec, g.aec_sub));
    if (dst != nullptr) {
      const auto segs = AecSegments(g, dp);
      REFT_RETURN_NOT_OK(CheckParitySources(g, segs, bufs, "AEC"));
      REFT_RETURN_NOT_OK(XorSegments(segs, bufs, dst, threads));
    }
  }
  if (scheme.rs > 0) {
    REFT_ASSIGN_OR_RETURN(uint8_t * dst,
                          region(kRegionRs, g.rs_sub * static_cast<uint64_t>(scheme.rs)));
    if (dst != nullptr) {
      REFT_ASSIGN_OR_RETURN(auto codec, kernels::RsCodec::Create(g.m - scheme.rs, scheme.rs));
      for (int q = 0; q < scheme.rs; ++q) {
        const auto segs = RsSegments(g, dp, q);
        REFT_RETURN_NOT_OK(CheckParitySources(g, segs, bufs, "RS"));
        REFT_RETURN_NOT_OK(RsRow(*codec, q, segs, bufs, dst + static_cast<uint64_t>(q) * g.rs_sub));
      }
    }
  }
  return Status::OK();
}

Status AssembleBuffers(const SgGeometry& g, const std::vector<ConstSpan>& shards,
                       const std::map<std::string, MutableSpan>& out) {
  if (shards.size() != static_cast<size_t>(g.m)) {
    return Status::InvalidArgument("assemble: " + std::to_string(shards.size()) +
                                   " shards for an SG of " + std::to_string(g.m));
  }
  for (int d = 0; d < g.m; ++d) {
    if (shards[d].size != g.ShardSize(d) || (shards[d].size > 0 && shards[d].data == nullptr)) {
      return Status::InvalidArgument("assemble: shard dp" + std::to_string(d) + " has " +
                                     std::to_string(shards[d].size) + " bytes, the layout says " +
                                     std::to_string(g.ShardSize(d)));
    }
  }
  for (const auto& b : g.buffers) {
    auto it = out.find(b.name);
    if (it == out.end()) continue;
    if (it->second.size != b.size || (b.size > 0 && it->second.data == nullptr)) {
      return Status::InvalidArgument("assemble: buffer '" + b.name + "' has " +
                                     std::to_string(it->second.size) + " bytes, the layout says " +
                                     std::to_string(b.size));
    }
    // The buffer occupies canonical bytes [offset, offset+size); walk the shards covering it.
    for (int d = 0; d < g.m; ++d) {
      const uint64_t lo = std::max(b.offset, g.shard_begin[d]);
      const uint64_t hi = std::min(b.offset + b.size, g.shard_begin[d + 1]);
      if (lo < hi) {
        std::memcpy(it->second.data + (lo - b.offset), shards[d].data + (lo - g.shard_begin[d]),
                    hi - lo);
      }
    }
  }
  return Status::OK();
}

}  // namespace reft::protect
