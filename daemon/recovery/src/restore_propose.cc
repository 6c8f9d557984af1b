/// \file restore_propose.cc
/// \brief Recording a restore decision in the control plane: a proposal (compare-and-swap on
/// the decision read in the snapshot) and the fall-back to the tier (a compare-and-swap on the
/// generation that records the decision {g+1, P, tier} with it). Either answers the step this
/// restore then follows, or nothing when another rank got there first.

#include "reft/recovery/reft_load.h"
#include "reft/test_point.h"
#include "restore_call.h"

namespace reft::recovery {

Result<std::optional<ReftLoad::LocatedStep>> ReftLoad::Propose(
    RestoreCall& call, const coord::RestoreDecision& decision, int64_t expected_version) {
  auto won = call.agreement.restores->ProposeDecision(call.job(), decision, expected_version);
  if (!won.ok() && won.status().code() == StatusCode::kBusy) {
    return std::optional<LocatedStep>();  // the generation or commit point moved: choose again
  }
  if (!won.ok()) {
    return won.status().WithContext("recording the restore decision of " + JobName(call.job()));
  }
  if (won->generation != decision.generation || won->step != decision.step ||
      won->source != decision.source) {
    return std::optional<LocatedStep>();  // another rank decided first: follow its decision
  }
  call.Agreed("decided here: " + DescribeDecision(*won));
  return std::optional<LocatedStep>(
      LocatedStep{*won, won->version, false, "", call.KnownFor(*won)});
}

std::optional<ReftLoad::LocatedStep> ReftLoad::StartFallBack(RestoreCall& call,
                                                             const coord::GenerationStart& start) {
  const std::string& job = call.job();
  test_point::Reach(kTierScanned, job, this);
  const coord::JobGeneration next = call.agreement.timeline->StartGeneration(job, start);
  if (next.generation != start.from + 1 || next.base_step != start.base_step) {
    return std::nullopt;  // another restore started it: follow it
  }
  // Tell every member now (gossip: they roll back and drop their slots newer than P) before
  // any byte of P is handed to a trainer.
  Status pushed = call.agreement.timeline->SyncNow(job, options_.sync_timeout);
  if (!pushed.ok()) call.stats->warnings.push_back(pushed.message());
  const std::string step = std::to_string(start.base_step);
  const std::string generation = std::to_string(next.generation);
  call.Agreed("decided here: step " + step + " from the persistent tier (generation " +
              generation + ")");
  // The generation's decision (recorded with it) is the epoch: nobody decides again for
  // (g+1, P) while it stands, so the one this node applied is the one started here.
  const int64_t epoch = call.agreement.ledger->RestoreEpoch(job);
  LocatedStep located;
  located.decision = coord::RestoreDecision{next.generation, start.base_step,
                                           coord::RestoreSource::kTier, call.self, start.reason,
                                           epoch};
  located.epoch = epoch;
  located.memory_lost = true;  // the rule fell back because memory cannot serve the step
  located.tier_detail = start.reason + "; restored step " + step + " from the persistent tier " +
                        tier_->options().dir + " (generation " + generation + ")";
  return located;
}

}  // namespace reft::recovery
