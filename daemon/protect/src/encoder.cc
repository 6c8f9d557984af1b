/// \file encoder.cc
/// \brief Member-local redundancy encoding, zero-copy: the parity offset space is walked in
/// segments over which every source sub-chunk is contiguous in one registered buffer (or is
/// zero padding), and each segment goes straight to XorReduce / RsCodec::EncodeRow.

#include <algorithm>
#include <cstring>
#include <vector>

#include "reft/kernels/rs.h"
#include "reft/kernels/xor.h"
#include "reft/protect/codec.h"

namespace reft::protect {
namespace {

/// Size of the shared zero block standing in for padding (bounds segments that read padding).
constexpr uint64_t kMaxSegment = 1 << 20;

const uint8_t* ZeroBlock() {
  static const std::vector<uint8_t> zeros(kMaxSegment, 0);
  return zeros.data();
}

/// Resolves padded-shard positions to the member's buffers.
class ShardReader {
 public:
  static Result<ShardReader> Create(const SgGeometry& g, const ReplicatedSource& src) {
    ShardReader r(g);
    for (const auto& b : g.buffers) {
      auto it = src.find(b.name);
      if (it == src.end()) return Status::InvalidArgument("encode: replicated buffer '" + b.name + "' not provided");
      if (it->second.size != b.size || (b.size > 0 && it->second.data == nullptr)) {
        return Status::InvalidArgument("encode: buffer '" + b.name + "' has " + std::to_string(it->second.size) +
                                       " bytes, the layout says " + std::to_string(b.size));
      }
      r.ptrs_.push_back(it->second.data);
    }
    return r;
  }
  /// Pointer to byte `pos` of shard j (nullptr = zero padding) and how many bytes stay contiguous.
  std::pair<const uint8_t*, uint64_t> Locate(int j, uint64_t pos) const {
    const uint64_t size = g_.ShardSize(j);
    if (pos >= size) return {nullptr, g_.PaddedShard() - pos};
    const uint64_t c = g_.shard_begin[j] + pos;
    auto it = std::upper_bound(g_.buffers.begin(), g_.buffers.end(), c,
                               [](uint64_t v, const BufferExtent& b) { return v < b.offset; });
    --it;  // buffers tile [0, total) from offset 0, so a predecessor exists
    // Zero-size buffers share an offset with their successor; skip to the one holding c.
    while (it->offset + it->size <= c) ++it;
    const size_t i = static_cast<size_t>(it - g_.buffers.begin());
    const uint64_t run = std::min(it->offset + it->size, g_.shard_begin[j] + size) - c;
    return {ptrs_[i] + (c - it->offset), run};
  }

