#pragma once
/// \file codec.h
/// \brief Encoding a member's redundancy after a snapshot, and rebuilding lost shards at restore.
///
/// Encoding reads only the member's own copy of the SG's replicated buffers (no network):
/// ARC copies, AEC rotated sub-chunk XOR parity, RS rotated Cauchy stripes (recovery.h).
/// Decoding executes a RecoveryAnalysis on the regions of the surviving members.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reft/protect/rebuild_analysis.h"
#include "reft/protect/scheme.h"
#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

struct ConstSpan {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};
struct MutableSpan {
  uint8_t* data = nullptr;
  uint64_t size = 0;
};

/// \brief A member's copy of its SG's replicated buffers, by buffer name (full buffers).
using ReplicatedSource = std::map<std::string, ConstSpan>;

/// \brief Fills every "rep/..." region of member `dp`'s slot layout: "rep/shard" (its own
/// shard), "rep/arc+o", "rep/aec", "rep/rs", each from `source` alone. Regions not present in
/// `regions` are skipped (e.g. the daemon already copied "rep/shard" from the device), so a
/// caller may pass only what it wants computed. Unique/peer/aor regions are not touched.
/// Thread-safe for distinct outputs. \param threads XOR threads for large parities.
/// \param partial_source when true, `source` may lack buffers: the bytes of the copy regions
///        (own shard, ARC copies) that come from a missing buffer are left untouched (someone
///        else writes them: reftd pulls device buffers while the client copies host ones);
///        parity regions still need every buffer they read (InvalidArgument naming it).
Status EncodeMember(const SgGeometry& geometry, const Scheme& scheme, int dp,
                    const ReplicatedSource& source,
                    const std::map<std::string, MutableSpan>& regions, int threads = 1,
                    bool partial_source = false);

/// \brief Scatters the SG's shards (shard d = member d's "rep/shard", ShardSize(d) bytes each)
/// back into full replicated buffers: out[name] receives the buffer's bytes (its size must equal
/// the buffer's). Buffers not in `out` are skipped. REFT-load's last step.
Status AssembleBuffers(const SgGeometry& geometry, const std::vector<ConstSpan>& shards,
                       const std::map<std::string, MutableSpan>& out);

/// \brief The surviving regions of one member's slot (same step!), by region name.
using MemberRegions = std::map<std::string, ConstSpan>;

/// \brief Rebuilds the shards of the failed members, bit-exactly.
/// \param members size m; nullptr = member lost. Every survivor must provide "rep/shard" and the
///        redundancy regions of `scheme`; spans are checked against the geometry.
/// \return for each dp (size m): the rebuilt shard for failed members, empty for survivors;
///         Lost naming exactly which shard bytes (and buffers) cannot be rebuilt.
Result<std::vector<std::vector<uint8_t>>> RebuildShards(
    const SgGeometry& geometry, const Scheme& scheme,
    const std::vector<const MemberRegions*>& members);

}  // namespace reft::protect
