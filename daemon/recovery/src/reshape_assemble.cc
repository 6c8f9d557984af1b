/// \file reshape_assemble.cc
/// \brief AssembleRanges: byte ranges of a committed step's buffers, by name, from wherever
/// they survive.

#include <algorithm>
#include <cstring>
#include <memory>

#include "reft/mapped_memfd.h"
#include "group_assembler.h"
#include "reft/recovery/reshape.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

std::string GroupName(const SavedGroup& g) {
  return "pp" + std::to_string(g.pp) + "-tp" + std::to_string(g.tp);
}

// Copies on this node before those of peers: the same verified bytes, without the network
// (a node that staged part of a layer reads the rest from its own slots).
std::vector<Source> LocalFirst(std::vector<Source> sources) {
  std::stable_partition(sources.begin(), sources.end(),
                        [](const Source& s) { return s.slot != nullptr && s.slot->local; });
  return sources;
}

bool AnyLocal(const std::vector<Source>& sources) {
  return std::any_of(sources.begin(), sources.end(),
                     [](const Source& s) { return s.slot != nullptr && s.slot->local; });
}

// An item reading bytes [lo, hi) of member `dp`'s unique buffer `name` into dst: its own slot
// first, then its ring neighbour's copy (peer or AOR region), each source shifted by `lo`.
FetchItem UniquePart(const ClusterView& view, const StepCatalog& c, const SavedGroup& g, int dp,
                     const std::string& name, uint64_t lo, uint64_t hi, uint8_t* dst) {
  FetchItem it;
  it.what = "bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of unique buffer '" +
            name + "' of saved rank " + GroupName(g) + "-dp" + std::to_string(dp) + " step " +
            std::to_string(c.step);
  it.dst = dst;
  it.size = hi - lo;
  it.sources = LocalFirst(UniqueSources(view, g.meta.meta.ForMember(dp), c.step, dp, name));
  for (auto& s : it.sources) s.region_offset += lo;
  return it;
}

// True when the group's replicated requests lay its canonical vector out exactly: every
// buffer whole, at its canonical offset from one base (then it is assembled in place).
uint8_t* InPlaceBase(const SavedGroup& g, const std::vector<const RangeRequest*>& reqs) {
  if (reqs.size() != g.geometry.buffers.size() || g.geometry.buffers.empty()) return nullptr;
  uint8_t* base = nullptr;
  for (const auto& e : g.geometry.buffers) {
    auto it = std::find_if(reqs.begin(), reqs.end(),
                           [&](const RangeRequest* r) { return r->name == e.name; });
    if (it == reqs.end() || (*it)->begin != 0 || (*it)->end != e.size) return nullptr;
    uint8_t* b = (*it)->dst - e.offset;
    if (base == nullptr) base = b;
    if (b != base) return nullptr;
  }
  return base;
}

uint64_t CanonicalOffset(const SavedGroup& g, const std::string& name) {
  const protect::BufferExtent* e = g.geometry.Extent(name);
  return e != nullptr ? e->offset : 0;  // never null: the catalog lists the group's buffers
}

// Items reading only the canonical bytes the group's replicated requests want, straight from
// the members' shards that hold them (own slot first, then ARC copies). Used when the requests
// cover part of the group (a layer of a stage): the full assembly would read the whole stage.
std::vector<FetchItem> DirectReplicatedItems(const ClusterView& view, const StepCatalog& c,
                                             const SavedGroup& g,
                                             const std::vector<const RangeRequest*>& reqs) {
  const protect::SgGeometry& geo = g.geometry;
  std::vector<FetchItem> items;
  for (const RangeRequest* r : reqs) {
    const uint64_t begin = CanonicalOffset(g, r->name) + r->begin;
    const uint64_t end = begin + (r->end - r->begin);
    for (int d = 0; d < geo.m; ++d) {
      const uint64_t sb = geo.shard_begin[d], se = sb + geo.ShardSize(d);
      const uint64_t a = std::max(begin, sb), e = std::min(end, se);
      if (a >= e) continue;
      FetchItem it;
      it.what = "bytes [" + std::to_string(r->begin + (a - begin)) + ", " +
                std::to_string(r->begin + (e - begin)) + ") of '" + r->name + "' in shard dp" +
                std::to_string(d) + " of " + GroupName(g) + " step " + std::to_string(c.step);
      it.dst = r->dst + (a - begin);
      it.size = e - a;
      it.sources = LocalFirst(ShardSources(view, g.meta.meta, geo, c.step, d));
      for (auto& src : it.sources) src.region_offset += a - sb;
      items.push_back(std::move(it));
    }
  }
  return items;
}

}  // namespace

