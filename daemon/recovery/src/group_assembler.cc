/// \file group_assembler.cc
/// \brief One SG's replicated bytes at one step: fetch what survives, rebuild what does not,
/// re-analysing whenever a source fails (fixed point).

#include "group_assembler.h"

#include <cstring>
#include <map>
#include <set>

#include "reft/protect/codec.h"
#include "reft/protect/sharding.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNoSlot = "no live node holds its slot";

std::string Join(const std::set<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::string SgName(const protect::SlotMeta& meta) {
  return "SG pp" + std::to_string(meta.coord.pp) + "-tp" + std::to_string(meta.coord.tp);
}

// Size of `region` in member `dp`'s slot layout (0 when the plan has no such region).
Result<uint64_t> PlannedRegionSize(const protect::SlotMeta& meta, int dp,
                                   const std::string& region) {
  REFT_ASSIGN_OR_RETURN(protect::RankPlan plan, meta.ForMember(dp).Plan());
  for (const auto& r : plan.regions) {
    if (r.name == region) return r.size;
  }
  return Status::Internal("member dp" + std::to_string(dp) + " has no region '" + region + "'");
}

// True when every member without a slot has a shard-sized ARC copy of its shard on a live
// node (ShardSources lists only copies for such a member).
bool DeadShardsHaveCopies(const ClusterView& view, const protect::SlotMeta& meta,
                          const protect::SgGeometry& g, int64_t step,
                          const std::vector<bool>& alive) {
  for (int d = 0; d < g.m; ++d) {
    if (!alive[d] && g.ShardSize(d) > 0 && ShardSources(view, meta, g, step, d).empty()) {
      return false;
    }
  }
  return true;
}

}  // namespace

store::RankKey MemberRank(const protect::SlotMeta& meta, int dp) {
  return store::RankKey{meta.job, meta.coord.pp, meta.coord.tp, dp};
}

std::vector<Source> ShardSources(const ClusterView& view, const protect::SlotMeta& meta,
                                 const protect::SgGeometry& g, int64_t step, int d) {
  std::vector<Source> out;
  for (const SlotEntry* s : view.Find(MemberRank(meta, d), step)) {
    const RegionEntry* r = s->Region(protect::kRegionShard);
    if (r != nullptr && r->size == g.ShardSize(d)) {
      out.push_back({s, protect::kRegionShard, 0, ByteKind::kShard});
    }
  }
  for (int o = 1; o <= meta.scheme.arc && o < g.m; ++o) {
    const int holder = (d - o + g.m) % g.m;
    const std::string region = protect::ArcRegionName(o);
    for (const SlotEntry* s : view.Find(MemberRank(meta, holder), step)) {
      const RegionEntry* r = s->Region(region);
      if (r != nullptr && r->size == g.ShardSize(d)) {
        out.push_back({s, region, 0, ByteKind::kReplica});
      }
    }
  }
  return out;
}

std::vector<Source> UniqueSources(const ClusterView& view, const protect::SlotMeta& meta,
                                  int64_t step, int dp, const std::string& name) {
  std::vector<Source> out;
  for (const SlotEntry* s : view.Find(MemberRank(meta, dp), step)) {
    if (s->Region(protect::UniqueRegionName(name)) != nullptr) {
      out.push_back({s, protect::UniqueRegionName(name), 0, ByteKind::kUnique});
    }
  }
  const int m = meta.layout.dp;
  if (m >= 2) {
    const int holder = (dp - 1 + m) % m;
    for (const SlotEntry* s : view.Find(MemberRank(meta, holder), step)) {
      for (const std::string& region :
           {protect::PeerRegionName(name), protect::AorRegionName(name)}) {
        if (s->Region(region) != nullptr) out.push_back({s, region, 0, ByteKind::kReplica});
      }
    }
  }
  return out;
}

std::vector<Source> RegionSources(const ClusterView& view, const protect::SlotMeta& meta,
                                  int64_t step, int member, const std::string& region,
                                  uint64_t size, ByteKind kind) {
  std::vector<Source> out;
  for (const SlotEntry* s : view.Find(MemberRank(meta, member), step)) {
    const RegionEntry* r = s->Region(region);
    if (r != nullptr && r->size == size) out.push_back({s, region, 0, kind});
  }
  return out;
}

