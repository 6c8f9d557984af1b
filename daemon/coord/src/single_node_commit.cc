#include "single_node_commit.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "reft/log.h"

namespace reft::coord {

namespace {
// Every completion of a single node is of the one timeline it knows.
const TimelineStamp kOneTimeline{};
}  // namespace

SingleNodeCommitCoordinator::SingleNodeCommitCoordinator(store::SnapshotStore* store)
    : store_(store) {}

SingleNodeCommitCoordinator::JobState& SingleNodeCommitCoordinator::StateLocked(
    const std::string& job) {
  JobState& st = jobs_[job];
  if (st.recovered) return st;
  st.recovered = true;
  std::vector<store::RankKey> ranks = store_->Ranks(job);
  std::optional<int64_t> newest;
  for (const auto& r : ranks) {
    auto c = store_->NewestCommitted(r);
    if (c && (!newest || *c > *newest)) newest = c;
  }
  if (newest) {
    // Roll a half-finished commit forward (see the class comment).
    for (const auto& r : ranks) {
      auto c = store_->NewestCommitted(r);
      if (c && *c >= *newest) continue;
      if (!store_->Get(r, *newest).ok()) continue;
      // A rank whose commit cannot be rolled forward keeps its older committed step; restores
      // still agree (they read the job's newest committed step), so this is worth a warning.
      Status st = store_->Commit(r, *newest);
      if (!st.ok()) {
        LogWarning("rolling the commit of step " + std::to_string(*newest) + " forward to " +
                   r.ToString() + " failed: " + st.ToString());
      }
    }
  }
  st.newest_committed = newest;
  return st;
}

// The owner was checked (and claimed) by the node's JobOwners before the join.
Status SingleNodeCommitCoordinator::Join(const store::RankKey& rank, const JobLayout& layout,
                                         const local::Joiner&) {
  REFT_RETURN_NOT_OK(layout.CheckRank(rank));
  MutexLock lock(mu_);
  JobState& st = StateLocked(rank.job);
  if (st.connected > 0 && !(st.layout == layout)) {
    return local::LayoutConflict(rank, st.layout, layout);
  }
  if (st.connected == 0 && !(st.layout == layout)) {
    // A new layout (the job was reconfigured): completions counted for the old world are void.
    st.completed.Clear();
  }
  st.layout = layout;
  ++st.connected;
  return Status::OK();
}

void SingleNodeCommitCoordinator::Leave(const store::RankKey& rank) {
  MutexLock lock(mu_);
  auto it = jobs_.find(rank.job);
  if (it != jobs_.end() && it->second.connected > 0) --it->second.connected;
  if (it != jobs_.end()) it->second.replicated.erase(rank);
}

Status SingleNodeCommitCoordinator::DeclareReplicated(const store::RankKey& rank,
                                                      const local::ReplicatedBuffers& buffers) {
  MutexLock lock(mu_);
  JobState& st = StateLocked(rank.job);
  for (const auto& [other, theirs] : st.replicated) {
    if (other == rank) continue;
    REFT_RETURN_NOT_OK(local::CheckReplicatedAgree(rank, buffers, other, theirs));
  }
  st.replicated[rank] = buffers;
  return Status::OK();
}

Status SingleNodeCommitCoordinator::Complete(const store::RankKey& rank, int64_t step, int64_t) {
  std::vector<store::RankKey> to_commit;
  {
    MutexLock lock(mu_);
    JobState& st = StateLocked(rank.job);
    if (st.newest_committed && step <= *st.newest_committed) return Status::OK();
    st.completed.Add(step, PendingCompletions::kMergedSource, kOneTimeline, {rank});
    if (st.completed.Covered(step, kOneTimeline, &st.layout) < st.layout.world()) {
      return Status::OK();
    }
    const std::set<store::RankKey> done = st.completed.RanksOf(step);
    to_commit.assign(done.begin(), done.end());
  }
  // Commit outside the lock (the store checksums nothing here, but may touch headers).
  Status first_error;
  for (const auto& r : to_commit) {
    Status s = store_->Commit(r, step);
    if (!s.ok() && first_error.ok()) first_error = s.WithContext("committing " + r.ToString());
  }
  {
    MutexLock lock(mu_);
    JobState& st = jobs_[rank.job];
    if (first_error.ok() && (!st.newest_committed || step > *st.newest_committed)) {
      st.newest_committed = step;
    }
    st.completed.DropThrough(step);
  }
  cv_.notify_all();
  return first_error;
}

std::optional<int64_t> SingleNodeCommitCoordinator::NewestCommitted(const std::string& job) {
  MutexLock lock(mu_);
  return StateLocked(job).newest_committed;
}

bool SingleNodeCommitCoordinator::WaitCommitted(const std::string& job, int64_t step,
                                                std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return lock.WaitFor(cv_, timeout, [&]() REFT_REQUIRES(mu_) {
    auto n = StateLocked(job).newest_committed;
    return n && *n >= step;
  });
}

}  // namespace reft::coord
