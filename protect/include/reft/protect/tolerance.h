#pragma once
/// \file tolerance.h
/// \brief Protection planner: per-rank bytes and the guaranteed number of node failures each SG
/// survives, computed by the recovery analysis over node failure sets (never by adding the
/// components' tolerances, docs/protection.md).

#include <cstdint>
#include <string>
#include <vector>

#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief Protection of one SG.
struct GroupProtection {
  int pp = 0;
  int tp = 0;
  int members = 0;
  int nodes = 0;                     ///< distinct nodes hosting the members
  uint64_t replicated_bytes = 0;     ///< W of this SG
  uint64_t max_rank_bytes = 0;       ///< largest slot of a member
  uint64_t max_rank_redundancy = 0;  ///< largest redundancy of a member
  /// Every set of this many nodes can fail and everything of the SG is rebuilt.
  int node_failures = 0;
  /// The same for the replicated shards alone (unique buffers have a single ring copy).
  int replicated_node_failures = 0;
  /// True when every failure set up to node_failures + 1 was analysed; false when the
  /// enumeration budget ran out (node_failures is then a proven lower bound).
  bool exact = true;
  std::vector<std::string> first_fatal;  ///< a smallest node set that loses data ([] if none)
  std::string first_fatal_loss;          ///< what that set loses
  uint64_t analyses = 0;                 ///< failure sets analysed
};

struct ProtectionReport {
  ShardingPlan sharding;
  std::vector<GroupProtection> groups;
  int node_failures = 0;  ///< min over groups
};

/// \brief Guaranteed node-failure tolerance of one SG (brute force over node failure sets,
/// starting above the bound each component proves alone when members sit on distinct nodes).
/// \param max_analyses enumeration budget (failure sets).
GroupProtection AnalyzeGroupProtection(const GroupPlan& group, const Scheme& scheme,
                                       uint64_t max_analyses = 200000);

/// \brief Start-up choice between ARC and AEC (docs/protection.md "Protection planner"): ARC(1) when its
/// per-rank bytes (1+1)·W/m move to host within `window_s` at `bandwidth` B/s, else AEC when
/// W/m + W/(m(m−1)) does, else AEC with a note to lower the snapshot frequency; "+aor" whenever
/// ZeRO-1 optimizer shards are registered. Uses the largest SG of `plan`.
struct Recommendation {
  Scheme scheme;
  std::string reason;
  double arc_seconds = 0;  ///< per-rank host write time of ARC(1)
  double aec_seconds = 0;  ///< per-rank host write time of AEC
};
Result<Recommendation> RecommendScheme(const ShardingInput& input, double bandwidth,
                                       double window_s);

/// \brief Sharding plus protection of every SG.
Result<ProtectionReport> PlanProtection(const ShardingInput& input);

}  // namespace reft::protect
