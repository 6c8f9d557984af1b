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
#include "reft/log.h"
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
          "with this snapshot: pass them with it (Python: snapshot(step, optimizer=...))");
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
  // Replicas only: a shard whose AOR is off stays off (aor_off_).
  for (auto& a : aor_) {
    a.replica.reset();
    a.slot.reset();
    a.since_copy = 0;
    a.probation_left = 0;
    a.reason = reason;
  }
  if (!aor_.empty()) PublishAorState();
}

namespace {

const char* MemoryName(uint32_t memory_kind) {
  switch (memory_kind) {
    case 1:
      return "emulated device";
    case 2:
      return "cuda";
    case 3:
      return "rocm";
  }
  return "a device";
}

/// The state of binding `b`: [master | exp_avg | exp_avg_sq], n elements each.
aor::StateDtype StateDtypeOf(const protect::AorBinding& b) {
  return static_cast<aor::StateDtype>(b.state_dtype);
}
uint64_t StateBytes(const protect::AorBinding& b) {
  return 3 * b.elements * aor::StateDtypeSize(StateDtypeOf(b));
}

}  // namespace

void SnapshotWriter::NoteAorRegistration(const local_proto::Register& r) {
  // The rule of protect::HasAorRegion, on what the registration says: the buffer will get an
  // "aor/" region. Its owner updates it with GPU kernels, which the host replay does not follow
  // bit for bit and nothing on a CPU can check: copied, unless the operator asked otherwise.
  const bool replayed = scheme_.aor && hello_.layout.zero == 1 && hello_.layout.dp >= 2 &&
                        r.kind == local_proto::BufferKind::kUnique && r.optimizer;
  if (!replayed || r.memory.memory_kind == 0 || options_.aor_device_optimizers) return;
  aor_off_.emplace(r.name, std::string("off: optimizer on ") + MemoryName(r.memory.memory_kind));
  PublishAorState();
}

void SnapshotWriter::TurnAorOff(size_t i, const std::string& why) {
  const protect::AorBinding& b = plan_->slot.aor.bindings[i];
  aor_off_.emplace(b.buffer, why);
  AorState& st = aor_[i];
  st.replica.reset();
  st.slot.reset();
  st.probation_left = 0;
  st.reason = why;
  PublishAorState();
}

void SnapshotWriter::PublishAorState() {
  // One state per replayed shard ("probation", "on", "off: ..."); one word when they agree.
  std::vector<std::pair<std::string, std::string>> states;
  if (plan_) {
    const auto& bindings = plan_->slot.aor.bindings;
    for (size_t i = 0; i < bindings.size(); ++i) {
      auto off = aor_off_.find(bindings[i].buffer);
      const bool trusted = i < aor_.size() && aor_[i].replica && aor_[i].probation_left == 0;
      states.emplace_back(bindings[i].buffer, off != aor_off_.end() ? off->second
                                              : trusted             ? "on"
                                                                    : "probation");
    }
  } else {
    for (const auto& [name, why] : aor_off_) states.emplace_back(name, why);
  }
  std::string summary;
  bool alike = true;
  for (const auto& s : states) alike &= s.second == states.front().second;
  if (alike && !states.empty()) {
    summary = states.front().second;
  } else {
    for (const auto& [name, state] : states) {
      summary += (summary.empty() ? "'" : "; '") + name + "': " + state;
    }
  }
  ctx_.info->Update([&](SessionInfo& info) { info.aor_state = summary; });
}

Status SnapshotWriter::CopyAor(size_t i, int64_t step, uint8_t* region,
                               const store::RankKey& neighbour) {
  const protect::AorBinding& b = plan_->slot.aor.bindings[i];
  return ctx_.copier->CopyPublished(neighbour, step, protect::UniqueRegionName(b.buffer), region,
                                    StateBytes(b),
                                    std::chrono::milliseconds(options_.peer_copy_timeout_ms),
                                    [&] { return PeerCopyWanted(step); });
}

