#pragma once
/// \file commit_coordinator.h
/// \brief The seam between the local channel and the commit decision: which step is committed
/// job-wide (complete on every rank of the job, docs/architecture.md "Glossary"), committed in
/// the store only then. reft_local has the single-node implementation
/// (reft/local/single_node_commit.h); daemon/peer's DistributedCommitCoordinator decides across
/// nodes. Header only: the components that implement it do not link the local server.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "reft/job_layout.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

/// \brief Commit decisions for every job on this daemon. Thread-safe.
class CommitCoordinator {
 public:
  virtual ~CommitCoordinator() = default;
  /// \brief A trainer of `rank` connected with `layout`. InvalidArgument when the rank lies
  /// outside the layout or the layout differs from the one the job's connected ranks use.
  virtual Status Join(const store::RankKey& rank, const JobLayout& layout) = 0;
  /// \brief The trainer of `rank` disconnected (its completions stay counted).
  virtual void Leave(const store::RankKey& rank) = 0;
  /// \brief `rank` sealed `step` (state complete). When every rank of the job has completed
  /// it, the coordinator commits it for each rank in the store and wakes WaitCommitted().
  virtual Status Complete(const store::RankKey& rank, int64_t step) = 0;
  /// \brief Newest step committed job-wide, if any (restores never read anything newer).
  virtual std::optional<int64_t> NewestCommitted(const std::string& job) = 0;
  /// \brief Waits until a step >= `step` of `job` is committed; false on timeout.
  virtual bool WaitCommitted(const std::string& job, int64_t step,
                             std::chrono::milliseconds timeout) = 0;
};

}  // namespace reft::local
