/// \file snapshot_aor.cc
/// \brief AOR in the snapshot writer (docs/protection.md "AOR in
/// reftd"): each "aor/<name>" region of step s is the replica of rank dp+1's optimizer shard,
/// advanced on the host from the replica of step s−1 (the region of this rank's previous slot)
/// with the gradient slice staged before the fence and the step's hyper-parameters. When there
/// is no valid replica of s−1 it is copied from rank dp+1's published "unique/<name>" instead,
/// which resynchronises it.

#include <chrono>
#include <cstring>
#include <string>

#include "reft/aor/hyper_codec.h"
#include "reft/protect/sharding.h"
#include "snapshot_writer.h"

namespace reft::local {

static_assert(local_proto::kOptimizerHyperBytes == aor::kStepHyperWireSize);

Result<std::vector<aor::StepHyper>> SnapshotWriter::OptimizerHypers(
    const local_proto::SnapshotBegin& m) const {
  const auto& bindings = plan_->slot.aor.bindings;
  std::vector<aor::StepHyper> out(bindings.size());
  std::vector<bool> seen(bindings.size(), false);
  const std::string at = "snapshot of step " + std::to_string(m.step) + ": ";
  for (const auto& o : m.optimizer) {
    size_t i = 0;
    while (i < bindings.size() && plan_->slot.aor_buffer[i] != o.buffer_index) ++i;
    if (i == bindings.size()) {
      const std::string name = o.buffer_index < buffers_->size()
                                   ? "'" + (*buffers_)[o.buffer_index].reg.name + "'"
                                   : "#" + std::to_string(o.buffer_index);
      return Status::InvalidArgument(at + "optimizer hyper-parameters for buffer " + name +
                                     ", which has no 'aor/' region to replay");
    }
    const std::string name = "'" + bindings[i].buffer + "'";
    if (seen[i]) {
      return Status::InvalidArgument(at + "optimizer hyper-parameters for " + name + " twice");
    }
    seen[i] = true;
    auto h = aor::DecodeStepHyper(o.record.data(), o.record.size());
    if (!h.ok()) return h.status().WithContext(at + "optimizer hyper-parameters of " + name);
    if (h->iteration != static_cast<uint64_t>(m.step)) {
      return Status::InvalidArgument(at + "the optimizer hyper-parameters of " + name +
                                     " are of iteration " + std::to_string(h->iteration));
    }
    out[i] = *h;
  }
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (!seen[i]) {
      return Status::InvalidArgument(
          at + "protection '" + scheme_.ToString() + "' replays optimizer shard '" +
          bindings[i].buffer +
          "' from each step's optimizer hyper-parameters, and none came "
          "with this snapshot (C++ Snapshot(step, OptimizerStep), C reft_snapshot_aor, Python "
          "snapshot(step, optimizer=...))");
    }
  }
  return out;
}

Result<std::shared_ptr<store::SlotRef>> SnapshotWriter::BeginWriteKeepingReplicas(int64_t step) {
  auto slot = ctx_.store->BeginWrite(rank_, step);
  if (slot.ok() || slot.status().code() != StatusCode::kBusy) return slot;
  bool held = false;
  for (const auto& a : aor_) held |= a.slot != nullptr;
  if (!held) return slot;
  // Every slot is taken (e.g. slots_per_rank = 2 and the previous step not committed yet): the
  // one the replicas read from is the store's to reuse. Resynchronise rather than fail.
  ResetAor("the store reused the slot of the previous step (no free slot)");
  return ctx_.store->BeginWrite(rank_, step);
}

void SnapshotWriter::ResetAor(const std::string& reason) {
  for (auto& a : aor_) {
    a.replica.reset();
    a.slot.reset();
    a.since_copy = 0;
    a.reason = reason;
  }
}

