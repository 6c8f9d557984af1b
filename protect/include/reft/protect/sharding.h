#pragma once
/// \file sharding.h
/// \brief Global parameter sharding (docs/protection.md "Sharding"): a pure function from layout,
/// scheme and registered buffers to each rank's responsibilities and slot layout.
///
/// The sharding group (SG) of a rank is the dp ranks with the same (pp, tp). Its replicated
/// buffers, sorted by name, are flattened into one canonical byte vector of S bytes. With
/// nchunks = ceil(S / chunk), member d owns chunks [floor(d·nchunks/m), floor((d+1)·nchunks/m)),
/// clipped to S. Every coding scheme works on shards zero-padded to a common length.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/protect/buffer_spec.h"
#include "reft/protect/scheme.h"
#include "reft/result.h"

namespace reft::protect {

/// Region names of a slot (the store's RegionSpec names).
inline constexpr const char* kRegionShard = "rep/shard";  ///< own shard
inline constexpr const char* kRegionAec = "rep/aec";      ///< AEC parity, one sub-chunk
inline constexpr const char* kRegionRs = "rep/rs";        ///< RS parities, r sub-blocks
std::string ArcRegionName(int offset);                    ///< "rep/arc+<offset>"
std::string UniqueRegionName(const std::string& buffer);  ///< "unique/<name>" own copy
std::string PeerRegionName(const std::string& buffer);    ///< "peer/<name>" copy of dp+1's
std::string AorRegionName(const std::string& buffer);     ///< "aor/<name>" replay of dp+1's

/// \brief True when `b` gets an "aor/<name>" region (replayed by AOR, aor_plan.h) rather than a
/// "peer/<name>" copy: protection aor, a unique buffer with the optimizer flag, ZeRO stage 1,
/// dp >= 2.
bool HasAorRegion(const JobLayout& layout, const Scheme& scheme, const BufferSpec& b);

/// \brief A replicated buffer's place in the SG's canonical byte vector.
struct BufferExtent {
  std::string name;
  uint64_t offset = 0;  ///< in the canonical vector
  uint64_t size = 0;
};

/// \brief Geometry of the replicated bytes of one SG; identical for all its members.
struct SgGeometry {
  int m = 1;                          ///< members (dp)
  uint64_t chunk = 0;                 ///< shard alignment
  uint64_t total = 0;                 ///< S
  std::vector<BufferExtent> buffers;  ///< replicated buffers sorted by name
  std::vector<uint64_t> shard_begin;  ///< m+1 entries; shard d = [shard_begin[d], shard_begin[d+1])
  uint64_t shard_max = 0;             ///< L = largest shard
  uint64_t aec_sub = 0;               ///< ceil(L/(m-1)) (0 when m < 2)
  int rs_r = 0;                       ///< r of the RS scheme (0 = none)
  uint64_t rs_sub = 0;                ///< ceil(L/(m-r)) (0 when no RS)
  std::vector<std::string> unique;    ///< unique buffers of each member, sorted by name

  uint64_t ShardSize(int d) const { return shard_begin[d + 1] - shard_begin[d]; }
  /// \brief The extent of replicated buffer `name` in the canonical vector, nullptr if the
  /// group has no such replicated buffer.
  const BufferExtent* Extent(const std::string& name) const;
  /// \brief Padded shard length every scheme can address: max(L, aec_sub·(m−1), rs_sub·(m−r)).
  uint64_t PaddedShard() const;
  /// \brief Buffers overlapping canonical bytes [begin, end), "name[a,b)" joined by ", ".
  std::string DescribeRange(uint64_t begin, uint64_t end) const;
};

/// \brief Builds the geometry from a rank's buffer list (unique buffers are ignored).
/// \param chunk shard alignment in bytes (> 0).
Result<SgGeometry> BuildGeometry(int m, const std::vector<BufferSpec>& buffers, uint64_t chunk,
                                 const Scheme& scheme);

/// \brief One slot region: the ordered list of these is the store's slot layout.
struct Region {
  std::string name;
  uint64_t size = 0;
};

/// \brief A piece of the own shard: bytes [buffer_offset, +size) of `buffer` land at
/// shard_offset in "rep/shard".
struct ShardPiece {
  std::string buffer;
  uint64_t buffer_offset = 0;
  uint64_t shard_offset = 0;
  uint64_t size = 0;
};

/// \brief Everything one rank must snapshot.
struct RankPlan {
  RankCoord coord;
  std::string node;  ///< from ShardingInput::placement; "rank<global rank>" without one
  uint64_t shard_begin = 0;  ///< own shard in the canonical vector
  uint64_t shard_end = 0;
  std::vector<ShardPiece> pieces;  ///< own shard ranges per buffer
  std::vector<Region> regions;     ///< slot layout, in order
  uint64_t total_bytes = 0;        ///< sum of region sizes
  uint64_t redundancy_bytes = 0;   ///< total minus own shard and own unique buffers
};

/// \brief Full input of the sharding function.
struct ShardingInput {
  JobLayout layout;
  /// Node name of every rank, indexed by JobLayout::GlobalRank(); empty = every rank on its own
  /// node "rank<i>". Only the placement warnings and the node-failure tolerance use it.
  std::vector<std::string> placement;
  Scheme scheme;
  uint64_t chunk = 64 << 10;  ///< shard alignment; 64 KiB default
  /// Buffers registered by every rank, identical for all SGs unless `group_buffers` has the SG.
  std::vector<BufferSpec> buffers;
  struct GroupBuffers {
    int pp = 0;
    int tp = 0;
    std::vector<BufferSpec> buffers;
  };
  std::vector<GroupBuffers> group_buffers;  ///< per-(pp, tp) overrides
  bool strict_placement = false;  ///< SG members sharing a node is an error, not a warning

  const std::vector<BufferSpec>& BuffersOf(int pp, int tp) const;
  /// The layout is valid and `placement`, when given, names one node per rank.
  Status CheckLayout() const;
};

/// \brief The result for one SG.
struct GroupPlan {
  int pp = 0;
  int tp = 0;
  SgGeometry geometry;
  std::vector<RankPlan> ranks;            ///< indexed by dp
  std::vector<std::string> member_nodes;  ///< node of each dp member
};

struct ShardingPlan {
  std::vector<GroupPlan> groups;      ///< ordered by (pp, tp)
  std::vector<std::string> warnings;  ///< e.g. SG members sharing a node
};

/// \brief Slot layout and responsibilities of one rank (what the daemon calls per rank).
Result<RankPlan> ComputeRankPlan(const JobLayout& layout, const Scheme& scheme, const RankCoord& coord,
                                 const std::vector<BufferSpec>& buffers, uint64_t chunk);

/// \brief The whole job: every SG and every rank, plus placement warnings.
/// Returns InvalidArgument naming the members when strict_placement and members share a node.
Result<ShardingPlan> PlanSharding(const ShardingInput& input);

}  // namespace reft::protect
