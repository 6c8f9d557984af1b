/// \file decoder.cc
/// \brief Executes a RecoveryAnalysis on surviving members' regions. Works on zero-padded copies
/// of all m shards (W bytes of scratch); restore is rare and bounded by the SG's replicated size.

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

Result<std::vector<std::vector<uint8_t>>> RebuildShards(
    const SgGeometry& g, const Scheme& scheme, const std::vector<const MemberRegions*>& members) {
  if (members.size() != static_cast<size_t>(g.m)) {
    return Status::InvalidArgument("decode: " + std::to_string(members.size()) +
                                   " members given, SG has " + std::to_string(g.m));
  }
  std::vector<bool> alive(static_cast<size_t>(g.m));
  for (int d = 0; d < g.m; ++d) alive[d] = members[d] != nullptr;
  REFT_ASSIGN_OR_RETURN(auto analysis, AnalyzeRecovery(g, scheme, alive));
  // Unique buffers are restored by copy from the holder's peer/aor region, not here; only
  // replicated shard losses fail this call.
  if (!analysis.lost.empty()) {
    analysis.lost_unique.clear();
    return Status::Lost("SG cannot rebuild: " + analysis.Describe());
  }
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(g.m));
  bool any_dead = false;
  for (int d = 0; d < g.m; ++d) any_dead |= !alive[d];
  if (!any_dead) return out;

  const uint64_t padded = g.PaddedShard();
  std::vector<std::vector<uint8_t>> work(static_cast<size_t>(g.m), std::vector<uint8_t>(padded, 0));
  // Only the survivors' shards that some operation reads are loaded (RequiredRegions), so a
  // recovering daemon may pass just the regions it fetched.
  std::vector<bool> needed(static_cast<size_t>(g.m), false);
  for (const auto& ref : RequiredRegions(g, scheme, alive, analysis)) {
    if (ref.region == kRegionShard) needed[ref.member] = true;
  }
  for (int d = 0; d < g.m; ++d) {
    if (!alive[d] || !needed[d]) continue;
    REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                          RegionBytes(members, d, kRegionShard, 0, g.ShardSize(d)));
    if (g.ShardSize(d) > 0) std::memcpy(work[d].data(), p, g.ShardSize(d));
  }
  std::shared_ptr<const kernels::RsCodec> codec;
  if (scheme.rs > 0) {
    REFT_ASSIGN_OR_RETURN(codec, kernels::RsCodec::Create(g.m - scheme.rs, scheme.rs));
  }
  std::vector<uint8_t> scratch;
  for (const auto& op : analysis.ops) {
    const uint64_t len = op.end - op.begin;
    switch (op.kind) {
      case RecoveryOp::Kind::kCopy: {
        REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                              RegionBytes(members, op.holder, op.region, op.region_offset, len));
        std::memcpy(work[op.target].data() + op.begin, p, len);
        break;
      }
      case RecoveryOp::Kind::kXor: {
        std::vector<const void*> srcs;
        REFT_ASSIGN_OR_RETURN(const uint8_t* p,
                              RegionBytes(members, op.holder, op.region, op.region_offset, len));
        srcs.push_back(p);
        for (const auto& [j, off] : op.sources) srcs.push_back(work[j].data() + off);
        REFT_RETURN_NOT_OK(
            kernels::XorReduce(work[op.target].data() + op.begin, srcs.data(), srcs.size(), len));
        break;
      }
      case RecoveryOp::Kind::kRs: {
        const int r = scheme.rs;
        const int k = g.m - r;
        std::vector<uint8_t*> blocks(static_cast<size_t>(k + r));
        for (int p = 0; p < k; ++p) {
          const int j = RsDataShard(g.m, r, op.stripe, p);
          blocks[p] = work[j].data() +
                      static_cast<uint64_t>(AecIndex(g.m, j, op.stripe)) * g.rs_sub + op.begin;
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
        break;
      }
    }
  }
  for (int d = 0; d < g.m; ++d) {
    if (alive[d]) continue;
    out[d].assign(work[d].begin(), work[d].begin() + static_cast<std::ptrdiff_t>(g.ShardSize(d)));
  }
  return out;
}

}  // namespace reft::protect
