#pragma once
/// \file job_coordinator.h
/// \brief The seam between what needs agreement (commit point, job generation, where slots
/// are, how a job restores) and the control plane that provides it. Two implementations:
/// - `coord::EtcdJobCoordinator` (daemon/coord): agreement in etcd — compare-and-swap for the
///   commit and the generation, linearizable reads for every restore. The production path for
///   more than one node (docs/coordination.md).
/// - `DistributedCommitCoordinator` (this component): completion sets exchanged between the
///   daemons themselves, for a few nodes without etcd. It has no consensus: the limits are
///   written in docs/coordination.md.
/// The roles it bundles, and which consumer uses which, are in reft/coord/roles.h.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/agreement.h"
#include "reft/coord/roles.h"
#include "reft/local/commit_coordinator.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::peer {

// The agreed records live in daemon/coord/interface (reft/coord/agreement.h); the names below
// keep the seam's callers spelled as before.
using coord::GenerationStart;
using coord::JobGeneration;
using coord::PlanPublisher;
using coord::PublishedPlan;
using coord::RestoreDecision;
using coord::StepCompletionReport;

/// \brief What the control plane knows about one node's liveness.
enum class NodeLiveness {
  kAlive,    ///< registered and not declared dead: its answers must be waited for
  kDead,     ///< declared dead (lease expired, or SWIM's verdict): its memory is gone
  kUnknown,  ///< never heard of
};

/// \brief Every role of a job's agreement in one object: what a control plane implements
/// (coord::EtcdJobCoordinator, DistributedCommitCoordinator) and what reftd wires. Consumers
/// take the roles they use (reft/coord/roles.h), not this.
class JobCoordinator : public local::CommitCoordinator,
                       public coord::JobTimeline,
                       public coord::SlotDirectory,
                       public coord::RestoreAgreement,
                       public coord::PlanBoard,
                       public coord::CompletionInbox {
 public:
  using GenerationListener = coord::JobTimeline::GenerationListener;
  using LeadershipListener = coord::PlanBoard::LeadershipListener;

  /// Starts background work (watches, exchanges). After the node directory started.
  virtual Status Start() = 0;
  virtual void Stop() = 0;

  /// \brief Directory for the per-job generation records next to the slots (reftd:
  /// <shm_dir>/commit-state), so a restarted daemon knows the generation of its adopted slots.
  virtual void SetStateDir(std::string dir) = 0;
};

}  // namespace reft::peer
