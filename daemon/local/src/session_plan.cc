/// \file session_plan.cc
/// \brief A session's slot plan (the sharding function applied to its registered buffers) and
/// the completion of a step after the fence: publish, peer copies, AOR replays, seal.

#include <algorithm>
#include <string>

#include "reft/protect/sharding.h"
#include "session.h"

namespace reft::local {

namespace {

protect::BufferSpec SpecOf(const local_proto::Register& r) {
  protect::BufferSpec s;
  s.name = r.name;
  s.size = r.size;
  s.dtype = r.dtype;
  s.kind = r.kind == local_proto::BufferKind::kUnique ? protect::BufferKind::kUnique
                                                      : protect::BufferKind::kReplicated;
  s.layer = r.layer;
  s.optimizer = r.optimizer;
  return s;
}

}  // namespace

Result<Session::Plan> Session::MakePlan() const {
  Plan p;
  protect::SlotMeta& m = p.meta;
  m.job = rank_.job;
  m.coord = rank_.coord();
  {
    std::lock_guard<std::mutex> lock(mu_);
    m.layout = info_.layout;
  }
  m.scheme = scheme_;
  m.shard_chunk = options_.shard_chunk;
  // Gradient buffers are read by the AOR replay and never stored: not part of the slot.
  protect::AorInput aor_in;
  for (const auto& b : buffers_) {
    if (b.reg.kind == local_proto::BufferKind::kGradient) {
      aor_in.gradients.push_back({b.reg.name, b.reg.size, b.reg.dtype});
      continue;
    }
    m.buffers.push_back(SpecOf(b.reg));
    if (!b.reg.gradient.empty()) aor_in.gradient_of[b.reg.name] = b.reg.gradient;
  }
  REFT_ASSIGN_OR_RETURN(p.rank, m.Plan());
  REFT_ASSIGN_OR_RETURN(p.geometry, m.Geometry());
  p.meta_bytes = m.Encode();
  if (p.meta_bytes.size() > protect::kMaxSlotMetaBytes) {
    return Status::InvalidArgument("too many or too long buffer names: the slot description "
                                   "exceeds " + std::to_string(protect::kMaxSlotMetaBytes) + " bytes");
  }
  // Which memory each replicated buffer is in decides who fills what: the client copies from
  // host memory, reftd pulls from device memory. Parity reads every replicated buffer, so it
  // needs them all on one side (and, on the device side, on one device of one kind).
  const Buffer* first_device = nullptr;
  bool any_host = false;
  for (const auto& e : p.geometry.buffers) {
    const Buffer* b = nullptr;
    for (const auto& x : buffers_) {
      if (x.reg.name == e.name) b = &x;
    }
    p.replicated.push_back(b);
    if (b->backend == nullptr) {
      any_host = true;
    } else if (first_device == nullptr) {
      first_device = b;
    } else if (b->backend != first_device->backend ||
               b->reg.memory.device != first_device->reg.memory.device) {
      if (scheme_.aec || scheme_.rs > 0) {
        return Status::InvalidArgument("protection '" + scheme_.ToString() +
                                       "' computes parity over all replicated buffers, which must "
                                       "then be on one device: '" + first_device->reg.name +
                                       "' and '" + b->reg.name + "' are not");
      }
    }
  }
  const bool parity = (scheme_.aec || scheme_.rs > 0) && p.geometry.m >= 2;
  if (parity && any_host && first_device != nullptr) {
    return Status::InvalidArgument("protection '" + scheme_.ToString() +
                                   "' computes parity over all replicated buffers, which must "
                                   "then live in one memory: '" + first_device->reg.name +
                                   "' is device memory while others are host memory");
  }
  p.parity_on_device = parity && first_device != nullptr;
  if (p.parity_on_device && scheme_.rs > 0) {
    REFT_ASSIGN_OR_RETURN(p.rs, kernels::RsCodec::Create(p.geometry.m - scheme_.rs, scheme_.rs));
  }
  p.layout.push_back({protect::kRegionMeta, p.meta_bytes.size()});
  for (const auto& r : p.rank.regions) p.layout.push_back({r.name, r.size});

  // AOR: which gradient slice advances each "aor/<name>" region, staged before the fence.
  aor_in.layout = m.layout;
  aor_in.scheme = m.scheme;
  aor_in.coord = m.coord;
  aor_in.buffers = m.buffers;
  REFT_ASSIGN_OR_RETURN(p.aor, protect::PlanAor(aor_in));
  if (!p.aor.bindings.empty()) {
    REFT_ASSIGN_OR_RETURN(MappedMemfd mem,
                          MappedMemfd::Create("reft-aor-gradients", p.aor.staging_bytes));
    p.staging = std::make_shared<GradientStaging>(std::move(mem));
  }
  for (const auto& b : p.aor.bindings) {
    const Buffer* grad = nullptr;
    uint32_t index = 0;
    for (uint32_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].reg.name == b.gradient) grad = &buffers_[i];
      if (buffers_[i].reg.name == b.buffer) index = i;
    }
    p.aor_gradient.push_back(grad);
    p.aor_buffer_index.push_back(index);
    if (grad->backend == nullptr) {
      p.staging_for_client = true;
    } else if (std::find(p.staging->pinned.begin(), p.staging->pinned.end(), grad->backend) ==
               p.staging->pinned.end()) {
      // Device gradients: reftd pulls the slices D2H into the staging before the fence.
      REFT_RETURN_NOT_OK(grad->backend->PinHost(p.staging->mem.data(), p.staging->mem.size()));
      p.staging->pinned.push_back(grad->backend);
    }
  }
  return p;
}

Status Session::CompleteStep(int64_t step, const std::shared_ptr<store::SlotRef>& slot) {
  const protect::SgGeometry& g = plan_->geometry;
  const auto& unique = g.unique;
  if (g.m >= 2 && !unique.empty()) {
    // Peer copy (DESIGN.md §2): this rank keeps its ring neighbour's unique buffers (RNG,
    // ZeRO-1 optimizer shards) of the same step, and the neighbour before it keeps ours. Ours
    // are published first, so no member waits for another member's seal.
    std::vector<std::string> own;
    for (const auto& name : unique) own.push_back(protect::UniqueRegionName(name));
    REFT_RETURN_NOT_OK(ctx_.store->Publish(rank_, step, own));
    const store::RankKey next{rank_.job, rank_.pp, rank_.tp, (rank_.dp + 1) % g.m};
    if (aor_.size() != plan_->aor.bindings.size()) aor_.resize(plan_->aor.bindings.size());
    for (const auto& name : unique) {
      // "aor/<name>": replayed on the host from this rank's previous slot (session_aor.cc).
      size_t b = 0;
      while (b < plan_->aor.bindings.size() && plan_->aor.bindings[b].buffer != name) ++b;
      if (b < plan_->aor.bindings.size()) {
        REFT_RETURN_NOT_OK(AdvanceAor(b, step, slot, next));
        continue;
      }
      REFT_ASSIGN_OR_RETURN(size_t idx, slot->FindRegion(protect::PeerRegionName(name)));
      REFT_RETURN_NOT_OK(ctx_.copier->CopyPublished(
          next, step, protect::UniqueRegionName(name), slot->region_data(idx),
          slot->region_size(idx), std::chrono::milliseconds(options_.peer_copy_timeout_ms),
          &hung_up_));
      std::lock_guard<std::mutex> lock(mu_);
      info_.peer_copies++;
    }
  }
  return ctx_.store->Seal(rank_, step);
}

}  // namespace reft::local
