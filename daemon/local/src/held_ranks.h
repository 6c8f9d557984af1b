#pragma once
/// \file held_ranks.h
/// \brief One trainer per rank on a node: which live session holds each rank.
///
/// Two trainers snapshotting as one rank would interleave their steps in one slot ring, and a
/// second session of a rank is how a stranger would pose as it. So a hello for a rank that a
/// live session of this node already holds is refused with AlreadyExists (libreft retries it
/// for its connect timeout: a restarted trainer's hello may race its old session's hang-up).
/// The cluster-wide half of the rule (a rank joined on another node) is the control plane's
/// (CommitCoordinator::Join). Thread-safe.

#include <cstdint>
#include <map>
#include <string>

#include "reft/mutex.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::local {

class HeldRanks {
 public:
  /// \brief Session `session` (of process `pid`) holds `rank` from now on; AlreadyExists when
  /// another session does. The caller owns the job: the message may name the other process.
  Status Hold(const store::RankKey& rank, uint64_t session, int32_t pid) REFT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto [it, inserted] = held_.try_emplace(rank, Holder{session, pid});
    if (inserted || it->second.session == session) return Status::OK();
    return Status::AlreadyExists("rank " + rank.ToString() + " is already joined on this node " +
                                 "(pid " + std::to_string(it->second.pid) +
                                 "); one trainer per rank: stop that process first, or give "
                                 "this one a rank of its own (pp, tp, dp)");
  }
  /// \brief Releases `rank` if `session` holds it.
  void Release(const store::RankKey& rank, uint64_t session) REFT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = held_.find(rank);
    if (it != held_.end() && it->second.session == session) held_.erase(it);
  }

 private:
  struct Holder {
    uint64_t session = 0;
    int32_t pid = 0;
  };
  Mutex mu_;
  std::map<store::RankKey, Holder> held_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::local