std::vector<PartOverlap> OverlappingParts(const protect::BufferSpec& spec, int members,
                                          uint64_t begin, uint64_t end) {
  std::vector<PartOverlap> out;
  const uint64_t s = spec.size;
  for (int d = 0; d < members; ++d) {
    const uint64_t pb = static_cast<uint64_t>(d) * s;
    const uint64_t pe = std::min(pb + s, spec.shard_total);
    const uint64_t a = std::max(pb, begin), e = std::min(pe, end);
    if (a < e) out.push_back({d, a - pb, e - pb, a - begin});
  }
  return out;
}

Result<ByteRanges> RangesNotHeldHere(const StepCatalog& catalog, const ClusterView& view,
                                     const std::string& name, int tp) {
  REFT_ASSIGN_OR_RETURN(const SavedBuffer* saved, catalog.Find(name, tp, -1));
  const SavedGroup& g = catalog.groups[saved->group];
  const protect::BufferSpec& spec = saved->spec;
  ByteRanges missing;
  auto add = [&](uint64_t a, uint64_t e) {
    if (!missing.empty() && missing.back().second == a) missing.back().second = e;
    else missing.emplace_back(a, e);
  };
  if (spec.kind == protect::BufferKind::kReplicated) {
    // The buffer's bytes within the group's canonical vector, cut by the members' shards.
    const protect::SgGeometry& geo = g.geometry;
    const uint64_t base = CanonicalOffset(g, name);
    for (int d = 0; d < geo.m; ++d) {
      const uint64_t sb = geo.shard_begin[d], se = sb + geo.ShardSize(d);
      const uint64_t a = std::max(base, sb), e = std::min(base + spec.size, se);
      if (a >= e) continue;
      if (!AnyLocal(ShardSources(view, g.meta.meta, geo, catalog.step, d))) add(a - base, e - base);
    }
  } else if (spec.sharded()) {
    for (const PartOverlap& p : OverlappingParts(spec, catalog.layout.dp, 0, spec.shard_total)) {
      if (!AnyLocal(UniqueSources(view, g.meta.meta.ForMember(p.dp), catalog.step, p.dp, name))) {
        add(p.at, p.at + (p.hi - p.lo));
      }
    }
  } else {
    return Status::InvalidArgument("buffer '" + name + "' is saved per rank: it has no ranges to stage");
  }
  return missing;
}

