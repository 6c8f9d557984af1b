/// \file sharding.cc
/// \brief Global parameter sharding and slot layouts (docs/protection.md "Sharding": the SG is
/// per (pp, tp), not per node, because TP slices differ inside a node).

#include "reft/protect/sharding.h"

#include <algorithm>
#include <map>
#include <set>

namespace reft::protect {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

Status ValidateBuffers(const std::vector<BufferSpec>& buffers) {
  std::set<std::string> names;
  for (const auto& b : buffers) {
    if (b.name.empty()) return Status::InvalidArgument("buffer with empty name");
    if (b.name.size() > kMaxBufferName) {
      return Status::InvalidArgument("buffer name '" + b.name + "' longer than " +
                                     std::to_string(kMaxBufferName) + " bytes");
    }
    if (!names.insert(b.name).second)
      return Status::InvalidArgument("buffer '" + b.name + "' registered twice");
    auto es = DtypeSize(b.dtype);
    if (!es.ok()) return es.status().WithContext("buffer '" + b.name + "'");
    if (b.size % static_cast<uint64_t>(*es) != 0) {
      return Status::InvalidArgument("buffer '" + b.name + "': size " + std::to_string(b.size) +
                                     " is not a multiple of its " + b.dtype + " element size");
    }
  }
  return Status::OK();
}

}  // namespace

std::string ArcRegionName(int offset) { return "rep/arc+" + std::to_string(offset); }
std::string UniqueRegionName(const std::string& b) { return "unique/" + b; }
std::string PeerRegionName(const std::string& b) { return "peer/" + b; }
std::string AorRegionName(const std::string& b) { return "aor/" + b; }

bool HasAorRegion(const JobLayout& layout, const Scheme& scheme, const BufferSpec& b) {
  return scheme.aor && b.optimizer && b.kind == BufferKind::kUnique && layout.zero == 1 &&
         layout.dp >= 2;
}

const BufferExtent* SgGeometry::Extent(const std::string& name) const {
  auto it = std::find_if(buffers.begin(), buffers.end(),
                         [&](const BufferExtent& e) { return e.name == name; });
  return it == buffers.end() ? nullptr : &*it;
}

uint64_t SgGeometry::PaddedShard() const {
  uint64_t p = shard_max;
  if (m >= 2) p = std::max(p, aec_sub * static_cast<uint64_t>(m - 1));
  if (rs_r > 0) p = std::max(p, rs_sub * static_cast<uint64_t>(m - rs_r));
  return p;
}

std::string SgGeometry::DescribeRange(uint64_t begin, uint64_t end) const {
  std::string out;
  for (const auto& b : buffers) {
    const uint64_t lo = std::max(begin, b.offset);
    const uint64_t hi = std::min(end, b.offset + b.size);
    if (lo >= hi) continue;
    if (!out.empty()) out += ", ";
    out += b.name + "[" + std::to_string(lo - b.offset) + "," + std::to_string(hi - b.offset) + ")";
  }
  return out;
}

