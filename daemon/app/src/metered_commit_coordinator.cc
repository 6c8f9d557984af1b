#include "metered_commit_coordinator.h"

namespace reft::app {

MeteredCommitCoordinator::MeteredCommitCoordinator(
    std::unique_ptr<local::CommitCoordinator> inner, store::SnapshotStore* store,
    observability::Metrics* metrics, replan::StepCadence* cadence, CommittedListener on_committed,
    JoinedListener on_joined)
    : inner_(std::move(inner)),
      store_(store),
      metrics_(metrics),
      cadence_(cadence),
      on_committed_(std::move(on_committed)),
      on_joined_(std::move(on_joined)) {}

Status MeteredCommitCoordinator::Join(const store::RankKey& rank, const JobLayout& layout,
                                      const local::Joiner& who) {
  Status st = inner_->Join(rank, layout, who);
  if (st.ok() && on_joined_) on_joined_(rank);
  return st;
}

void MeteredCommitCoordinator::Leave(const store::RankKey& rank) { inner_->Leave(rank); }

Status MeteredCommitCoordinator::Complete(const store::RankKey& rank, int64_t step,
                                          int64_t epoch) {
  const auto key = std::make_pair(rank.job, step);
  const auto now = Clock::now();
  {
    MutexLock lock(mu_);
    first_complete_.emplace(key, now);
  }
  Status st = inner_->Complete(rank, step, epoch);
  if (!st.ok()) {  // refused (a trainer of an older restore epoch): nothing to count
    MutexLock lock(mu_);
    first_complete_.erase(key);
    return st;
  }
  if (cadence_ != nullptr) cadence_->Note(rank.job, step, now);
  if (auto slot = store_->Get(rank, step); slot.ok()) {
    metrics_->RecordSnapshot((*slot)->info().payload_bytes);
  }
  ObserveCommitted(rank.job, inner_->NewestCommitted(rank.job));
  return st;
}

void MeteredCommitCoordinator::ObserveCommitted(const std::string& job,
                                                std::optional<int64_t> committed) {
  if (!committed) return;
  if (on_committed_) on_committed_(job, *committed);
  MutexLock lock(mu_);
  // Observe every step of this job that the commit covered, then forget them.
  for (auto it = first_complete_.lower_bound({job, INT64_MIN});
       it != first_complete_.end() && it->first.first == job && it->first.second <= *committed;) {
    metrics_->ObserveCommitLatency(std::chrono::duration<double>(Clock::now() - it->second).count());
    it = first_complete_.erase(it);
  }
}

std::optional<int64_t> MeteredCommitCoordinator::NewestCommitted(const std::string& job) {
  auto committed = inner_->NewestCommitted(job);
  ObserveCommitted(job, committed);
  return committed;
}

bool MeteredCommitCoordinator::WaitCommitted(const std::string& job, int64_t step,
                                             std::chrono::milliseconds timeout) {
  const bool committed = inner_->WaitCommitted(job, step, timeout);
  // A distributed commit lands after Complete() returned: the waiter is the first to see it.
  if (committed) ObserveCommitted(job, inner_->NewestCommitted(job));
  return committed;
}

}  // namespace reft::app