 private:
  explicit ShardReader(const SgGeometry& g) : g_(g) {}
  const SgGeometry& g_;
  std::vector<const uint8_t*> ptrs_;
};

/// Walks [0, len) of the given (shard, base) sources; fn(offset, seg, pointers) per segment
/// with nullptr for padding sources.
template <typename Fn>
Status ForSegments(const ShardReader& rd, const std::vector<std::pair<int, uint64_t>>& srcs,
                   uint64_t len, Fn fn) {
  std::vector<const uint8_t*> ptrs(srcs.size());
  for (uint64_t off = 0; off < len;) {
    uint64_t seg = len - off;
    for (size_t i = 0; i < srcs.size(); ++i) {
      auto [p, run] = rd.Locate(srcs[i].first, srcs[i].second + off);
      ptrs[i] = p;
      seg = std::min(seg, run);
      // Padding is read from the shared zero block, which bounds the segment.
      if (p == nullptr) seg = std::min(seg, kMaxSegment);
    }
    REFT_RETURN_NOT_OK(fn(off, seg, ptrs));
    off += seg;
  }
  return Status::OK();
}

Status CopyShard(const ShardReader& rd, int j, uint64_t size, uint8_t* out) {
  return ForSegments(rd, {{j, 0}}, size, [&](uint64_t off, uint64_t seg, const auto& p) {
    std::memcpy(out + off, p[0], seg);  // never padding: size = ShardSize(j)
    return Status::OK();
  });
}

Status EncodeAec(const SgGeometry& g, const ShardReader& rd, int k, uint8_t* out, int threads) {
  std::vector<std::pair<int, uint64_t>> srcs;
  for (int j = 0; j < g.m; ++j) {
    if (j != k) srcs.emplace_back(j, static_cast<uint64_t>(AecIndex(g.m, j, k)) * g.aec_sub);
  }
  std::vector<const void*> live;
  return ForSegments(rd, srcs, g.aec_sub, [&](uint64_t off, uint64_t seg, const auto& p) {
    live.clear();
    for (const uint8_t* q : p) {
      if (q != nullptr) live.push_back(q);  // padding XORs as zero
    }
    if (live.empty()) {
      std::memset(out + off, 0, seg);
      return Status::OK();
    }
    return kernels::XorReduce(out + off, live.data(), live.size(), seg, threads);
  });
}

Status EncodeRs(const SgGeometry& g, int r, const ShardReader& rd, int member, uint8_t* out) {
  const int k = g.m - r;
  REFT_ASSIGN_OR_RETURN(auto codec, kernels::RsCodec::Create(k, r));
  for (int q = 0; q < r; ++q) {
    // Member holds parity q of stripe t where (t + q) mod m == member.
    const int t = ((member - q) % g.m + g.m) % g.m;
    std::vector<std::pair<int, uint64_t>> srcs;
    for (int p = 0; p < k; ++p) {
      const int j = RsDataShard(g.m, r, t, p);
      srcs.emplace_back(j, static_cast<uint64_t>(AecIndex(g.m, j, t)) * g.rs_sub);
    }
    uint8_t* dst = out + static_cast<uint64_t>(q) * g.rs_sub;
    std::vector<const uint8_t*> data(k);
    REFT_RETURN_NOT_OK(ForSegments(rd, srcs, g.rs_sub, [&](uint64_t off, uint64_t seg, const auto& p) {
      for (int i = 0; i < k; ++i) data[i] = p[i] != nullptr ? p[i] : ZeroBlock();
      return codec->EncodeRow(q, data.data(), dst + off, seg);
    }));
  }
  return Status::OK();
}

}  // namespace

Status EncodeMember(const SgGeometry& g, const Scheme& scheme, int dp, const ReplicatedSource& source,
                    const std::map<std::string, MutableSpan>& regions, int threads) {
  if (dp < 0 || dp >= g.m) return Status::InvalidArgument("encode: dp " + std::to_string(dp) + " outside the SG");
  if (scheme.rs > 0 && scheme.rs != g.rs_r) {
    return Status::InvalidArgument("encode: geometry built for rs" + std::to_string(g.rs_r) + ", scheme is " +
                                   scheme.ToString());
  }
  REFT_ASSIGN_OR_RETURN(auto rd, ShardReader::Create(g, source));
  auto region = [&](const std::string& name, uint64_t size) -> Result<uint8_t*> {
    auto it = regions.find(name);
    if (it == regions.end()) return static_cast<uint8_t*>(nullptr);
    if (it->second.size != size || (size > 0 && it->second.data == nullptr)) {
      return Status::InvalidArgument("encode: region '" + name + "' has " + std::to_string(it->second.size) +
                                     " bytes, the layout says " + std::to_string(size));
    }
    return it->second.data;
  };
  REFT_ASSIGN_OR_RETURN(uint8_t * own, region(kRegionShard, g.ShardSize(dp)));
  if (own != nullptr) REFT_RETURN_NOT_OK(CopyShard(rd, dp, g.ShardSize(dp), own));
  for (int o = 1; o <= scheme.arc; ++o) {
    const int j = (dp + o) % g.m;
    REFT_ASSIGN_OR_RETURN(uint8_t * dst, region(ArcRegionName(o), g.ShardSize(j)));
    if (dst != nullptr) REFT_RETURN_NOT_OK(CopyShard(rd, j, g.ShardSize(j), dst));
  }
  if (scheme.aec) {
    REFT_ASSIGN_OR_RETURN(uint8_t * dst, region(kRegionAec, g.aec_sub));
    if (dst != nullptr) REFT_RETURN_NOT_OK(EncodeAec(g, rd, dp, dst, threads));
  }
  if (scheme.rs > 0) {
    REFT_ASSIGN_OR_RETURN(uint8_t * dst, region(kRegionRs, g.rs_sub * static_cast<uint64_t>(scheme.rs)));
    if (dst != nullptr) REFT_RETURN_NOT_OK(EncodeRs(g, scheme.rs, rd, dp, dst));
  }
  return Status::OK();
}

}  // namespace reft::protect