Status SnapshotWriter::AdvanceAor(size_t i, int64_t step, const std::shared_ptr<store::SlotRef>& slot,
                           const store::RankKey& neighbour) {
  const protect::AorBinding& b = plan_->slot.aor.bindings[i];
  AorState& st = aor_[i];
  REFT_ASSIGN_OR_RETURN(size_t idx, slot->FindRegion(b.region));
  const uint64_t n = b.elements;
  if (slot->region_size(idx) != 12 * n) {
    return Status::Internal("region '" + b.region + "' has " +
                            std::to_string(slot->region_size(idx)) + " bytes, the AOR plan " +
                            std::to_string(12 * n));
  }
  uint8_t* region = slot->region_data(idx);
  // Regions are page aligned in the segment, so the three fp32 arrays are aligned.
  auto* f = reinterpret_cast<float*>(region);
  const aor::AdamWState next{f, f + n, f + 2 * n, n};
  const aor::StepHyper& h = writing_->hypers[i];
  const uint8_t* grad = plan_->staging->mem.data() + b.staging_offset;
  const auto dtype = static_cast<aor::GradDtype>(b.grad_dtype);
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  std::string why;
  bool verify = false;
  if (st.replica) {
    verify = options_.aor_resync_steps > 0 && st.since_copy >= options_.aor_resync_steps;
    const auto t0 = Clock::now();
    Status replayed = st.replica->ApplyInto(next, h, grad, dtype, n);
    const double dt = seconds(t0);
    if (replayed.ok()) {
      ctx_.info->Update([&](SessionInfo& info) {
        info.aor_replay_seconds += dt;
        if (!verify) info.aor_replays++;
      });
    }
    if (replayed.ok() && !verify) {
      st.slot = slot;  // the previous slot is let go: the replica now lives in this one
      st.since_copy++;
      return Status::OK();
    }
    why = replayed.ok() ? "periodic resync after " + std::to_string(st.since_copy) + " replays"
                        : replayed.message();
  } else {
    why = st.reason.empty() ? "first snapshot of this session" : st.reason;
  }

  // No valid replica of step s−1 (or a resync is due): copy rank dp+1's shard of step s.
  const auto t0 = Clock::now();
  const auto timeout = std::chrono::milliseconds(options_.peer_copy_timeout_ms);
  bool mismatch = false;
  if (verify) {
    std::vector<uint8_t> owner(12 * n);
    Status copied = ctx_.copier->CopyPublished(neighbour, step, protect::UniqueRegionName(b.buffer),
                                               owner.data(), owner.size(), timeout,
                                               [&] { return PeerCopyWanted(step); });
    if (copied.code() == StatusCode::kLost) {
      // The owner moved on before this rank could compare (its slot of `step` was re-used).
      // The replay stands, as on any step between resyncs; the resync is due again next step.
      st.slot = slot;
      ctx_.info->Update([&](SessionInfo& info) {
        info.aor_replays++;
        info.aor_last_copy = "step " + std::to_string(step) + " '" + b.buffer +
                             "': resync deferred: " + copied.message();
      });
      return Status::OK();
    }
    REFT_RETURN_NOT_OK(copied);
    mismatch = std::memcmp(owner.data(), region, owner.size()) != 0;
    if (mismatch) std::memcpy(region, owner.data(), owner.size());
  } else {
    REFT_RETURN_NOT_OK(ctx_.copier->CopyPublished(
        neighbour, step, protect::UniqueRegionName(b.buffer), region, 12 * n, timeout,
        [&] { return PeerCopyWanted(step); }));
  }
  // The copy is the owner's state after iteration `step`, at optimizer step h.step.
  st.replica.emplace(next, static_cast<uint64_t>(step), h.step, options_.aor_threads);
  st.slot = slot;
  st.since_copy = 0;
  st.reason.clear();
  ctx_.info->Update([&](SessionInfo& info) {
    info.aor_copy_seconds += seconds(t0);
    info.aor_copies++;
    if (mismatch) info.aor_mismatches++;
    info.aor_last_copy = "step " + std::to_string(step) + " '" + b.buffer + "': " + why;
  });
  return Status::OK();
}

}  // namespace reft::local