Result<SgGeometry> BuildGeometry(int m, const std::vector<BufferSpec>& buffers, uint64_t chunk,
                                 const Scheme& scheme) {
  if (m < 1)
    return Status::InvalidArgument("sharding group size must be >= 1, got " + std::to_string(m));
  if (chunk == 0) return Status::InvalidArgument("chunk must be > 0");
  REFT_RETURN_NOT_OK(ValidateBuffers(buffers));
  REFT_RETURN_NOT_OK(scheme.CheckFits(m));  // refused at hello already; a guard for other callers
  SgGeometry g;
  g.m = m;
  g.chunk = chunk;
  std::vector<const BufferSpec*> rep;
  for (const auto& b : buffers) {
    if (b.kind == BufferKind::kReplicated) {
      rep.push_back(&b);
    } else {
      g.unique.push_back(b.name);
    }
  }
  // Canonical order: sorted by name, so every member flattens identically whatever the
  // registration order.
  std::sort(rep.begin(), rep.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::sort(g.unique.begin(), g.unique.end());
  for (const auto* b : rep) {
    g.buffers.push_back({b->name, g.total, b->size});
    g.total += b->size;
  }
  const uint64_t nchunks = CeilDiv(g.total, chunk);
  g.shard_begin.resize(static_cast<size_t>(m) + 1);
  for (int d = 0; d <= m; ++d) {
    g.shard_begin[d] = std::min(g.total, (nchunks * static_cast<uint64_t>(d) / m) * chunk);
  }
  for (int d = 0; d < m; ++d) g.shard_max = std::max(g.shard_max, g.ShardSize(d));
  if (m >= 2) g.aec_sub = CeilDiv(g.shard_max, static_cast<uint64_t>(m - 1));
  if (scheme.rs > 0) {
    g.rs_r = scheme.rs;
    g.rs_sub = CeilDiv(g.shard_max, static_cast<uint64_t>(m - scheme.rs));
  }
  return g;
}

const std::vector<BufferSpec>& ShardingInput::BuffersOf(int pp, int tp) const {
  for (const auto& gb : group_buffers) {
    if (gb.pp == pp && gb.tp == tp) return gb.buffers;
  }
  return buffers;
}

namespace {

std::string NodeOf(const JobLayout& layout, const std::vector<std::string>& placement,
                   const RankCoord& c) {
  const int64_t g = layout.GlobalRank(c);
  if (placement.empty()) return "rank" + std::to_string(g);
  return placement[static_cast<size_t>(g)];
}

RankPlan MakeRankPlan(const JobLayout& layout, const std::vector<std::string>& placement,
                      const Scheme& scheme, const RankCoord& coord, const SgGeometry& g,
                      const std::vector<BufferSpec>& buffers) {
  RankPlan p;
  p.coord = coord;
  p.node = NodeOf(layout, placement, coord);
  const int d = coord.dp;
  const int m = g.m;
  p.shard_begin = g.shard_begin[d];
  p.shard_end = g.shard_begin[d + 1];
  for (const auto& b : g.buffers) {
    const uint64_t lo = std::max(p.shard_begin, b.offset);
    const uint64_t hi = std::min(p.shard_end, b.offset + b.size);
    if (lo < hi) p.pieces.push_back({b.name, lo - b.offset, lo - p.shard_begin, hi - lo});
  }
  p.regions.push_back({kRegionShard, g.ShardSize(d)});
  for (int o = 1; o <= scheme.arc; ++o)
    p.regions.push_back({ArcRegionName(o), g.ShardSize((d + o) % m)});
  if (scheme.aec) p.regions.push_back({kRegionAec, g.aec_sub});
  if (scheme.rs > 0) p.regions.push_back({kRegionRs, g.rs_sub * static_cast<uint64_t>(scheme.rs)});
  std::map<std::string, const BufferSpec*> uniq;
  for (const auto& b : buffers) {
    if (b.kind == BufferKind::kUnique) uniq[b.name] = &b;
  }
  uint64_t own = g.ShardSize(d);
  for (const auto& [name, b] : uniq) {
    p.regions.push_back({UniqueRegionName(name), b->size});
    own += b->size;
  }
  if (m >= 2) {
    // The neighbour's unique buffer of the same name has the same size (ZeRO-1 partitions are
    // equal; RNG/counters are fixed-size); the daemon checks it when the neighbour registers.
    for (const auto& [name, b] : uniq) {
      const bool aor = HasAorRegion(layout, scheme, *b);
      p.regions.push_back({aor ? AorRegionName(name) : PeerRegionName(name), b->size});
    }
  }
  for (const auto& r : p.regions) p.total_bytes += r.size;
  p.redundancy_bytes = p.total_bytes - own;
  return p;
}

Status CheckZero(const JobLayout& layout, const std::vector<BufferSpec>& buffers) {
  if (layout.zero < 3) return Status::OK();
  for (const auto& b : buffers) {
    if (b.kind == BufferKind::kReplicated) {
      return Status::InvalidArgument("buffer '" + b.name +
                                     "' is replicated but ZeRO stage 3 partitions parameters; "
                                     "register it as unique");
    }
  }
  return Status::OK();
}

}  // namespace

Result<RankPlan> ComputeRankPlan(const JobLayout& layout, const Scheme& scheme, const RankCoord& coord,
                                 const std::vector<BufferSpec>& buffers, uint64_t chunk) {
  REFT_RETURN_NOT_OK(layout.CheckRank(coord));
  REFT_RETURN_NOT_OK(CheckZero(layout, buffers));
  for (const auto& b : buffers) REFT_RETURN_NOT_OK(CheckShard(b, coord.dp, layout.dp));
  REFT_ASSIGN_OR_RETURN(auto g, BuildGeometry(layout.dp, buffers, chunk, scheme));
  return MakeRankPlan(layout, {}, scheme, coord, g, buffers);
}

Status ShardingInput::CheckLayout() const {
  REFT_RETURN_NOT_OK(layout.Validate());
  if (!placement.empty() && static_cast<int64_t>(placement.size()) != layout.world()) {
    return Status::InvalidArgument("layout: nodes has " + std::to_string(placement.size()) +
                                   " entries, expected dp*tp*pp = " +
                                   std::to_string(layout.world()));
  }
  return Status::OK();
}

Result<ShardingPlan> PlanSharding(const ShardingInput& in) {
  REFT_RETURN_NOT_OK(in.CheckLayout());
  for (const auto& gb : in.group_buffers) {
    if (gb.pp < 0 || gb.pp >= in.layout.pp || gb.tp < 0 || gb.tp >= in.layout.tp) {
      return Status::InvalidArgument("group_buffers entry pp=" + std::to_string(gb.pp) +
                                     " tp=" + std::to_string(gb.tp) + " is outside the layout");
    }
  }
  ShardingPlan out;
  for (int pp = 0; pp < in.layout.pp; ++pp) {
    for (int tp = 0; tp < in.layout.tp; ++tp) {
      const auto& bufs = in.BuffersOf(pp, tp);
      REFT_RETURN_NOT_OK(CheckZero(in.layout, bufs));
      GroupPlan gp;
      gp.pp = pp;
      gp.tp = tp;
      auto g = BuildGeometry(in.layout.dp, bufs, in.chunk, in.scheme);
      if (!g.ok())
        return g.status().WithContext("SG pp" + std::to_string(pp) + "-tp" + std::to_string(tp));
      gp.geometry = std::move(*g);
      std::map<std::string, std::vector<int>> by_node;
      for (int d = 0; d < in.layout.dp; ++d) {
        RankCoord c{pp, tp, d};
        gp.ranks.push_back(MakeRankPlan(in.layout, in.placement, in.scheme, c, gp.geometry, bufs));
        gp.member_nodes.push_back(gp.ranks.back().node);
        by_node[gp.member_nodes.back()].push_back(d);
      }
      for (const auto& [node, members] : by_node) {
        if (members.size() < 2) continue;
        std::string msg = "SG pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + ": members";
        for (int d : members) msg += " dp" + std::to_string(d);
        msg += " share node '" + node + "'; one node failure takes all of them";
        if (in.strict_placement) return Status::InvalidArgument(msg);
        out.warnings.push_back(msg);
      }
      out.groups.push_back(std::move(gp));
    }
  }
  return out;
}

}  // namespace reft::protect