std::string DescribeRebuild(const protect::SgGeometry& g, const protect::Scheme& scheme,
                            const protect::RecoveryAnalysis& analysis, int d) {
  std::set<std::string> how;
  for (const auto& op : analysis.ops) {
    switch (op.kind) {
      case protect::RecoveryOp::Kind::kCopy:
        if (op.target == d) how.insert(op.region + " of dp" + std::to_string(op.holder));
        break;
      case protect::RecoveryOp::Kind::kXor:
        if (op.target == d) how.insert("AEC parity of dp" + std::to_string(op.holder));
        break;
      case protect::RecoveryOp::Kind::kRs: {
        const int k = g.m - scheme.rs;
        for (int pos : op.erased) {
          if (pos < k && protect::RsDataShard(g.m, scheme.rs, op.stripe, pos) == d) {
            how.insert("RS(" + std::to_string(scheme.rs) + ") stripes");
          }
        }
        break;
      }
    }
  }
  if (how.empty()) return "zero padding only";
  return "rebuilt from " + Join(how);
}

Result<GroupOutcome> PlanGroup(const ClusterView& view, const protect::SlotMeta& meta,
                               int64_t step) {
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, meta.Geometry());
  GroupOutcome out;
  out.alive.assign(static_cast<size_t>(g.m), false);
  out.member_source.assign(static_cast<size_t>(g.m), "");
  for (int d = 0; d < g.m; ++d) {
    auto src = ShardSources(view, meta, g, step, d);
    out.alive[d] = !src.empty() && src.front().kind == ByteKind::kShard;
    if (out.alive[d]) out.member_source[d] = src.front().Label();
  }
  REFT_ASSIGN_OR_RETURN(out.analysis, protect::AnalyzeRecovery(g, meta.scheme, out.alive));
  for (int d = 0; d < g.m; ++d) {
    if (out.alive[d]) continue;
    bool lost = false;
    for (const auto& l : out.analysis.lost) lost |= l.shard == d;
    out.member_source[d] = lost ? "lost" : DescribeRebuild(g, meta.scheme, out.analysis, d);
  }
  return out;
}

std::string LostMembersNote(const std::vector<bool>& alive, const std::vector<std::string>& why) {
  std::string dead;
  for (size_t d = 0; d < alive.size(); ++d) {
    if (alive[d]) continue;
    const std::string reason =
        d < why.size() && !why[d].empty() ? why[d] : std::string(kNoSlot);
    dead += (dead.empty() ? "" : "; ") + ("dp" + std::to_string(d) + ": " + reason);
  }
  return dead.empty() ? "" : " [lost members: " + dead + "]";
}

