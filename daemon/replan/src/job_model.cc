#include "reft/replan/job_model.h"

#include <algorithm>
#include <map>
#include <set>

namespace reft::replan {

namespace {

uint64_t Overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) {
  const uint64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
  return hi > lo ? hi - lo : 0;
}

// What each rank's slot holds of each layer. REFT shards a group's replicated bytes (its
// buffers laid end to end) over its dp members in contiguous ranges, and member d keeps ARC
// copies of the shards of members d+1..d+arc: a member holds some layers whole and others not
// at all. A partitioned buffer's part p is kept by member p and, when the job is protected,
// copied to member p-1 (the ring); a per-rank buffer likewise. Parity (AEC, RS) is no readable
// copy.
std::vector<std::vector<uint64_t>> HeldBytes(const recovery::StepCatalog& catalog,
                                             const planner::online::JobModelView& m) {
  const size_t L = m.layers.empty() ? 0 : static_cast<size_t>(m.layers.back().layer) + 1;
  std::vector<std::vector<uint64_t>> held(m.ranks.size(), std::vector<uint64_t>(L, 0));
  auto rank_index = [&](int pp, int tp, int dp) { return (static_cast<size_t>(pp) * m.tp + tp) * m.dp + dp; };
  for (const auto& [name, saved] : catalog.buffers) {
    for (const recovery::SavedBuffer& b : saved) {
      const protect::BufferSpec& spec = b.spec;
      if (spec.layer < 0 || static_cast<size_t>(spec.layer) >= L) continue;
      const recovery::SavedGroup& g = catalog.groups[b.group];
      const protect::SgGeometry& geo = g.geometry;
      const int members = std::max(1, geo.m);
      const int arc = g.meta.meta.scheme.arc;
      for (int d = 0; d < members && d < m.dp; ++d) {
        uint64_t bytes = 0;
        if (spec.kind == protect::BufferKind::kReplicated) {
          const protect::BufferExtent* extent = geo.Extent(name);
          if (extent == nullptr || geo.shard_begin.size() < static_cast<size_t>(members) + 1) continue;
          for (int o = 0; o <= arc && o < members; ++o) {
            const int s = (d + o) % members;
            bytes += Overlap(extent->offset, extent->offset + spec.size, geo.shard_begin[s],
                             geo.shard_begin[s + 1]);
          }
        } else {
          const uint64_t total = spec.sharded() ? spec.shard_total : spec.size * static_cast<uint64_t>(members);
          const int kept = g.meta.meta.scheme.empty() ? 1 : 2;  // its own, and the ring copy
          for (int o = 0; o < kept && o < members; ++o) {
            const uint64_t p = static_cast<uint64_t>((d + o) % members);
            bytes += Overlap(p * spec.size, (p + 1) * spec.size, 0, total);
          }
        }
        auto& cell = held[rank_index(g.pp, g.tp, d)][static_cast<size_t>(spec.layer)];
        cell += bytes;
      }
    }
  }
  // A layer counts once per rank, however many stages saved a tied buffer of it.
  for (size_t r = 0; r < held.size(); ++r)
    for (const auto& l : m.layers) held[r][l.layer] = std::min(held[r][l.layer], l.bytes());
  return held;
}

}  // namespace

planner::online::JobModelView BuildJobModel(const recovery::StepCatalog& catalog,
                                            const RankNodeLookup& node_of,
                                            std::optional<StepCadence::Estimate> step_time) {
  planner::online::JobModelView m;
  m.job = catalog.job;
  m.step = catalog.step;
  m.dp = catalog.layout.dp;
  m.tp = catalog.layout.tp;
  m.pp = catalog.layout.pp;
  for (int pp = 0; pp < m.pp; ++pp)
    for (int tp = 0; tp < m.tp; ++tp)
      for (int dp = 0; dp < m.dp; ++dp)
        m.ranks.push_back({pp, tp, dp, node_of(store::RankKey(catalog.job, pp, tp, dp))});
  std::map<int, planner::online::LayerBytes> layers;
  std::map<int, int> own_stage;  // per layer: first stage among its buffers only one stage saved
  for (const auto& [name, saved] : catalog.buffers) {
    if (saved.empty() || saved.front().spec.layer < 0) continue;
    const protect::BufferSpec& spec = saved.front().spec;
    int stage = m.pp;
    std::set<int> stages;
    for (const auto& s : saved) {
      stage = std::min(stage, catalog.groups[s.group].pp);
      stages.insert(catalog.groups[s.group].pp);
    }
    if (stages.size() == 1) {
      auto it = own_stage.emplace(spec.layer, stage).first;
      it->second = std::min(it->second, stage);
    }
    std::set<int> tps;  // a name saved at several tensor-parallel indexes is one part per index
    for (const auto& s : saved)
      if (catalog.groups[s.group].pp == stage) tps.insert(catalog.groups[s.group].tp);
    auto [it, fresh] = layers.try_emplace(spec.layer);
    auto& l = it->second;
    l.layer = spec.layer;
    l.stage = fresh ? stage : std::min(l.stage, stage);
    const uint64_t parts = tps.size();
    if (spec.kind == protect::BufferKind::kReplicated && spec.optimizer) {
      l.optimizer_bytes += spec.size * parts;  // a plain optimizer's state (reft.torch)
    } else if (spec.kind == protect::BufferKind::kReplicated) {
      l.param_bytes += spec.size * parts;
    } else if (spec.sharded()) {
      // A partitioned buffer: a ZeRO optimizer's flat, or a pure-FSDP DCP save's parameters
      // or optimizer state of the layer (reft.torch.dcp), as its flag says.
      (spec.optimizer ? l.optimizer_bytes : l.param_bytes) += spec.shard_total * parts;
    } else {
      l.optimizer_bytes += spec.size * parts * static_cast<uint64_t>(m.dp);
    }
  }
  for (auto& [index, l] : layers) {
    // A buffer several stages save (tied weights) does not move the layer off its own stage.
    if (auto it = own_stage.find(index); it != own_stage.end()) l.stage = it->second;
    m.layers.push_back(l);
  }
  m.held = HeldBytes(catalog, m);
  if (step_time) {
    m.step_ms = step_time->step_ms;
    m.step_samples = step_time->samples;
  }
  return m;
}

Result<planner::online::JobModelView> ReadJobModel(recovery::ReftLoad* restore,
                                                   coord::SlotDirectory* slots,
                                                   const StepCadence* cadence, const std::string& job) {
  if (restore == nullptr) return Status::Unavailable("this daemon has no restore provider");
  REFT_ASSIGN_OR_RETURN(auto desc, restore->DescribeNewest(job));
  auto node_of = [&](const store::RankKey& rank) -> std::string {
    if (auto it = desc.view.joined.find(rank); it != desc.view.joined.end() && !it->second.empty())
      return *it->second.begin();
    if (slots != nullptr) {
      if (auto n = slots->SlotLocation(rank)) return *n;
    }
    for (const recovery::SlotEntry* slot : desc.view.Find(rank, desc.catalog.step)) return slot->node;
    return "";
  };
  std::optional<StepCadence::Estimate> step_time;
  if (cadence != nullptr) step_time = cadence->Get(job);
  return BuildJobModel(desc.catalog, node_of, step_time);
}

}  // namespace reft::replan
