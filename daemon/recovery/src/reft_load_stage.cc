/// \file reft_load_stage.cc
/// \brief ReftLoad::StageLayers: what a node of a new layout lacks of the layers it will host,
/// pulled before the trainers restart (staged_layers.h).

#include <algorithm>
#include <set>

#include "reft/recovery/reft_load.h"
#include "reft/test_point.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 4096;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// What staging a layer here fetches: the ranges of each (name, tp) of its replicated and
// sharded buffers that no slot on this node holds (RangesNotHeldHere), each 4 KiB aligned in
// the layer's memory. Per-rank buffers stay with their rank (a reshape gives them to the rank
// with the same coordinates only).
struct LayerPlan {
  std::vector<StagedBuffer> buffers;
  uint64_t size = 0;   ///< of its memory
  uint64_t bytes = 0;  ///< the ranges' bytes
};

// `stage_wide`: the saved groups (pp, tp) whose buffers without a layer go with this layer.
Result<LayerPlan> PlanLayer(const StepCatalog& catalog, const ClusterView& view, int layer,
                            const std::set<size_t>& stage_wide) {
  LayerPlan p;
  for (const auto& [name, saved] : catalog.buffers) {
    std::set<int> tps;
    for (const SavedBuffer& b : saved) {
      const protect::BufferSpec& spec = b.spec;
      if (spec.layer != layer && !(spec.layer < 0 && stage_wide.count(b.group))) continue;
      if (spec.kind == protect::BufferKind::kUnique && !spec.sharded()) continue;
      const int tp = catalog.groups[b.group].tp;
      if (!tps.insert(tp).second) continue;  // saved by another stage too (tied weights): once
      REFT_ASSIGN_OR_RETURN(ByteRanges missing, RangesNotHeldHere(catalog, view, name, tp));
      for (const auto& [begin, end] : missing) {
        StagedBuffer sb;
        sb.name = name;
        sb.tp = tp;
        sb.begin = begin;
        sb.end = end;
        sb.offset = p.size;
        p.size = AlignUp(p.size + (end - begin));
        p.bytes += end - begin;
        p.buffers.push_back(std::move(sb));
      }
    }
  }
  return p;
}

// The saved groups whose layers are exactly `layers`: the node will run that stage again, and
// the new ranks register its buffers without a layer (a flat optimizer state spanning the
// stage, a step counter) under the same names, so those are staged too. A node hosting any
// other set of layers registers other stage-wide buffers; those of the old stages are not.
std::set<size_t> StagesHostedWhole(const StepCatalog& catalog, const std::set<int>& layers) {
  std::vector<std::set<int>> of_group(catalog.groups.size());
  for (const auto& [name, saved] : catalog.buffers) {
    for (const SavedBuffer& b : saved) {
      if (b.spec.layer >= 0) of_group[b.group].insert(b.spec.layer);
    }
  }
  std::set<size_t> out;
  for (size_t g = 0; g < of_group.size(); ++g) {
    if (!of_group[g].empty() && of_group[g] == layers) out.insert(g);
  }
  return out;
}

bool HasLayer(const StepCatalog& catalog, int layer) {
  for (const auto& [name, saved] : catalog.buffers) {
    for (const SavedBuffer& b : saved) {
      if (b.spec.layer == layer) return true;
    }
  }
  return false;
}

}  // namespace

Result<StageReport> ReftLoad::StageLayers(const std::string& job, int64_t step,
                                          const std::vector<int>& layers) {
  if (staged_ == nullptr) return Status::Unsupported("this node keeps no staged layers");
  const auto deadline = Clock::now() + options_.restore_timeout;
  StageReport rep;
  rep.job = job;
  rep.step = step;
  RestoreStats* stats = &rep.stats;
  REFT_RETURN_NOT_OK(ChooseStep(job, stats).status());  // synchronises the node's view
  // The step and the timeline it was committed in, read together: a fall-back between two
  // reads would stamp generation g's bytes of the step as generation g+1's. Bytes staged for
  // another commit are another state, whatever their step.
  const coord::JobGeneration committed = agreement_.timeline->Generation(job);
  if (committed.newest_committed != step) {
    return Status::Busy("the transfer plan is for step " + std::to_string(step) + " of job '" + job +
                        "'; its newest committed step is " +
                        std::to_string(committed.newest_committed.value_or(-1)));
  }
  const coord::TimelineStamp timeline = committed.committed_in;
  staged_->DropBefore(job, step);
  staged_->DropOtherTimelines(job, timeline);
  const std::set<int> hosted(layers.begin(), layers.end());
  std::vector<int> wanted;
  for (int layer : hosted) {
    if (auto bytes = staged_->Staged(job, timeline, step, layer)) {
      rep.layers.push_back({layer, *bytes, true});
    } else {
      wanted.push_back(layer);
    }
  }
  if (wanted.empty()) return rep;

  REFT_ASSIGN_OR_RETURN(ClusterView view, Locate(job, deadline, stats, nullptr));
  auto catalog = CatalogStep(view, job, step, reader_, deadline);
  if (!catalog.ok()) return LostOrUndecided(catalog.status(), view);
  struct Staging {
    int layer;
    LayerPlan plan;
    MappedMemfd memory;
  };
  std::vector<Staging> staging;
  std::vector<RangeRequest> requests;
  for (int layer : wanted) {
    if (!HasLayer(*catalog, layer)) {
      return Status::InvalidArgument("step " + std::to_string(step) + " of job '" + job +
                                     "' has no buffer of layer " + std::to_string(layer));
    }
    // A stage hosted whole: its buffers without a layer go with its first layer.
    const std::set<size_t> stage_wide =
        layer == *hosted.begin() ? StagesHostedWhole(*catalog, hosted) : std::set<size_t>{};
    auto plan = PlanLayer(*catalog, view, layer, stage_wide);
    if (!plan.ok()) return plan.status();
    Staging s{layer, std::move(*plan), {}};
    if (s.plan.size > 0) {
      REFT_ASSIGN_OR_RETURN(s.memory, MappedMemfd::Create("reft-staged " + job + " layer " +
                                                              std::to_string(layer),
                                                          s.plan.size));
    }
    staging.push_back(std::move(s));
  }
  for (Staging& s : staging) {  // the memfds do not move any more: their addresses stand
    for (const StagedBuffer& b : s.plan.buffers) {
      RangeRequest r;
      r.name = b.name;
      r.begin = b.begin;
      r.end = b.end;
      r.dst = s.memory.data() + b.offset;
      r.tp = b.tp;
      requests.push_back(std::move(r));
    }
  }
  // Layers of one saved stage come from one assembly of that stage's group.
  Fetcher fetcher(&reader_, options_, stats, nullptr);
  std::string detail;
  Status assembled = AssembleRanges(*catalog, view, &fetcher, requests, stats, deadline, &detail);
  if (!assembled.ok()) return LostOrUndecided(assembled, view);
  stats->detail = detail;
  test_point::Reach(kLayersFetched, job, this);
  for (Staging& s : staging) {
    if (!staged_->Put(job, timeline, step, s.layer, std::move(s.memory), std::move(s.plan.buffers))) {
      return Status::Busy("job '" + job + "' moved to another timeline while layer " +
                          std::to_string(s.layer) + " of step " + std::to_string(step) +
                          " was staged (" + timeline.ToString() + " is over); nothing kept");
    }
    rep.layers.push_back({s.layer, s.plan.bytes, false});
  }
  std::sort(rep.layers.begin(), rep.layers.end(),
            [](const StageReport::Layer& a, const StageReport::Layer& b) { return a.layer < b.layer; });
  return rep;
}

}  // namespace reft::recovery