namespace {

// The state AssembleGroup's rounds change.
struct RoundState {
  std::vector<bool>* have;                 // per member: its shard is in the canonical vector
  std::vector<std::string>* why_dead;      // per member: why it is treated as lost
  bool* copy_dead;                         // dead members' shards are still taken from copies
  std::map<protect::RegionRef, std::vector<uint8_t>>* fetched;  // redundancy regions kept
  GroupOutcome* out;
};

// Applies one round of fetches: shards held, members found dead, regions kept. False when
// nothing changed (the group is assembled or decodable as it is).
bool ApplyRound(std::vector<FetchItem>* items, const std::vector<int>& shard_of,
                const std::vector<protect::RegionRef>& region_of,
                std::map<protect::RegionRef, std::vector<uint8_t>>* pending, RoundState* round,
                RestoreStats* stats) {
  std::vector<bool>* have = round->have;
  std::vector<std::string>* why_dead = round->why_dead;
  bool* copy_dead = round->copy_dead;
  auto* fetched = round->fetched;
  GroupOutcome* out = round->out;
  bool changed = false;
  for (size_t i = 0; i < items->size(); ++i) {
    const int d = shard_of[i];
    if (d >= 0 && !out->alive[d]) {  // a dead member's ARC copy
      if ((*items)[i].status.ok()) {
        (*have)[d] = true;
        out->member_source[d] = "rebuilt from " + Join((*items)[i].served);
        if (stats != nullptr) stats->bytes_rebuilt += (*items)[i].size;
      } else {
        *copy_dead = false;
        changed = true;
      }
      continue;
    }
    if (d >= 0) {
      if ((*items)[i].status.ok()) {
        (*have)[d] = true;
        out->member_source[d] = (*items)[i].ServedBy();
      } else {
        out->alive[d] = false;
        (*why_dead)[d] = (*items)[i].status.message();
        changed = true;
      }
      continue;
    }
    const auto& ref = region_of[i];
    if ((*items)[i].status.ok()) {
      (*fetched)[ref] = std::move((*pending)[ref]);
    } else if (out->alive[ref.member]) {
      out->alive[ref.member] = false;
      (*why_dead)[ref.member] = (*items)[i].status.message();
      changed = true;
    }
  }
  return changed;
}

// Decodes the shards of the dead members of `sg` from what the survivors served, in place.
Status DecodeDead(const protect::SgGeometry& g, const protect::SlotMeta& meta,
                  const std::string& sg, uint8_t* canonical,
                  const std::map<protect::RegionRef, std::vector<uint8_t>>& fetched,
                  const std::vector<bool>& have, GroupOutcome* out, RestoreStats* stats) {
  const int m = g.m;
  bool any_dead = false;
  for (int d = 0; d < m; ++d) any_dead |= !out->alive[d] && !have[d];
  if (!any_dead) return Status::OK();
  const auto t0 = Clock::now();
  std::vector<protect::MemberRegions> regions(static_cast<size_t>(m));
  std::vector<const protect::MemberRegions*> members(static_cast<size_t>(m), nullptr);
  for (int d = 0; d < m; ++d) {
    if (!out->alive[d]) continue;
    regions[d][protect::kRegionShard] = {canonical + g.shard_begin[d], g.ShardSize(d)};
    members[d] = &regions[d];
  }
  for (const auto& [ref, buf] : fetched) {
    if (out->alive[ref.member]) regions[ref.member][ref.region] = {buf.data(), buf.size()};
  }
  // In place: survivors' shards are read where they lie, dead ones written into their places.
  Status rebuilt = protect::RebuildShardsInto(g, meta.scheme, members, canonical);
  if (!rebuilt.ok()) return rebuilt.WithContext(sg);
  for (int d = 0; d < m; ++d) {
    if (out->alive[d] || have[d]) continue;
    out->member_source[d] = DescribeRebuild(g, meta.scheme, out->analysis, d);
    if (stats != nullptr) stats->bytes_rebuilt += g.ShardSize(d);
  }
  if (stats != nullptr) stats->decode += Clock::now() - t0;
  return Status::OK();
}

}  // namespace

