/// \file decoder.cc
/// \brief Executes a RecoveryAnalysis on surviving members' regions: RebuildShards on zero-padded
/// copies of all m shards (W bytes of scratch), RebuildShardsInto in place in the canonical
/// vector (no scratch: bytes past a shard's end read as the zero padding).

#include <algorithm>
#include <cstring>

#include "reft/kernels/rs.h"
#include "reft/kernels/xor.h"
#include "reft/protect/codec.h"

namespace reft::protect {
namespace {

Result<const uint8_t*> RegionBytes(const std::vector<const MemberRegions*>& members, int holder,
                                   const std::string& name, uint64_t offset, uint64_t len) {
  const MemberRegions* mr = members[holder];
  auto it = mr->find(name);
  if (it == mr->end()) {
    return Status::InvalidArgument("decode: surviving member dp" + std::to_string(holder) +
                                   " did not provide region '" + name + "'");
  }
  if (it->second.size < offset + len || (len > 0 && it->second.data == nullptr)) {
    return Status::InvalidArgument("decode: region '" + name + "' of dp" + std::to_string(holder) +
                                   " has " + std::to_string(it->second.size) + " bytes, need " +
                                   std::to_string(offset + len));
  }
  return it->second.data + offset;
}

}  // namespace

namespace {

/// Bytes of [begin, begin + len) below `real`.
uint64_t RealBytes(uint64_t real, uint64_t begin, uint64_t len) {
  return begin >= real ? 0 : std::min(len, real - begin);
}

// Runs `analysis.ops` on per-member shard buffers `work`, each seen as the padded shard the
// codes are defined on: bytes of work[d] at or beyond real[d] read as zero, and writes there
// are dropped (they would rebuild the zero padding). So a shard shorter than the padded length
// is worked on where it lies; only an RS stripe block that crosses the end of its shard goes
// through a padded copy of that one block.
Status RunOps(const SgGeometry& g, const Scheme& scheme, const std::vector<bool>& alive,
              const RecoveryAnalysis& analysis, const std::vector<const MemberRegions*>& members,
              const std::vector<uint8_t*>& work, const std::vector<uint64_t>& real) {
  std::shared_ptr<const kernels::RsCodec> codec;
  if (scheme.rs > 0) {
    REFT_ASSIGN_OR_RETURN(codec, kernels::RsCodec::Create(g.m - scheme.rs, scheme.rs));
  }
  std::vector<uint8_t> scratch;
  std::vector<std::vector<uint8_t>> padded_blocks;
  for (const auto& op : analysis.ops) {
    const uint64_t len = op.end - op.begin;
    switch (op.kind) {
      case RecoveryOp::Kind::kCopy: {
        REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                              RegionBytes(members, op.holder, op.region, op.region_offset, len));
        const uint64_t n = RealBytes(real[op.target], op.begin, len);
        if (n > 0) std::memcpy(work[op.target] + op.begin, p, n);
        break;
      }
      case RecoveryOp::Kind::kXor: {
        REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                              RegionBytes(members, op.holder, op.region, op.region_offset, len));
        const uint64_t out = RealBytes(real[op.target], op.begin, len);
        // Cut [0, out) where a source runs into its padding: past the cut it adds zeros.
        std::vector<uint64_t> cuts{0, out};
        for (const auto& [j, off] : op.sources) {
          const uint64_t n = RealBytes(real[j], off, len);
          if (n > 0 && n < out) cuts.push_back(n);
        }
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<const void*> srcs;
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
          const uint64_t a = cuts[c];
          srcs.assign(1, p + a);
          for (const auto& [j, off] : op.sources) {
            if (off + a < real[j]) srcs.push_back(work[j] + off + a);
          }
          REFT_RETURN_NOT_OK(kernels::XorReduce(work[op.target] + op.begin + a, srcs.data(),
                                                srcs.size(), cuts[c + 1] - a));
        }
        break;
      }
      case RecoveryOp::Kind::kRs: {
        const int r = scheme.rs;
        const int k = g.m - r;
        std::vector<uint8_t*> blocks(static_cast<size_t>(k + r));
        padded_blocks.resize(static_cast<size_t>(k));
        struct Copied {
          int block;
          uint8_t* place;  ///< where the block lies in its shard
          uint64_t real;   ///< its bytes before the shard's end
        };
        std::vector<Copied> copied;
        for (int p = 0; p < k; ++p) {
          const int j = RsDataShard(g.m, r, op.stripe, p);
          const uint64_t offset =
              static_cast<uint64_t>(AecIndex(g.m, j, op.stripe)) * g.rs_sub + op.begin;
          uint8_t* place = work[j] + offset;
          const uint64_t n = RealBytes(real[j], offset, len);
          if (n == len) {
            blocks[p] = place;
            continue;
          }
          auto& block = padded_blocks[p];
          block.assign(len, 0);
          if (n > 0) std::memcpy(block.data(), place, n);
          blocks[p] = block.data();
          copied.push_back({p, place, n});
        }
        scratch.assign(len * static_cast<uint64_t>(r), 0);
        for (int q = 0; q < r; ++q) {
          const int holder = RsParityHolder(g.m, op.stripe, q);
          if (!alive[holder]) {
            blocks[k + q] = scratch.data() + static_cast<uint64_t>(q) * len;
            continue;
          }
          REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                                RegionBytes(members, holder, kRegionRs,
                                            static_cast<uint64_t>(q) * g.rs_sub + op.begin, len));
          // Decode writes only the erased blocks; survivors' parities are read-only.
          blocks[k + q] = const_cast<uint8_t*>(p);
        }
        REFT_RETURN_NOT_OK(codec->Decode(blocks.data(), op.erased, len));
        for (const Copied& c : copied) {  // a rebuilt block's real bytes go to their place
          const bool erased =
              std::find(op.erased.begin(), op.erased.end(), c.block) != op.erased.end();
          if (erased && c.real > 0) std::memcpy(c.place, blocks[c.block], c.real);
        }
        break;
      }
    }
  }
  return Status::OK();
}

