#include "reft/app/job_model.h"

#include <algorithm>
#include <map>
#include <set>

namespace reft::app {

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
    if (spec.kind == protect::BufferKind::kReplicated) {
      l.param_bytes += spec.size * parts;
    } else if (spec.sharded()) {
      l.optimizer_bytes += spec.shard_total * parts;
    } else {
      l.optimizer_bytes += spec.size * parts * static_cast<uint64_t>(m.dp);
    }
  }
  // What one member of a stage holds of a layer: REFT shards the replicated bytes over the dp
  // members, each keeping its shard and ARC copies of the next `arc` members' shards; a
  // partitioned (or per-rank) buffer's part is kept by its member and copied to one neighbour.
  int arc = 0;
  if (!catalog.groups.empty()) arc = catalog.groups.front().meta.meta.scheme.arc;
  const double dp = std::max(1, m.dp);
  const double replicated_share = std::min(1.0, (1 + arc) / dp);
  const double partitioned_share = std::min(1.0, (m.dp >= 2 ? 2 : 1) / dp);
  for (auto& [index, l] : layers) {
    // A buffer several stages save (tied weights) does not move the layer off its own stage.
    if (auto it = own_stage.find(index); it != own_stage.end()) l.stage = it->second;
    if (l.bytes() > 0) {
      l.held_share = (replicated_share * static_cast<double>(l.param_bytes) +
                      partitioned_share * static_cast<double>(l.optimizer_bytes)) /
                     static_cast<double>(l.bytes());
    }
    m.layers.push_back(l);
  }
  if (step_time) {
    m.step_ms = step_time->step_ms;
    m.step_samples = step_time->samples;
  }
  return m;
}

Result<planner::online::JobModelView> ReadJobModel(recovery::ReftLoad* restore,
                                                   peer::JobCoordinator* coordinator,
                                                   const StepCadence* cadence, const std::string& job) {
  if (restore == nullptr) return Status::Unavailable("this daemon has no restore provider");
  REFT_ASSIGN_OR_RETURN(auto desc, restore->DescribeNewest(job));
  auto node_of = [&](const store::RankKey& rank) -> std::string {
    if (auto it = desc.view.joined.find(rank); it != desc.view.joined.end() && !it->second.empty())
      return *it->second.begin();
    if (coordinator != nullptr) {
      if (auto n = coordinator->SlotLocation(rank)) return *n;
    }
    for (const recovery::SlotEntry* slot : desc.view.Find(rank, desc.catalog.step)) return slot->node;
    return "";
  };
  std::optional<StepCadence::Estimate> step_time;
  if (cadence != nullptr) step_time = cadence->Get(job);
  return BuildJobModel(desc.catalog, node_of, step_time);
}

}  // namespace reft::app
