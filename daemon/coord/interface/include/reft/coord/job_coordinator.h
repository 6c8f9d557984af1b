#pragma once
/// \file job_coordinator.h
/// \brief The seam between what needs agreement (commit point, job generation, where slots
/// are, how a job restores) and the control plane that provides it. Two implementations:
/// - `coord::EtcdJobCoordinator` (daemon/coord): agreement in etcd — compare-and-swap for the
///   commit and the generation, linearizable reads for every restore. The production path for
///   more than one node (docs/coordination.md).
/// - `coord::GossipJobCoordinator` (daemon/coord): completion sets exchanged between the
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

namespace reft::coord {

/// \brief Every role of a job's agreement in one object: what a control plane implements
/// (EtcdJobCoordinator, GossipJobCoordinator) and what reftd wires. Consumers
/// take the roles they use (reft/coord/roles.h), not this.
class JobCoordinator : public local::CommitCoordinator,
                       public JobTimeline,
                       public SlotDirectory,
                       public RestoreAgreement,
                       public PlanBoard,
                       public CompletionInbox {
 public:
  using GenerationListener = JobTimeline::GenerationListener;
  using LeadershipListener = PlanBoard::LeadershipListener;

  /// Starts background work (watches, exchanges). After the node directory started.
  virtual Status Start() = 0;
  virtual void Stop() = 0;

  /// \brief Directory for the per-job generation records next to the slots (reftd:
  /// <shm_dir>/commit-state), so a restarted daemon knows the generation of its adopted slots.
  virtual void SetStateDir(std::string dir) = 0;
};

}  // namespace reft::coord
