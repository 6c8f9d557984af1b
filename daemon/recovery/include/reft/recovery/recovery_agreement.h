#pragma once
/// \file recovery_agreement.h
/// \brief The roles of a job's agreement a restore uses (reft/coord/roles.h and the commit
/// ledger): it never joins, completes, leads a job nor publishes a plan. The PeerNode stays the
/// restore's transport (who is alive, where, the Peer client); agreement comes only from here.

#include "reft/coord/roles.h"
#include "reft/local/commit_coordinator.h"

namespace reft::recovery {

/// \brief What ReftLoad relies on. Locator and PublishedCopier take `slots` alone.
struct RecoveryAgreement {
  local::CommitCoordinator* ledger = nullptr;   ///< the commit point, the restore epoch
  coord::JobTimeline* timeline = nullptr;       ///< sync, generation, the fall-back's start
  coord::SlotDirectory* slots = nullptr;        ///< the job's nodes; slots rebuilt here
  coord::RestoreAgreement* restores = nullptr;  ///< the job's one restore decision
  /// Every role from one control plane (a coord::JobCoordinator, or a test's fake).
  template <typename ControlPlane>
  static RecoveryAgreement Of(ControlPlane* c) {
    return {c, c, c, c};
  }
};

}  // namespace reft::recovery
