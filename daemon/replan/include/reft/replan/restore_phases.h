#pragma once
/// \file restore_phases.h
/// \brief The phases of a recovery in a rank's restore report (docs/recovery.md "Phases of a
/// recovery"). `PhasedRestore` wraps reftd's REFT-load for the local channel: it times the
/// rank's restore on this node, adds when the rank's trainer said hello here (`RankHellos`, fed
/// by the local channel's join) and the job-wide phases of the loss the restore recovers from —
/// the published decision's (JobPhasesOf), when its generation and committed step are the ones
/// restored — and hands the phases to an observer (the metric) after every restore of a step.

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "reft/coord/roles.h"
#include "reft/local/recovery_hooks.h"
#include "reft/mutex.h"
#include "reft/replan/plan_decision.h"
#include "reft/store/snapshot_store.h"

namespace reft::replan {

/// \brief When each rank's trainer last said hello (joined its job) on this node. Thread-safe.
class RankHellos {
 public:
  void Note(const store::RankKey& rank, int64_t at_ms);
  /// 0: not since this reftd started.
  int64_t Get(const store::RankKey& rank) const;
  /// \brief Forgets the ranks of `job` (it is forgotten on this node).
  void Forget(const std::string& job);

 private:
  mutable Mutex mu_;
  std::map<store::RankKey, int64_t> hellos_ REFT_GUARDED_BY(mu_);
};

/// \brief The phases as the restore report carries them: those that happened, in order.
std::vector<local::RestorePhaseTime> PhaseList(const RecoveryPhases& phases);

class PhasedRestore final : public local::RestoreProvider {
 public:
  using Observer = std::function<void(const RecoveryPhases& phases)>;

  /// `inner`, the roles and `hellos` must outlive this object; `plans` and `timeline` may be
  /// null (no job-wide phases: the gossip control plane publishes no decisions).
  PhasedRestore(local::RestoreProvider* inner, std::string node_id, coord::PlanBoard* plans,
                coord::JobTimeline* timeline, const RankHellos* hellos, Observer observer = nullptr);

  Result<local::RestoredState> Restore(const protect::SlotMeta& meta, const local::RestoreRequest& request) override;

 private:
  local::RestoreProvider* const inner_;
  const std::string node_id_;
  coord::PlanBoard* const plans_;
  coord::JobTimeline* const timeline_;
  const RankHellos* const hellos_;
  const Observer observer_;
};

}  // namespace reft::replan
