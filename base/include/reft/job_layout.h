#pragma once
/// \file job_layout.h
/// \brief The job layout and a rank's coordinates: the one definition every component uses
/// (client, local channel, slot meta, commit, persistent tier, recovery).

#include <cstdint>
#include <string>

#include "reft/status.h"

namespace reft {

/// \brief Coordinates of a rank. Ranks are keyed by these, never by node or local rank
/// (torchrun renumbers ranks on a restart).
struct RankCoord {
  int32_t pp = 0;
  int32_t tp = 0;
  int32_t dp = 0;
  bool operator==(const RankCoord& o) const { return pp == o.pp && tp == o.tp && dp == o.dp; }
  bool operator!=(const RankCoord& o) const { return !(*this == o); }
  /// \brief Ordered by (pp, tp, dp).
  bool operator<(const RankCoord& o) const;
  std::string ToString() const;  ///< "pp0-tp1-dp2"
};

/// \brief dp × tp × pp ranks and the ZeRO stage of a job.
struct JobLayout {
  /// Largest size of one dimension accepted from a client, a peer or a file.
  static constexpr int32_t kMaxDim = 65536;

  int32_t dp = 1;
  int32_t tp = 1;
  int32_t pp = 1;
  int32_t zero = 0;  ///< ZeRO stage 0..3; stage 3 partitions parameters (nothing is replicated)

  int64_t world() const { return int64_t{dp} * tp * pp; }
  /// \brief Megatron order, tp fastest, then dp, then pp: pp·(dp·tp) + dp·tp + tp.
  int64_t GlobalRank(const RankCoord& c) const {
    return (int64_t{c.pp} * dp + c.dp) * tp + c.tp;
  }
  /// \brief The coordinates of global rank `rank` (GlobalRank's inverse); `rank` in [0, world()).
  RankCoord CoordOf(int64_t rank) const {
    RankCoord c;
    c.tp = static_cast<int32_t>(rank % tp);
    c.dp = static_cast<int32_t>((rank / tp) % dp);
    c.pp = static_cast<int32_t>(rank / (int64_t{tp} * dp));
    return c;
  }
  bool Contains(const RankCoord& c) const {
    return c.pp >= 0 && c.pp < pp && c.tp >= 0 && c.tp < tp && c.dp >= 0 && c.dp < dp;
  }
  /// \brief Same sizes (the ZeRO stage does not change the set of ranks).
  bool SameRanks(const JobLayout& o) const { return dp == o.dp && tp == o.tp && pp == o.pp; }
  bool operator==(const JobLayout& o) const { return SameRanks(o) && zero == o.zero; }
  bool operator!=(const JobLayout& o) const { return !(*this == o); }
  std::string ToString() const;  ///< "dp=4,tp=1,pp=1,zero=0"

  /// \brief InvalidArgument naming the layout unless every size is in [1, kMaxDim] and the
  /// ZeRO stage in 0..3.
  Status Validate() const;
  /// \brief Validate(), then InvalidArgument unless `c` lies inside the layout.
  Status CheckRank(const RankCoord& c) const;
};

}  // namespace reft
