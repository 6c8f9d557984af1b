#pragma once
/// \file metered_commit_coordinator.h
/// \brief A CommitCoordinator decorator that records snapshot and commit metrics, so the
/// local channel and the coordinators stay free of metrics plumbing.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "reft/replan/step_cadence.h"
#include "reft/local/commit_coordinator.h"
#include "reft/mutex.h"
#include "reft/observability/metrics.h"

namespace reft::app {

/// \brief Forwards every call to `inner`; on Complete() it counts the rank's snapshot bytes,
/// and when it sees a step committed (on Complete, NewestCommitted or WaitCommitted) it observes the latency from the step's first completion
/// on this node to its commit. Thread-safe.
class MeteredCommitCoordinator final : public local::CommitCoordinator {
 public:
  /// Called with (job, step) whenever this node sees a step of the job committed (often:
  /// it must be cheap).
  using CommittedListener = std::function<void(const std::string& job, int64_t step)>;
  /// Called with the rank whenever its trainer joined here (its hello was accepted).
  using JoinedListener = std::function<void(const store::RankKey& rank)>;

  MeteredCommitCoordinator(std::unique_ptr<local::CommitCoordinator> inner,
                           store::SnapshotStore* store, observability::Metrics* metrics,
                           replan::StepCadence* cadence = nullptr,
                           CommittedListener on_committed = nullptr, JoinedListener on_joined = nullptr);

  using local::CommitCoordinator::Join;
  Status Join(const store::RankKey& rank, const JobLayout& layout,
              const local::Joiner& who) override;
  void Leave(const store::RankKey& rank) override;
  Status Complete(const store::RankKey& rank, int64_t step, int64_t epoch) override;
  int64_t RestoreEpoch(const std::string& job) override { return inner_->RestoreEpoch(job); }
  std::optional<int64_t> NewestCommitted(const std::string& job) override;
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override;
  Status DeclareReplicated(const store::RankKey& rank,
                           const local::ReplicatedBuffers& buffers) override {
    return inner_->DeclareReplicated(rank, buffers);
  }

 private:
  using Clock = std::chrono::steady_clock;
  /// Observes the latency of every step of `job` up to `committed` not observed yet.
  void ObserveCommitted(const std::string& job, std::optional<int64_t> committed);

  std::unique_ptr<local::CommitCoordinator> inner_;
  store::SnapshotStore* store_;
  observability::Metrics* metrics_;
  replan::StepCadence* cadence_;
  CommittedListener on_committed_;
  JoinedListener on_joined_;
  Mutex mu_;
  std::map<std::pair<std::string, int64_t>, Clock::time_point> first_complete_
      REFT_GUARDED_BY(mu_);
};

}  // namespace reft::app