Status AssembleRanges(const StepCatalog& catalog, const ClusterView& view, Fetcher* fetcher,
                      const std::vector<RangeRequest>& requests, RestoreStats* stats,
                      Clock::time_point deadline, std::string* detail) {
  const size_t n = catalog.groups.size();
  std::vector<std::vector<const RangeRequest*>> replicated(n);
  std::vector<std::vector<FetchItem>> unique(n);
  for (const RangeRequest& r : requests) {
    REFT_ASSIGN_OR_RETURN(const SavedBuffer* saved, catalog.Find(r.name, r.tp, r.pp));
    const SavedGroup& g = catalog.groups[saved->group];
    const protect::BufferSpec& spec = saved->spec;
    const uint64_t limit = spec.sharded() ? spec.shard_total : spec.size;
    if (r.begin > r.end || r.end > limit) {
      return Status::InvalidArgument("bytes [" + std::to_string(r.begin) + ", " +
                                     std::to_string(r.end) + ") of buffer '" + r.name +
                                     "': the saved buffer has " + std::to_string(limit) +
                                     " bytes");
    }
    if (r.begin == r.end) continue;
    if (spec.kind == protect::BufferKind::kReplicated) {
      replicated[saved->group].push_back(&r);
    } else if (!spec.sharded()) {
      if (r.dp < 0 || r.dp >= catalog.layout.dp) {
        return Status::InvalidArgument("unique buffer '" + r.name +
                                       "' is per rank: the request must name the saved dp");
      }
      unique[saved->group].push_back(UniquePart(view, catalog, g, r.dp, r.name, r.begin, r.end,
                                                r.dst));
    } else {
      for (const PartOverlap& p : OverlappingParts(spec, catalog.layout.dp, r.begin, r.end)) {
        unique[saved->group].push_back(
            UniquePart(view, catalog, g, p.dp, r.name, p.lo, p.hi, r.dst + p.at));
      }
    }
  }

  std::vector<FetchItem> loose;  // unique bytes of groups without replicated requests
  std::vector<std::vector<FetchItem>*> ran;
  std::string where;
  for (size_t i = 0; i < n; ++i) {
    const SavedGroup& g = catalog.groups[i];
    if (replicated[i].empty()) {
      for (auto& it : unique[i]) loose.push_back(std::move(it));
      continue;
    }
    uint8_t* base = InPlaceBase(g, replicated[i]);
    if (base == nullptr) {
      // Part of the group: read just those bytes while every one has a readable copy; else
      // (a shard only a decode can give back) the whole group is assembled below.
      std::vector<FetchItem> direct = DirectReplicatedItems(view, catalog, g, replicated[i]);
      const auto t0 = Clock::now();
      (void)fetcher->Run(&direct, deadline);  // results per item
      if (stats != nullptr) stats->fetch += Clock::now() - t0;
      if (std::all_of(direct.begin(), direct.end(), [](const FetchItem& it) { return it.status.ok(); })) {
        where += (where.empty() ? "" : "; ") +
                 ("group " + GroupName(g) + ": " + std::to_string(direct.size()) + " shard range(s) read");
        for (auto& it : unique[i]) loose.push_back(std::move(it));
        continue;
      }
    }
    MappedMemfd scratch;
    if (base == nullptr) {
      REFT_ASSIGN_OR_RETURN(scratch, MappedMemfd::Create("reft-reshape " + GroupName(g),
                                                         g.geometry.total));
      base = scratch.data();
    }
    REFT_ASSIGN_OR_RETURN(GroupOutcome outcome,
                          AssembleGroup(view, g.meta.meta, catalog.step, base, fetcher,
                                        &unique[i], stats, deadline));
    where += (where.empty() ? "" : "; ") + ("group " + GroupName(g) + ": " + DescribeGroup(outcome));
    if (scratch.data() != nullptr) {
      for (const RangeRequest* r : replicated[i]) {
        std::memcpy(r->dst, base + CanonicalOffset(g, r->name) + r->begin, r->end - r->begin);
      }
    }
    ran.push_back(&unique[i]);
  }
  if (!loose.empty()) {
    (void)fetcher->Run(&loose, deadline);  // results per item
    ran.push_back(&loose);
  }
  uint64_t parts = 0;
  for (auto* items : ran) {
    for (const FetchItem& it : *items) {
      if (!it.status.ok()) return UniqueLoss(it);
      ++parts;
    }
  }
  if (parts > 0) where += (where.empty() ? "" : "; ") + std::to_string(parts) + " unique part(s)";
  if (detail != nullptr) *detail = where;
  return Status::OK();
}

}  // namespace reft::recovery