// The analysis of who is alive (members[d] != nullptr), failing when shard bytes are lost.
Result<RecoveryAnalysis> AnalyzeMembers(const SgGeometry& g, const Scheme& scheme,
                                        const std::vector<const MemberRegions*>& members,
                                        std::vector<bool>* alive) {
  if (members.size() != static_cast<size_t>(g.m)) {
    return Status::InvalidArgument("decode: " + std::to_string(members.size()) +
                                   " members given, SG has " + std::to_string(g.m));
  }
  alive->assign(static_cast<size_t>(g.m), false);
  for (int d = 0; d < g.m; ++d) (*alive)[d] = members[d] != nullptr;
  REFT_ASSIGN_OR_RETURN(auto analysis, AnalyzeRecovery(g, scheme, *alive));
  // Unique buffers are restored by copy from the holder's peer/aor region, not here; only
  // replicated shard losses fail this call.
  if (!analysis.lost.empty()) {
    analysis.lost_unique.clear();
    return Status::Lost("SG cannot rebuild: " + analysis.Describe());
  }
  return analysis;
}

// Which survivors' shards some operation reads (RequiredRegions), so a recovering daemon may
// pass just the regions it fetched.
std::vector<bool> NeededShards(const SgGeometry& g, const Scheme& scheme,
                               const std::vector<bool>& alive, const RecoveryAnalysis& analysis) {
  std::vector<bool> needed(static_cast<size_t>(g.m), false);
  for (const auto& ref : RequiredRegions(g, scheme, alive, analysis)) {
    if (ref.region == kRegionShard) needed[ref.member] = true;
  }
  return needed;
}

}  // namespace

Result<std::vector<std::vector<uint8_t>>> RebuildShards(
    const SgGeometry& g, const Scheme& scheme, const std::vector<const MemberRegions*>& members) {
  std::vector<bool> alive;
  REFT_ASSIGN_OR_RETURN(RecoveryAnalysis analysis, AnalyzeMembers(g, scheme, members, &alive));
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(g.m));
  bool any_dead = false;
  for (int d = 0; d < g.m; ++d) any_dead |= !alive[d];
  if (!any_dead) return out;

  const uint64_t padded = g.PaddedShard();
  std::vector<std::vector<uint8_t>> own(static_cast<size_t>(g.m), std::vector<uint8_t>(padded, 0));
  std::vector<uint8_t*> work(static_cast<size_t>(g.m));
  const std::vector<uint64_t> real(static_cast<size_t>(g.m), padded);
  const std::vector<bool> needed = NeededShards(g, scheme, alive, analysis);
  for (int d = 0; d < g.m; ++d) {
    work[d] = own[d].data();
    if (!alive[d] || !needed[d]) continue;
    REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                          RegionBytes(members, d, kRegionShard, 0, g.ShardSize(d)));
    if (g.ShardSize(d) > 0) std::memcpy(work[d], p, g.ShardSize(d));
  }
  REFT_RETURN_NOT_OK(RunOps(g, scheme, alive, analysis, members, work, real));
  for (int d = 0; d < g.m; ++d) {
    if (alive[d]) continue;
    out[d].assign(own[d].begin(), own[d].begin() + static_cast<std::ptrdiff_t>(g.ShardSize(d)));
  }
  return out;
}

Status RebuildShardsInto(const SgGeometry& g, const Scheme& scheme,
                         const std::vector<const MemberRegions*>& members, uint8_t* canonical) {
  std::vector<bool> alive;
  REFT_ASSIGN_OR_RETURN(RecoveryAnalysis analysis, AnalyzeMembers(g, scheme, members, &alive));
  // Every shard is worked on where it lies, its padding read as zeros (RunOps): no scratch,
  // whatever the shard sizes. (The codes pad every shard to (m-1)·sub bytes, so most shards
  // are a few bytes shorter than the padded length; a padded copy of each was W bytes of fresh
  // memory per restore.)
  std::vector<uint8_t*> work(static_cast<size_t>(g.m));
  std::vector<uint64_t> real(static_cast<size_t>(g.m));
  for (int d = 0; d < g.m; ++d) {
    work[d] = canonical + g.shard_begin[d];
    real[d] = g.ShardSize(d);
    // A lost shard's place is rebuilt in full; zero it so no op can read stale bytes there.
    if (!alive[d] && real[d] > 0) std::memset(work[d], 0, real[d]);
  }
  return RunOps(g, scheme, alive, analysis, members, work, real);
}

}  // namespace reft::protect
