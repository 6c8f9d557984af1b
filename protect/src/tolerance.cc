/// \file tolerance.cc
/// \brief Guaranteed tolerance by enumeration of node failure sets.

#include "reft/protect/tolerance.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "reft/protect/rebuild_analysis.h"

namespace reft::protect {
namespace {

/// Advances `idx` (sorted, size f, values < n) to the next combination; false at the end.
bool NextCombination(std::vector<int>& idx, int n) {
  const int f = static_cast<int>(idx.size());
  for (int i = f - 1; i >= 0; --i) {
    if (idx[i] < n - f + i) {
      ++idx[i];
      for (int j = i + 1; j < f; ++j) idx[j] = idx[j - 1] + 1;
      return true;
    }
  }
  return false;
}

}  // namespace

namespace {

/// Enumerates node failure sets of `g` into out.node_failures / exact / first_fatal*.
void Enumerate(const SgGeometry& g, const Scheme& scheme, const std::vector<std::string>& nodes,
               std::map<std::string, std::vector<int>>& members_of, uint64_t max_analyses,
               GroupProtection& out) {
  const int n = static_cast<int>(nodes.size());
  // Each component alone guarantees its r when members sit on distinct nodes (the tests check
  // this exhaustively); a combination is at least the best component, and is enumerated above.
  int start = 1;
  if (n == g.m) {
    int bound = std::max({scheme.arc, scheme.aec ? 1 : 0, scheme.rs});
    if (g.total == 0) bound = n;
    if (!g.unique.empty()) bound = std::min(bound, g.m >= 2 ? 1 : 0);
    start = std::min(bound, n) + 1;
  }
  out.node_failures = start - 1;
  for (int f = start; f <= n; ++f) {
    std::vector<int> idx(static_cast<size_t>(f));
    for (int i = 0; i < f; ++i) idx[i] = i;
    do {
      if (out.analyses >= max_analyses) {
        out.exact = false;
        return;
      }
      ++out.analyses;
      std::vector<bool> alive(static_cast<size_t>(g.m), true);
      for (int i : idx) {
        for (int d : members_of[nodes[i]]) alive[d] = false;
      }
      auto a = AnalyzeRecovery(g, scheme, alive);
      if (!a.ok() || !a->recoverable()) {
        for (int i : idx) out.first_fatal.push_back(nodes[i]);
        out.first_fatal_loss = a.ok() ? a->Describe() : a.status().ToString();
        return;
      }
    } while (NextCombination(idx, n));
    out.node_failures = f;
  }
}

}  // namespace

GroupProtection AnalyzeGroupProtection(const GroupPlan& group, const Scheme& scheme,
                                       uint64_t max_analyses) {
  const auto& g = group.geometry;
  GroupProtection out;
  out.pp = group.pp;
  out.tp = group.tp;
  out.members = g.m;
  out.replicated_bytes = g.total;
  for (const auto& r : group.ranks) {
    out.max_rank_bytes = std::max(out.max_rank_bytes, r.total_bytes);
    out.max_rank_redundancy = std::max(out.max_rank_redundancy, r.redundancy_bytes);
  }
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<int>> members_of;
  for (int d = 0; d < g.m; ++d) {
    const auto& n = group.member_nodes[d];
    if (members_of.find(n) == members_of.end()) nodes.push_back(n);
    members_of[n].push_back(d);
  }
  out.nodes = static_cast<int>(nodes.size());
  Enumerate(g, scheme, nodes, members_of, max_analyses, out);
  out.replicated_node_failures = out.node_failures;
  if (!g.unique.empty()) {
    // Unique buffers have one ring copy; say separately what the replicated state survives.
    SgGeometry rep_only = g;
    rep_only.unique.clear();
    GroupProtection r;
    Enumerate(rep_only, scheme, nodes, members_of, max_analyses, r);
    out.replicated_node_failures = r.node_failures;
    out.exact = out.exact && r.exact;
    out.analyses += r.analyses;
  }
  return out;
}

Result<ProtectionReport> PlanProtection(const ShardingInput& input) {
  ProtectionReport rep;
  REFT_ASSIGN_OR_RETURN(rep.sharding, PlanSharding(input));
  rep.node_failures = -1;
  for (const auto& gp : rep.sharding.groups) {
    rep.groups.push_back(AnalyzeGroupProtection(gp, input.scheme));
    const int f = rep.groups.back().node_failures;
    rep.node_failures = rep.node_failures < 0 ? f : std::min(rep.node_failures, f);
  }
  if (rep.node_failures < 0) rep.node_failures = 0;
  return rep;
}

Result<Recommendation> RecommendScheme(const ShardingInput& input, double bandwidth,
                                       double window_s) {
  if (!(bandwidth > 0) || !(window_s > 0)) {
    return Status::InvalidArgument("io: bandwidth and window_s must be > 0");
  }
  REFT_RETURN_NOT_OK(input.layout.Validate());
  const int m = input.layout.dp;
  uint64_t w = 0;
  bool optimizer = false;
  for (int pp = 0; pp < input.layout.pp; ++pp) {
    for (int tp = 0; tp < input.layout.tp; ++tp) {
      uint64_t sg = 0;
      for (const auto& b : input.BuffersOf(pp, tp)) {
        if (b.kind == BufferKind::kReplicated) sg += b.size;
        optimizer |= b.kind == BufferKind::kUnique && b.optimizer;
      }
      w = std::max(w, sg);
    }
  }
  Recommendation rec;
  const double wm = static_cast<double>(w) / m;
  rec.arc_seconds = 2 * wm / bandwidth;
  rec.aec_seconds =
      m >= 2 ? (wm + static_cast<double>(w) / (m * (m - 1.0))) / bandwidth : wm / bandwidth;
  if (m < 2) {
    rec.reason = "dp=1: no sharding-group peer, no in-memory redundancy possible";
  } else if (rec.arc_seconds <= window_s) {
    rec.scheme.arc = 1;
    rec.reason = "ARC(1) fits the window (default, no decode at restore)";
  } else if (rec.aec_seconds <= window_s) {
    rec.scheme.aec = true;
    rec.reason = "ARC(1) does not fit the window, AEC does";
  } else {
    rec.scheme.aec = true;
    rec.reason = "neither fits the window: AEC, and snapshot every " +
                 std::to_string(static_cast<int>(std::ceil(rec.aec_seconds / window_s))) +
                 " iterations";
  }
  if (optimizer && input.layout.zero == 1) rec.scheme.aor = true;
  return rec;
}

}  // namespace reft::protect
