#pragma once
/// \file persister_agreement.h
/// \brief The roles of a job's agreement the persister uses (reft/coord/roles.h and the commit
/// ledger): it never joins, completes, decides a restore nor publishes a plan. The PeerNode
/// stays its transport (who is alive, the Peer client and the PersistStep handler).

#include "reft/coord/roles.h"
#include "reft/local/commit_coordinator.h"

namespace reft::persister {

/// \brief What persister::Persister relies on.
struct PersisterAgreement {
  local::CommitCoordinator* ledger = nullptr;  ///< waits for a step to commit
  coord::JobTimeline* timeline = nullptr;      ///< the jobs, their layout, generation and floor
  coord::SlotDirectory* slots = nullptr;       ///< the nodes asked to persist their ranks
  coord::PlanBoard* plans = nullptr;           ///< who runs a job's every-K schedule (LeadsJob)
  /// Every role from one control plane (a coord::JobCoordinator, or a test's fake).
  template <typename ControlPlane>
  static PersisterAgreement Of(ControlPlane* c) {
    return {c, c, c, c};
  }
};

}  // namespace reft::persister
