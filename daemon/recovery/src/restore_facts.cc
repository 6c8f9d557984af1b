/// \file restore_facts.cc
/// \brief What the restore rule asks for beyond the snapshot (restore_decider.h): what memory
/// can rebuild of the committed step, and what the persistent tier offers a fall-back.

#include "reft/recovery/reft_load.h"
#include "reshape_tier.h"
#include "restore_call.h"

namespace reft::recovery {

Result<MemoryVerdict> ReftLoad::CheckMemory(RestoreCall& call, const AgreementSnapshot& snapshot) {
  using Kind = MemoryVerdict::Kind;
  const int64_t committed = snapshot.gen.newest_committed.value_or(-1);
  call.checked = Known{};
  call.checked_generation = snapshot.gen.generation;
  // The snapshot was taken right after a sync: the check does not sync again.
  auto check = CheckRestoreOn(call.job(), call.progress, committed, &call.checked);
  if (!check.ok()) {
    // NotFound: slots listed a moment ago are gone (a peer rolled back to a generation this
    // node has not heard of yet): sync and choose again.
    if (call.Moved(snapshot.gen.generation) || check.status().code() == StatusCode::kNotFound) {
      return MemoryVerdict{Kind::kMoved, check.status().ToString()};
    }
    return check.status();
  }
  if (!check->settled.empty()) {  // the report says whom the decision waited for
    RestoreStats* stats = call.stats;
    stats->agreement_detail += (stats->agreement_detail.empty() ? "" : "; ") + check->settled;
  }
  if (check->step != committed || call.Moved(snapshot.gen.generation)) {
    return MemoryVerdict{Kind::kMoved, "a step committed or the generation moved during the "
                                       "restore check of " + JobName(call.job())};
  }
  if (check->undecided()) return MemoryVerdict{Kind::kUndecided, check->Summary()};
  return MemoryVerdict{check->recoverable ? Kind::kRecoverable : Kind::kLost, check->Summary()};
}

TierVerdict ReftLoad::ScanTier(RestoreCall& call, const AgreementSnapshot& snapshot) {
  TierVerdict out;
  const std::string& job = call.job();
  const std::optional<int64_t> memory_step = snapshot.gen.newest_committed;
  // Slots of S freed under us mean a newer step committed (reftd sealed the killed trainers'
  // last snapshots after the restart began): that is no loss, choose again.
  Status synced = call.agreement.timeline->SyncNow(job, options_.sync_timeout);
  if (!synced.ok()) call.stats->warnings.push_back(synced.message());
  if (call.agreement.timeline->Generation(job).newest_committed != memory_step) {
    out.committed_moved = true;
    return out;
  }
  if (tier_ == nullptr) {
    out.unreadable = "no persistent tier is configured";
    return out;
  }
  out.dir = tier_->options().dir;
  auto unreadable = [&](const Status& why) {
    out.unreadable = "the persistent tier " + out.dir + " cannot be read: " + why.ToString();
    return out;
  };
  auto tier = tier_->Get(true);
  if (!tier.ok()) return unreadable(tier.status());
  auto complete = (*tier)->CompleteSteps(job, call.meta.layout);
  if (call.request.reshape && complete.ok() && complete->empty()) {
    // A reshape may read a step persisted under the layout the job ran with before: the
    // layout of the newest step directory's manifests.
    auto listed = (*tier)->ListSteps(job);
    if (listed.ok() && !listed->empty()) {
      auto saved = PersistedLayout(tier->get(), job, listed->back());
      if (saved.ok()) complete = (*tier)->CompleteSteps(job, *saved);
    }
  }
  auto dirs =
      complete.ok() ? (*tier)->ListSteps(job) : Result<std::vector<int64_t>>(complete.status());
  if (!dirs.ok()) {
    tier_->Report(dirs.status());
    return unreadable(dirs.status());
  }
  for (int64_t s : *complete) {
    if (!memory_step || s <= *memory_step) out.newest_complete = s;
  }
  if (!dirs->empty()) out.newest_dir = dirs->back();
  if (out.newest_complete) out.owner = OwnerAllows(tier->get(), job, *out.newest_complete);
  return out;
}

}  // namespace reft::recovery
