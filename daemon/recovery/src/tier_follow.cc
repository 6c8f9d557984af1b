/// \file tier_follow.cc
/// \brief Following a decision to restore a step of the persistent tier: from memory when some
/// node still holds it (the job committed it there before it fell back to it), else — and
/// directly after a fall-back started here — from the tier, checked against the job's owner.

#include "reft/coord/restore_source.h"
#include "reft/local/job_ownership.h"
#include "reft/recovery/reft_load.h"
#include "reshape_tier.h"
#include "reft/recovery/tier_restore.h"
#include "restore_call.h"

namespace reft::recovery {

Result<ReftLoad::Followed> ReftLoad::FollowTier(RestoreCall& call, LocatedStep step) {
  const coord::RestoreDecision& decision = step.decision;
  if (!step.memory_lost) {
    auto r = RestoreImpl(call.meta, call.stats, call.progress, call.request, std::move(step.known));
    const bool moved = call.Moved(decision.generation);
    if (r.ok() && r->step == decision.step && !moved) {
      return Followed{InEpoch(std::move(*r), step.epoch), std::nullopt};
    }
    if (r.ok() || moved) return Followed{};  // a newer commit or generation appeared
    if (r.status().code() != StatusCode::kLost) return r.status();
    step.tier_detail = "step " + std::to_string(decision.step) + " of " + JobName(call.job()) +
                       " restored from the persistent tier" +
                       (tier_ ? " " + tier_->options().dir : std::string()) + " (generation " +
                       std::to_string(decision.generation) +
                       ": the job fell back to it because " + decision.detail + ")";
  }
  REFT_ASSIGN_OR_RETURN(auto out,
                        ReadTierStep(call, decision.step, decision.generation, step.tier_detail));
  if (!out) return Followed{};
  return Followed{InEpoch(std::move(*out), step.epoch), std::nullopt};
}

Result<std::optional<local::RestoredState>> ReftLoad::ReadTierStep(RestoreCall& call,
                                                                   int64_t step,
                                                                   uint64_t generation,
                                                                   const std::string& detail) {
  using State = std::optional<local::RestoredState>;
  const JobLayout& layout = call.meta.layout;
  const local::RestoreRequest& request = call.request;
  if (tier_ == nullptr) {
    return Status::Lost(detail + "; but this node has no persistent tier configured");
  }
  auto tier = tier_->Get(true);
  if (!tier.ok()) {
    return Status::Lost(detail +
                        "; but the persistent tier cannot be used: " + tier.status().ToString());
  }
  REFT_RETURN_NOT_OK(OwnerAllows(tier->get(), call.job(), step));  // the probe's answer too
  // A step persisted under another layout: reshaped by name when the trainer asked for it.
  std::optional<JobLayout> saved;
  if (request.reshape || request.probe) {
    auto l = PersistedLayout(tier->get(), call.job(), step);
    if (l.ok() && !(*l == layout)) saved = *l;
  }
  if (request.probe) {
    if (call.Moved(generation)) return State();
    local::RestoredState probed;
    probed.step = step;
    probed.source = coord::RestoreSourceName(coord::RestoreSource::kTier);
    probed.reshaped = saved.has_value();
    probed.from_layout = (saved ? *saved : layout).ToString();
    probed.detail = detail + "; probe: saved under layout " + probed.from_layout;
    call.stats->step = step;
    call.stats->detail = probed.detail;
    return State(std::move(probed));
  }
  // Scattered ranges and reads: by name.
  if ((!request.remap.empty() || !request.reads.empty()) && !saved) saved = layout;
  auto r = saved ? ReshapeFromTier(tier->get(), call.meta, step, *saved, request, call.stats)
                 : RestoreFromTier(tier->get(), call.meta, step, options_.piece_bytes, call.stats,
                                   call.progress);
  if (!r.ok()) {
    const StatusCode code = r.status().code();
    if (code == StatusCode::kIoError || code == StatusCode::kPermissionDenied ||
        code == StatusCode::kCorrupted) {
      tier_->Report(r.status());  // the tier's health; a missing file or a bad declaration is not
    }
    if (code == StatusCode::kInvalidArgument) return r.status();
    return Status(r.status().code(),
                  detail + "; reading the persistent tier failed: " + r.status().message());
  }
  if (call.Moved(generation)) return State();
  r->detail = detail;
  call.stats->step = step;
  call.stats->detail = detail;
  return State(std::move(*r));
}

// A persisted step goes to this job's trainers only when its manifests record the job's
// current owner, or none (docs/security.md "Jobs belong to their owner"): a name released and
// claimed by another user does not hand it the old owner's steps.
Status ReftLoad::OwnerAllows(persist::PersistentTier* tier, const std::string& job,
                             int64_t step) {
  if (owners_ == nullptr) return Status::OK();
  auto owner = owners_->Owner(job);
  if (!owner.ok()) {
    return owner.status().WithContext("reading the owner of " + JobName(job) +
                                      " before restoring its persisted step " +
                                      std::to_string(step));
  }
  return CheckPersistedOwner(tier, job, step, *owner);
}

}  // namespace reft::recovery
