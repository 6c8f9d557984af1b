#pragma once
/// \file restore_call.h
/// \brief The types the job-wide restore decision passes between its pieces (private to
/// daemon/recovery): the driver (restore_driver.cc), the facts it gathers
/// (restore_facts.cc), the proposal and fall-back that record a decision (restore_propose.cc)
/// and the restore units that follow one (memory_follow.cc, tier_follow.cc).

#include <chrono>
#include <optional>
#include <string>

#include "reft/coord/agreement.h"
#include "reft/recovery/recovery_agreement.h"
#include "reft/recovery/reft_load.h"

namespace reft::recovery {

/// One restore: its arguments, the roles it agrees through, and the view its own check located.
struct ReftLoad::RestoreCall {
  const protect::SlotMeta& meta;
  RestoreStats* stats;
  const ProgressCallback& progress;
  const local::RestoreRequest& request;
  RecoveryAgreement agreement;
  std::string self;  ///< this node
  std::chrono::steady_clock::time_point start;
  /// The view the check on this node located, with the generation it was taken in: a decision
  /// for the same (generation, step) is restored from it instead of locating every slot again.
  Known checked;
  uint64_t checked_generation = 0;

  const std::string& job() const { return meta.job; }

  /// Adds the time spent agreeing so far and how (`RestoreStats::agreement`).
  void Agreed(const std::string& how) {
    stats->agreement += std::chrono::steady_clock::now() - start;
    stats->agreement_detail += (stats->agreement_detail.empty() ? "" : "; ") + how;
    if (!agreement.restores->HasConsensus()) {
      stats->agreement_detail += " [no consensus store: this node's own decision]";
    }
  }

  /// What RestoreImpl may reuse for `d`: the checked view once (a retry locates afresh).
  Known KnownFor(const coord::RestoreDecision& d) {
    Known k;
    if (checked.view && checked_generation == d.generation && checked.step == d.step) {
      k = std::move(checked);
    }
    checked = Known{};
    k.step = d.step;
    return k;
  }

  /// Whether the job left `generation` (a fall-back started elsewhere).
  bool Moved(uint64_t generation) const {
    return agreement.timeline->Generation(meta.job).generation != generation;
  }
};

/// A decided step as this restore follows it. Every decision — recorded by another rank,
/// proposed here, or the fall-back started here — reaches the restore units this one way.
struct ReftLoad::LocatedStep {
  coord::RestoreDecision decision;  ///< its generation is the fence: the job must still be in it
  int64_t epoch = 0;               ///< the restore epoch handed to the trainer
  /// The fall-back was started here because memory cannot rebuild the step: the tier is read
  /// directly (`tier_detail` says why), without looking for the step in memory first.
  bool memory_lost = false;
  std::string tier_detail;
  Known known;
};

/// What following a step came to: a state, the step lost from memory since the decision (the
/// job falls back), or neither (the job moved: take a new snapshot).
struct ReftLoad::Followed {
  std::optional<local::RestoredState> state;
  std::optional<std::string> lost;
};

/// What one attempt came to: a state, or the reason to take a new snapshot.
struct ReftLoad::Attempt {
  std::optional<local::RestoredState> state;
  Status retry;
};

/// "job 'x'", as every message of the decision names it.
inline std::string JobName(const std::string& job) { return "job '" + job + "'"; }

/// A state handed to the trainer carries the restore epoch of the decision it followed.
inline local::RestoredState InEpoch(local::RestoredState state, int64_t epoch) {
  state.epoch = epoch;
  return state;
}

}  // namespace reft::recovery