Result<GroupOutcome> AssembleGroup(const ClusterView& view, const protect::SlotMeta& meta,
                                   int64_t step, uint8_t* canonical, Fetcher* fetcher,
                                   std::vector<FetchItem>* extra, RestoreStats* stats,
                                   Clock::time_point deadline) {
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, meta.Geometry());
  const int m = g.m;
  const std::string sg = SgName(meta) + " step " + std::to_string(step);
  GroupOutcome out;
  out.alive.assign(static_cast<size_t>(m), false);
  out.member_source.assign(static_cast<size_t>(m), "");
  std::vector<std::string> why_dead(static_cast<size_t>(m));
  for (int d = 0; d < m; ++d) {
    out.alive[d] = !view.Find(MemberRank(meta, d), step).empty();
    if (!out.alive[d]) why_dead[d] = kNoSlot;
  }
  std::vector<bool> have(static_cast<size_t>(m), false);
  std::map<protect::RegionRef, std::vector<uint8_t>> fetched;  // redundancy regions
  bool extra_pending = extra != nullptr && !extra->empty();
  // While every dead member's shard has an ARC copy somewhere, those copies are fetched straight
  // into the canonical vector like live shards (one copy, hashed once, nothing decoded). The
  // first copy that fails turns this off, and the dead shards are decoded as usual.
  bool copy_dead = true;

  while (true) {
    REFT_ASSIGN_OR_RETURN(out.analysis, protect::AnalyzeRecovery(g, meta.scheme, out.alive));
    if (!out.analysis.lost.empty()) {
      protect::RecoveryAnalysis shards_only = out.analysis;
      shards_only.lost_unique.clear();
      return Status::Lost(sg + " (" + meta.scheme.ToString() + ") cannot be rebuilt: " +
                          shards_only.Describe() + LostMembersNote(out.alive, why_dead));
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout(sg + ": the restore deadline passed while assembling");
    }
    // This round's items: shards of live members not fetched yet, regions the rebuild reads.
    std::vector<FetchItem> items;
    std::vector<int> shard_of;                  // per item: member, or -1
    std::vector<protect::RegionRef> region_of;  // per item: redundancy region, when shard_of < 0
    if (copy_dead) copy_dead = DeadShardsHaveCopies(view, meta, g, step, out.alive);
    for (int d = 0; d < m; ++d) {
      if (!(out.alive[d] || copy_dead) || have[d]) continue;
      if (g.ShardSize(d) == 0) {
        have[d] = true;
        continue;
      }
      FetchItem it;
      it.what = "shard dp" + std::to_string(d) + " of " + sg;
      it.dst = canonical + g.shard_begin[d];
      it.size = g.ShardSize(d);
      it.sources = ShardSources(view, meta, g, step, d);
      items.push_back(std::move(it));
      shard_of.push_back(d);
      region_of.emplace_back();
    }
    std::map<protect::RegionRef, std::vector<uint8_t>> pending;
    const auto required = copy_dead ? std::vector<protect::RegionRef>{}
                                    : protect::RequiredRegions(g, meta.scheme, out.alive,
                                                               out.analysis);
    for (const auto& ref : required) {
      if (ref.region == protect::kRegionShard || fetched.count(ref)) continue;
      REFT_ASSIGN_OR_RETURN(uint64_t size, PlannedRegionSize(meta, ref.member, ref.region));
      auto& buf = pending[ref];
      buf.resize(size);
      FetchItem it;
      it.what = ref.region + " of dp" + std::to_string(ref.member) + " of " + sg;
      it.dst = buf.data();
      it.size = size;
      const ByteKind kind =
          ref.region.rfind("rep/arc+", 0) == 0 ? ByteKind::kReplica : ByteKind::kParity;
      it.sources = RegionSources(view, meta, step, ref.member, ref.region, size, kind);
      items.push_back(std::move(it));
      shard_of.push_back(-1);
      region_of.push_back(ref);
    }
    const size_t own_items = items.size();
    if (extra_pending) {
      for (auto& e : *extra) items.push_back(std::move(e));
    }
    if (items.empty()) break;

    const auto t0 = Clock::now();
    (void)fetcher->Run(&items, deadline);  // results per item
    if (stats != nullptr) stats->fetch += Clock::now() - t0;

    if (extra_pending) {
      for (size_t i = 0; i < extra->size(); ++i) (*extra)[i] = std::move(items[own_items + i]);
      items.resize(own_items);
      extra_pending = false;
    }
    RoundState round{&have, &why_dead, &copy_dead, &fetched, &out};
    if (!ApplyRound(&items, shard_of, region_of, &pending, &round, stats)) break;
  }
  for (int d = 0; d < m; ++d) {
    if (!out.alive[d] && stats != nullptr && why_dead[d] != kNoSlot) {
      stats->warnings.push_back("dp" + std::to_string(d) + " of " + sg +
                                " treated as lost: " + why_dead[d]);
    }
  }

  // Decode the shards of the dead members from what the survivors served.
  REFT_RETURN_NOT_OK(DecodeDead(g, meta, sg, canonical, fetched, have, &out, stats));
  return out;
}

std::string DescribeGroup(const GroupOutcome& g) {
  std::string out;
  for (size_t d = 0; d < g.member_source.size(); ++d) {
    out += (out.empty() ? "" : "; ") + ("dp" + std::to_string(d) + " " + g.member_source[d]);
  }
  return out;
}

Status UniqueLoss(const FetchItem& item) {
  const StatusCode code = item.status.code();
  if (code == StatusCode::kTimeout || code == StatusCode::kCorrupted) return item.status;
  return Status::Lost(item.status.message());
}

}  // namespace reft::recovery
