/// \file snapshot_writer.cc
/// \brief The steps of one snapshot: begin (a slot laid out by the plan), pull (the device
/// side, the fence), complete (publish, copies, seal, commit report).

#include "snapshot_writer.h"

#include <algorithm>
#include <cstring>

#include "snapshot_has_state.h"

namespace reft::local {

SnapshotWriter::SnapshotWriter(const Context& ctx, SessionBuffers* buffers)
    : ctx_(ctx), options_(*ctx.options), buffers_(buffers) {}

SnapshotWriter::~SnapshotWriter() = default;

void SnapshotWriter::Join(const local_proto::Hello& hello, const protect::Scheme& scheme) {
  hello_ = hello;
  rank_ = store::RankKey(hello.job, hello.coord);
  scheme_ = scheme;
}

void SnapshotWriter::BuffersChanged(const local_proto::Register& added) {
  plan_.reset();  // the slot layout depends on every registered buffer
  aor_.clear();
  NoteAorRegistration(added);
}

Status SnapshotWriter::EnsurePlan() {
  if (plan_) return Status::OK();
  REFT_ASSIGN_OR_RETURN(plan_, MakePlan());
  aor_.assign(plan_->slot.aor.bindings.size(), AorState{});
  PublishAorState();
  return Status::OK();
}

Result<const protect::SlotMeta*> SnapshotWriter::Meta() {
  REFT_RETURN_NOT_OK(EnsurePlan());
  return &plan_->slot.meta;
}

Status SnapshotWriter::CheckEpoch(int64_t step) const {
  if (const int64_t current = ctx_.coordinator->RestoreEpoch(rank_.job); current != epoch_) {
    return StaleEpoch(rank_, step, epoch_, current);
  }
  return Status::OK();
}

Status SnapshotWriter::PeerCopyWanted(int64_t step) const {
  if (ctx_.hung_up != nullptr && ctx_.hung_up->load()) {
    return Status::Cancelled("the copying rank's trainer went away");
  }
  return CheckEpoch(step);
}

Status SnapshotWriter::Begin(const local_proto::SnapshotBegin& m, local_proto::SlotReply* reply,
                             std::vector<int>* fds, UniqueFd* slot_fd) {
  if (writing_) {
    return Status::Busy("step " + std::to_string(writing_->step) +
                        " is still being written; fence() before the next snapshot");
  }
  // Fail before any byte is copied when the job was restored again without this trainer.
  REFT_RETURN_NOT_OK(CheckEpoch(m.step));
  REFT_RETURN_NOT_OK(EnsurePlan());
  REFT_ASSIGN_OR_RETURN(std::vector<aor::StepHyper> hypers, OptimizerHypers(m));
  if (!plan_->configured) {
    REFT_RETURN_NOT_OK(ctx_.store->ConfigureRank(rank_, plan_->layout));
    plan_->configured = true;
  }
  REFT_ASSIGN_OR_RETURN(std::shared_ptr<store::SlotRef> slot, BeginWriteKeepingReplicas(m.step));
  writing_ = Writing{m.step, slot, std::move(hypers)};
  reply->step = m.step;
  Status st = [&]() -> Status {
    for (const auto& region : slot->info().regions) {
      REFT_ASSIGN_OR_RETURN(size_t idx, slot->FindRegion(region.name));
      const uint64_t off = slot->region_file_offset(idx);
      reply->regions.push_back({region.name, off, region.size});
      reply->file_size = std::max(reply->file_size, off + region.size);
    }
    if (slot->info().regions != plan_->layout) {
      return Status::Internal("the slot of step " + std::to_string(m.step) + " has another layout");
    }
    // The meta region is reftd's to write: it describes the slot to every later reader.
    REFT_ASSIGN_OR_RETURN(size_t mi, slot->FindRegion(protect::kRegionMeta));
    const auto& meta = plan_->slot.meta_bytes;
    std::memcpy(slot->region_data(mi), meta.data(), meta.size());
    REFT_ASSIGN_OR_RETURN(int dup, slot->DupFd());
    slot_fd->reset(dup);
    fds->push_back(slot_fd->get());
    if (plan_->staging_for_client) {
      // The client copies its host-memory gradients' slices here before snapshot_staged.
      reply->gradient_file_size = plan_->staging->mem.size();
      for (size_t i = 0; i < plan_->slot.aor.bindings.size(); ++i) {
        if (plan_->aor_gradient[i]->backend != nullptr) continue;
        const auto& b = plan_->slot.aor.bindings[i];
        reply->gradients.push_back({b.buffer, b.staging_offset, b.grad_bytes});
      }
      fds->push_back(plan_->staging->mem.fd());
    }
    return Status::OK();
  }();
  if (!st.ok()) {
    AbortWriting("slot preparation failed");
    return st;
  }
  ctx_.info->Update([&](SessionInfo& i) { i.writing_step = m.step; });
  return Status::OK();
}

Status SnapshotWriter::Pull(int64_t step, const std::vector<kernels::EventExport>& ready,
                            const std::vector<std::pair<int, int>>& ready_keys) {
  if (!writing_ || writing_->step != step) {
    return Status::Protocol("snapshot_staged for step " + std::to_string(step) +
                            " that is not being written");
  }
  const store::SlotRef& slot = *writing_->slot;
  Status pulled = has_ ? PullDeviceGated(slot, ready, ready_keys) : PullDevice(slot, ready, ready_keys);
  if (!pulled.ok()) {
    AbortWriting("device pull failed");
    return pulled.WithContext("snapshot of step " + std::to_string(step));
  }
  return Status::OK();
}

void SnapshotWriter::Complete(int64_t step) {
  std::shared_ptr<store::SlotRef> slot = std::move(writing_->slot);
  Status st = CompleteSlot(step, slot);
  slot.reset();
  if (!st.ok()) {
    ResetAor("step " + std::to_string(step) + " failed on this rank: " + st.message());
    AbortWriting("completion failed");
    failed_steps_[step] = st.WithContext("completing step " + std::to_string(step));
  } else {
    writing_.reset();
    ctx_.info->Update([&](SessionInfo& i) {
      i.writing_step = -1;
      i.last_complete_step = step;
      i.snapshots++;
    });
    st = ctx_.coordinator->Complete(rank_, step, epoch_);
    if (!st.ok()) failed_steps_[step] = st;
  }
  while (failed_steps_.size() > 64) failed_steps_.erase(failed_steps_.begin());
}

void SnapshotWriter::AbortWriting(const char* why) {
  if (!writing_) return;
  // The partial snapshot is discarded; the committed one is untouched. The store refuses only
  // when the slot is already gone (an abort after a failed begin): nothing is left to undo.
  Status st = ctx_.store->Abort(rank_, writing_->step);
  if (!st.ok() && st.code() != StatusCode::kNotFound) {
    failed_steps_[writing_->step] =
        st.WithContext(std::string("discarding step ") + std::to_string(writing_->step) + " (" +
                       why + ")");
  }
  writing_.reset();
  ctx_.info->Update([](SessionInfo& i) { i.writing_step = -1; });
}

std::optional<Status> SnapshotWriter::Failure(int64_t step) const {
  auto it = failed_steps_.find(step);
  if (it == failed_steps_.end()) return std::nullopt;
  return it->second;
}

void SnapshotWriter::Close() {
  AbortWriting("client hung up");
  has_.reset();
  aor_.clear();  // lets go of the slots the replicas lived in
  plan_.reset();
}

}  // namespace reft::local
