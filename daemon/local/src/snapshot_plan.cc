/// \file snapshot_plan.cc
/// \brief The writer's slot plan (protect::PlanSlot, the function libreft calls too, plus what
/// only reftd needs) and the completion of a step after the fence: publish, peer copies, AOR
/// replays, seal.

#include <algorithm>
#include <string>

#include "reft/log.h"
#include "snapshot_writer.h"

namespace reft::local {

SnapshotWriter::GradientStaging::~GradientStaging() {
  for (auto* backend : pinned) {
    Status st = backend->UnpinHost(mem.data());
    if (!st.ok()) LogWarning("unpinning the AOR gradient staging: " + st.ToString());
  }
}

Result<std::unique_ptr<SnapshotWriter::Plan>> SnapshotWriter::MakePlan() const {
  auto p = std::make_unique<Plan>();
  REFT_ASSIGN_OR_RETURN(p->slot,
                        protect::PlanSlot(hello_, buffers_->Registrations(), options_.shard_chunk));
  const protect::SlotPlan& s = p->slot;
  for (uint32_t i : s.replicated) p->replicated.push_back(&(*buffers_)[i]);
  if (s.parity_on_device() && scheme_.rs > 0) {
    REFT_ASSIGN_OR_RETURN(p->rs, kernels::RsCodec::Create(s.geometry.m - scheme_.rs, scheme_.rs));
  }
  p->layout.push_back({protect::kRegionMeta, s.meta_bytes.size()});
  for (const auto& r : s.rank.regions) p->layout.push_back({r.name, r.size});

  // AOR: which gradient slice advances each "aor/<name>" region, staged before the fence.
  if (!s.aor.bindings.empty()) {
    REFT_ASSIGN_OR_RETURN(MappedMemfd mem,
                          MappedMemfd::Create("reft-aor-gradients", s.aor.staging_bytes));
    p->staging = std::make_shared<GradientStaging>(std::move(mem));
  }
  for (uint32_t gi : s.aor_gradient) {
    const Buffer* grad = &(*buffers_)[gi];
    p->aor_gradient.push_back(grad);
    if (grad->backend == nullptr) {
      p->staging_for_client = true;
    } else if (std::find(p->staging->pinned.begin(), p->staging->pinned.end(), grad->backend) ==
               p->staging->pinned.end()) {
      // Device gradients: reftd pulls the slices D2H into the staging before the fence.
      REFT_RETURN_NOT_OK(grad->backend->PinHost(p->staging->mem.data(), p->staging->mem.size()));
      p->staging->pinned.push_back(grad->backend);
    }
  }
  return p;
}

Status SnapshotWriter::CompleteSlot(int64_t step, const std::shared_ptr<store::SlotRef>& slot) {
  const protect::SgGeometry& g = plan_->slot.geometry;
  const auto& unique = g.unique;
  const auto& bindings = plan_->slot.aor.bindings;
  // The trainer had a writable fd of the slot: a slot it truncated reads zeros now and is
  // neither published to the ring neighbour nor sealed (the step fails on this rank only).
  REFT_RETURN_NOT_OK(slot->CheckIntact());
  if (g.m >= 2 && !unique.empty()) {
    // Peer copy: this rank keeps its ring neighbour's unique buffers (RNG, ZeRO-1 optimizer
    // shards) of the same step, and the neighbour before it keeps ours. Ours are published
    // first, so no member waits for another member's seal.
    std::vector<std::string> own;
    for (const auto& name : unique) own.push_back(protect::UniqueRegionName(name));
    REFT_RETURN_NOT_OK(ctx_.store->Publish(rank_, step, own));
    const store::RankKey next{rank_.job, rank_.pp, rank_.tp, (rank_.dp + 1) % g.m};
    if (aor_.size() != bindings.size()) aor_.resize(bindings.size());
    for (const auto& name : unique) {
      // "aor/<name>": replayed on the host from this rank's previous slot (snapshot_aor.cc).
      size_t b = 0;
      while (b < bindings.size() && bindings[b].buffer != name) ++b;
      if (b < bindings.size()) {
        REFT_RETURN_NOT_OK(AdvanceAor(b, step, slot, next));
        continue;
      }
      REFT_ASSIGN_OR_RETURN(size_t idx, slot->FindRegion(protect::PeerRegionName(name)));
      REFT_RETURN_NOT_OK(ctx_.copier->CopyPublished(
          next, step, protect::UniqueRegionName(name), slot->region_data(idx),
          slot->region_size(idx), std::chrono::milliseconds(options_.peer_copy_timeout_ms),
          [&] { return PeerCopyWanted(step); }));
      ctx_.info->Update([](SessionInfo& i) { i.peer_copies++; });
    }
  }
  REFT_RETURN_NOT_OK(slot->CheckIntact());
  return ctx_.store->Seal(rank_, step);
}

}  // namespace reft::local