Status SnapshotWriter::AdvanceAor(size_t i, int64_t step, const std::shared_ptr<store::SlotRef>& slot,
                           const store::RankKey& neighbour) {
  const protect::AorBinding& b = plan_->slot.aor.bindings[i];
  AorState& st = aor_[i];
  REFT_ASSIGN_OR_RETURN(size_t idx, slot->FindRegion(b.region));
  const uint64_t n = b.elements;
  if (slot->region_size(idx) != StateBytes(b)) {
    return Status::Internal("region '" + b.region + "' has " +
                            std::to_string(slot->region_size(idx)) + " bytes, the AOR plan " +
                            std::to_string(StateBytes(b)));
  }
  uint8_t* region = slot->region_data(idx);
  // Regions are page aligned in the segment, so the three arrays are aligned.
  const uint64_t array = n * aor::StateDtypeSize(StateDtypeOf(b));
  const aor::AdamWState next{region, region + array, region + 2 * array, n, StateDtypeOf(b)};
  const aor::StepHyper& h = writing_->hypers[i];
  const uint8_t* grad = plan_->staging->mem.data() + b.staging_offset;
  const auto dtype = static_cast<aor::GradDtype>(b.grad_dtype);
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const std::string at = "step " + std::to_string(step) + " '" + b.buffer + "': ";

  // A device optimizer the trainer staged is replayed when the operator asked for device
  // optimizers to be (as one reftd pulls itself).
  const bool declared_off =
      h.not_replayable != aor::NotReplayable::kReplayable &&
      !(h.not_replayable == aor::NotReplayable::kDeviceOptimizer && options_.aor_device_optimizers);
  if (declared_off && !aor_off_.count(b.buffer)) {
    TurnAorOff(i, "off: " + aor::NotReplayableText(h.not_replayable));
  }
  if (auto off = aor_off_.find(b.buffer); off != aor_off_.end()) {
    // AOR is off for this shard: the region is the owner's state, copied like "peer/<name>".
    const auto t0 = Clock::now();
    REFT_RETURN_NOT_OK(CopyAor(i, step, region, neighbour));
    ctx_.info->Update([&](SessionInfo& info) {
      info.aor_copy_seconds += seconds(t0);
      info.aor_copies++;
      info.aor_last_copy = at + "AOR " + off->second;
    });
    return Status::OK();
  }

  std::string why;
  if (st.replica) {
    // On probation, or this is the aor_resync_steps-th replay since the owner's state was last
    // copied or compared: the replay is also compared with a copy (1 = every replay).
    const bool verify = st.probation_left > 0 || (options_.aor_resync_steps > 0 &&
                                                  st.since_copy + 1 >= options_.aor_resync_steps);
    const auto t0 = Clock::now();
    Status replayed = st.replica->ApplyInto(next, h, grad, dtype, n);
    const double dt = seconds(t0);
    if (replayed.ok()) {
      ctx_.info->Update([&](SessionInfo& info) {
        info.aor_replay_seconds += dt;
        info.aor_replays++;
      });
      st.slot = slot;  // the previous slot is let go: the replica now lives in this one
      st.since_copy++;
      if (!verify) return Status::OK();
      return VerifyAor(i, step, region, neighbour);
    }
    why = replayed.message();
  } else {
    why = st.reason.empty() ? "first snapshot of this session" : st.reason;
  }

  // No valid replica of step s−1: copy rank dp+1's shard of step s, and start a replica from it.
  const auto t0 = Clock::now();
  REFT_RETURN_NOT_OK(CopyAor(i, step, region, neighbour));
  // The copy is the owner's state after iteration `step`, at optimizer step h.step.
  st.replica.emplace(next, static_cast<uint64_t>(step), h.step, options_.aor_threads);
  st.slot = slot;
  st.since_copy = 0;
  st.probation_left = options_.aor_probation_steps;
  st.reason.clear();
  ctx_.info->Update([&](SessionInfo& info) {
    info.aor_copy_seconds += seconds(t0);
    info.aor_copies++;
    info.aor_last_copy = at + why;
  });
  PublishAorState();
  return Status::OK();
}

Status SnapshotWriter::VerifyAor(size_t i, int64_t step, uint8_t* region,
                                 const store::RankKey& neighbour) {
  const protect::AorBinding& b = plan_->slot.aor.bindings[i];
  AorState& st = aor_[i];
  const std::string at = "step " + std::to_string(step) + " '" + b.buffer + "': ";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> owner(StateBytes(b));
  Status copied = CopyAor(i, step, owner.data(), neighbour);
  if (copied.code() == StatusCode::kLost) {
    // The owner moved on before this rank could compare (its slot of `step` was re-used). The
    // replay stands, as on any step between checks; the check is due again next step.
    ctx_.info->Update([&](SessionInfo& info) {
      info.aor_last_copy = at + "comparison deferred: " + copied.message();
    });
    return Status::OK();
  }
  REFT_RETURN_NOT_OK(copied);
  const bool same = std::memcmp(owner.data(), region, owner.size()) == 0;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx_.info->Update([&](SessionInfo& info) {
    info.aor_copy_seconds += dt;
    info.aor_verified++;
    if (!same) info.aor_mismatches++;
  });
  if (same) {
    st.since_copy = 0;
    if (st.probation_left > 0 && --st.probation_left == 0) PublishAorState();
    return Status::OK();
  }
  // The replay is not the owner's state: the owner's kernel is not what was declared (or not
  // replayable at all). The copy wins, and this shard is copied from now on.
  std::memcpy(region, owner.data(), owner.size());
  const std::string why = "off: mismatch at step " + std::to_string(step);
  LogWarning("AOR of optimizer shard '" + b.buffer + "' (job " + rank_.job + ", rank dp " +
             std::to_string((rank_.dp + 1) % plan_->slot.geometry.m) +
             "): the replay differs from the owner's state at step " + std::to_string(step) +
             "; the shard is copied from now on");
  TurnAorOff(i, why);
  ctx_.info->Update([&](SessionInfo& info) { info.aor_last_copy = at + why; });
  return Status::OK();
}

}  // namespace reft::local
