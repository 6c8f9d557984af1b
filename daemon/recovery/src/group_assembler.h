#pragma once
/// \file group_assembler.h
/// \brief The replicated bytes of one sharding group at one step, assembled from wherever they
/// survive (REFT-load steps ❶–❸, docs/recovery.md): every member's shard from its own slot (this
/// node's store first, then peers), else from an ARC copy; the shards nobody holds any more
/// rebuilt from replicas, AEC parity or RS (protect::RebuildShards).
///
/// Source selection for member j's shard: every located slot of rank j ("rep/shard", this node
/// first), then for o = 1..arc every slot of rank j−o ("rep/arc+o"). When all of them fail for
/// some piece (checksum, holder dead or hung, slot gone), member j counts as lost. When a region
/// a rebuild needs fails on member k, k counts as lost too (its slot cannot be trusted or its
/// node is gone). After each such change the recovery analysis runs again with the new dead set,
/// until nothing changes (a fixed point) or the analysis says bytes are lost.

#include <chrono>
#include <string>
#include <vector>

#include "reft/protect/rebuild_analysis.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"

namespace reft::recovery {

/// \brief Rank of member `dp` of the SG `meta` belongs to.
store::RankKey MemberRank(const protect::SlotMeta& meta, int dp);

/// \brief Sources of member `d`'s shard, in order: its own slots, then its ARC holders' copies.
std::vector<Source> ShardSources(const ClusterView& view, const protect::SlotMeta& meta,
                                 const protect::SgGeometry& geometry, int64_t step, int d);

/// \brief Sources of rank `dp`'s unique buffer `name`: its own slots ("unique/<name>"), then
/// rank dp−1's peer copy ("peer/<name>") or AOR replica ("aor/<name>").
std::vector<Source> UniqueSources(const ClusterView& view, const protect::SlotMeta& meta,
                                  int64_t step, int dp, const std::string& name);

/// \brief Sources of region `region` of member `member`'s slots that have exactly `size` bytes.
std::vector<Source> RegionSources(const ClusterView& view, const protect::SlotMeta& meta,
                                  int64_t step, int member, const std::string& region,
                                  uint64_t size, ByteKind kind);

/// \brief How member shards are (or would be) obtained, for details and restore-check.
struct GroupOutcome {
  std::vector<bool> alive;                 ///< members whose slot served (final dead set)
  std::vector<std::string> member_source;  ///< per dp: "rep/shard of ... on ...", "rebuilt by ..."
  protect::RecoveryAnalysis analysis;      ///< analysis of the final dead set
};

/// \brief Describes how the analysis rebuilds member `d` ("copied from rep/arc+1 of dp0",
/// "rebuilt by AEC XOR", "rebuilt by RS", or a mix).
std::string DescribeRebuild(const protect::SgGeometry& geometry, const protect::Scheme& scheme,
                            const protect::RecoveryAnalysis& analysis, int d);

/// \brief Assembles the SG's canonical replicated vector (geometry.total bytes) into
/// `canonical`. `meta`: any member's snapshot meta of the SG. `extra` (optional): further items
/// fetched in the first round alongside the shards (the restoring rank's unique buffers); their
/// results are left in place for the caller. Lost naming exactly what is lost (Describe()) when
/// the surviving slots cannot rebuild it; Timeout past `deadline`.
Result<GroupOutcome> AssembleGroup(const ClusterView& view, const protect::SlotMeta& meta,
                                   int64_t step, uint8_t* canonical, Fetcher* fetcher,
                                   std::vector<FetchItem>* extra, RestoreStats* stats,
                                   std::chrono::steady_clock::time_point deadline);

/// \brief The plan AssembleGroup would start from, without reading any bytes: members with a
/// located slot count as alive. Used by restore-check.
Result<GroupOutcome> PlanGroup(const ClusterView& view, const protect::SlotMeta& meta,
                               int64_t step);

/// \brief "dp0 <source>; dp1 <source>; ..." of every member.
std::string DescribeGroup(const GroupOutcome& g);

/// \brief Status of a failed item of unique bytes: Timeout stays Timeout, and Corrupted (every
/// copy failed its checksum: reported as such, never loaded) stays Corrupted; anything else
/// means no copy of the bytes could be read anywhere (Lost).
Status UniqueLoss(const FetchItem& item);

/// \brief " [lost members: dp1: <why>; dp2: <why>]" for the members not `alive` (empty when
/// every member is alive); `why[d]` defaults to "no live node holds its slot".
std::string LostMembersNote(const std::vector<bool>& alive,
                            const std::vector<std::string>& why = {});

}  // namespace reft::recovery
