#pragma once
/// \file single_node_commit.h
/// \brief The commit ledger of a job whose ranks all live on this node: a test double of the
/// control planes' ledgers (etcd_job_coordinator.h, gossip_job_coordinator.h) for the tests and
/// benches of the local channel, which need commits without a cluster.

#include <condition_variable>
#include <map>
#include <optional>
#include <string>

#include "reft/coord/job_book.h"
#include "reft/local/commit_coordinator.h"
#include "reft/mutex.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

/// \brief All ranks of a job are local: commit = every rank completed the step.
///
/// Recovery after a daemon crash during a commit loop: the first time a job is seen, the
/// coordinator looks at the store; if some ranks committed step M and others only completed
/// it, M was complete everywhere (commits happen only then), so the commit is rolled forward
/// for the lagging ranks. No rank ever restores a mix of steps.
class SingleNodeCommitCoordinator : public local::CommitCoordinator {
 public:
  explicit SingleNodeCommitCoordinator(store::SnapshotStore* store);
  using local::CommitCoordinator::Join;
  Status Join(const store::RankKey& rank, const JobLayout& layout,
              const local::Joiner& who) override REFT_EXCLUDES(mu_);
  void Leave(const store::RankKey& rank) override REFT_EXCLUDES(mu_);
  /// Single node: no restore decisions of its own, so every epoch is 0 and none is refused.
  Status Complete(const store::RankKey& rank, int64_t step, int64_t epoch) override
      REFT_EXCLUDES(mu_);
  int64_t RestoreEpoch(const std::string&) override { return 0; }
  std::optional<int64_t> NewestCommitted(const std::string& job) override REFT_EXCLUDES(mu_);
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override REFT_EXCLUDES(mu_);
  Status DeclareReplicated(const store::RankKey& rank,
                           const local::ReplicatedBuffers& buffers) override REFT_EXCLUDES(mu_);

 private:
  struct JobState {
    bool recovered = false;
    JobLayout layout;
    int connected = 0;
    std::optional<int64_t> newest_committed;
    // Ranks that completed each step not committed yet. One timeline: a single node has no
    // generations, restore epochs or layout records of its own.
    PendingCompletions completed;
    // declaring rank (dp 0) -> buffers
    std::map<store::RankKey, local::ReplicatedBuffers> replicated;
  };
  JobState& StateLocked(const std::string& job) REFT_REQUIRES(mu_);  // runs recovery once per job

  store::SnapshotStore* store_;
  Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, JobState> jobs_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::coord
