#pragma once
/// \file commit_coordinator.h
/// \brief Decides when a step is committed job-wide (DESIGN.md §2: complete on every rank) and
/// then commits it in the store. The single-node implementation sees every rank of the job on
/// this daemon; a multi-node coordinator (gossip between daemons) implements the same interface.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
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

/// \brief All ranks of a job are local: commit = every rank completed the step.
///
/// Recovery after a daemon crash during a commit loop: the first time a job is seen, the
/// coordinator looks at the store; if some ranks committed step M and others only completed
/// it, M was complete everywhere (commits happen only then), so the commit is rolled forward
/// for the lagging ranks. No rank ever restores a mix of steps.
class SingleNodeCommitCoordinator : public CommitCoordinator {
 public:
  explicit SingleNodeCommitCoordinator(store::SnapshotStore* store);
  Status Join(const store::RankKey& rank, const JobLayout& layout) override;
  void Leave(const store::RankKey& rank) override;
  Status Complete(const store::RankKey& rank, int64_t step) override;
  std::optional<int64_t> NewestCommitted(const std::string& job) override;
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override;

 private:
  struct JobState {
    bool recovered = false;
    JobLayout layout;
    int connected = 0;
    std::optional<int64_t> newest_committed;
    std::map<int64_t, std::set<store::RankKey>> completed;  // step -> ranks that completed it
  };
  JobState& StateLocked(const std::string& job);  // runs recovery once per job

  store::SnapshotStore* store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, JobState> jobs_;
};

}  // namespace reft::local
