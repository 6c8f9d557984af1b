#pragma once
/// \file rebuild_analysis.h
/// \brief Recovery analysis of one SG: from which members survive, the exact recoverable set and
/// the ordered operations that rebuild it (iterative peeling over ARC copies and AEC parities,
/// erasure decoding of RS stripes, to a fixed point), or exactly what is lost.
///
/// Works on byte intervals of zero-padded shards, so combinations of schemes with different
/// sub-chunk sizes are analysed exactly (tolerances do not add: docs/protection.md "Decoding and the recoverable set"). The analysis
/// is symbolic (no bytes); decoder.h executes its operations.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/protect/scheme.h"
#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief One step of a rebuild, in padded shard coordinates.
struct RecoveryOp {
  enum class Kind { kCopy, kXor, kRs };
  Kind kind = Kind::kCopy;
  /// kCopy/kXor: bytes [begin, end) of shard `target` are rebuilt.
  /// kRs: offsets [begin, end) inside the sub-blocks of stripe `stripe`.
  int target = -1;
  uint64_t begin = 0;
  uint64_t end = 0;
  /// kCopy/kXor: the surviving member and region read, starting at region_offset.
  int holder = -1;
  std::string region;
  uint64_t region_offset = 0;
  /// kXor: target = region ^ XOR of shard[sources[i].first] at offset sources[i].second.
  std::vector<std::pair<int, uint64_t>> sources;
  /// kRs: stripe index and erased block positions (data 0..k-1, parity k..k+r-1).
  int stripe = -1;
  std::vector<int> erased;
};

/// \brief Bytes of a shard that cannot be rebuilt.
struct LostRange {
  int shard = -1;      ///< dp member
  uint64_t begin = 0;  ///< within the shard
  uint64_t end = 0;
  std::string buffers;  ///< buffers these bytes belong to, "name[a,b)"
};

struct RecoveryAnalysis {
  std::vector<RecoveryOp> ops;           ///< in execution order
  std::vector<LostRange> lost;           ///< empty = every failed shard is recoverable
  std::vector<std::string> lost_unique;  ///< "dp<d>/<buffer>" unique buffers with no copy left
  bool recoverable() const { return lost.empty() && lost_unique.empty(); }
  /// \brief "shard dp2 bytes [0,4096) (w[0,4096)); unique dp3/rng" or "nothing lost".
  std::string Describe() const;
};

/// \brief Geometry of the RS stripes (rotated Cauchy RS, generalising AEC to r parities):
/// stripe t (0..m-1) has k = m-r data sub-blocks, block p from shard (t+r+p) mod m at sub-block
/// index (t-j-1) mod m, and r parity sub-blocks, parity q stored on member (t+q) mod m at offset
/// q·rs_sub of its "rep/rs" region. Every member holds exactly one block of every stripe, so any
/// r member failures erase at most r blocks per stripe.
int RsDataShard(int m, int r, int stripe, int p);
int RsParityHolder(int m, int stripe, int q);
/// \brief AEC sub-chunk index of shard j in the parity of member k (the paper's example corrected: docs/protection.md "Schemes").
int AecIndex(int m, int j, int k);

/// \brief Analyses the failure of every member with alive[d] == false.
/// \param alive size m.
Result<RecoveryAnalysis> AnalyzeRecovery(const SgGeometry& geometry, const Scheme& scheme,
                                         const std::vector<bool>& alive);

/// \brief One region a rebuild reads: region `region` of surviving member `member`.
struct RegionRef {
  int member = -1;
  std::string region;
  bool operator==(const RegionRef& o) const { return member == o.member && region == o.region; }
  bool operator<(const RegionRef& o) const {
    return member != o.member ? member < o.member : region < o.region;
  }
};

/// \brief The surviving regions `analysis.ops` read (sorted, unique): what a recovering daemon
/// fetches from its peers before RebuildShards. Survivors' "rep/shard" are included only where
/// an operation reads that shard.
std::vector<RegionRef> RequiredRegions(const SgGeometry& geometry, const Scheme& scheme,
                                       const std::vector<bool>& alive,
                                       const RecoveryAnalysis& analysis);

}  // namespace reft::protect
