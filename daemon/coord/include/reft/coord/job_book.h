#pragma once
/// \file job_book.h
/// \brief What both control planes record the same way about the jobs of this node.
///
/// etcd and gossip agree differently (compare-and-swap in etcd; unions of completion sets by
/// gossip), but what they keep about this node is the same: which ranks have a trainer
/// connected here — a rank may briefly have two sessions while a restarted trainer replaces the
/// old one, and it stays joined until the last one leaves — and the generation changes waiting
/// to be told to the daemon's listeners, which run after the control plane's lock is released
/// because they call back into it; and, where this node decides a job's commits, the
/// completions not committed yet (PendingCompletions, pending_completions.h: counted only in the
/// job's current timeline). One copy of each, used by EtcdJobCoordinator and
/// GossipJobCoordinator; the single-node ledger (SingleNodeCommitCoordinator) keeps its
/// completions in the same PendingCompletions.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/pending_completions.h"
#include "reft/coord/roles.h"
#include "reft/mutex.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

/// \brief The ranks with a trainer connected to this node, counted by session. Not thread-safe:
/// its owner guards it with its own lock.
class JoinedSessions {
 public:
  void Add(const store::RankKey& rank) { ++sessions_[rank]; }
  /// Ends one session of `rank`; true when that was its last one (the rank left this node).
  bool Remove(const store::RankKey& rank) {
    auto it = sessions_.find(rank);
    if (it == sessions_.end() || --it->second > 0) return false;
    sessions_.erase(it);
    return true;
  }
  bool Contains(const store::RankKey& rank) const { return sessions_.count(rank) > 0; }
  /// True when a rank of `job` is connected here.
  bool AnyOf(const std::string& job) const {
    for (const auto& entry : sessions_) {
      if (entry.first.job == job) return true;
    }
    return false;
  }
  /// The connected ranks (of `job`, or of every job), in rank order.
  std::vector<store::RankKey> Ranks(const std::optional<std::string>& job = std::nullopt) const {
    std::vector<store::RankKey> out;
    for (const auto& entry : sessions_) {
      if (!job || entry.first.job == *job) out.push_back(entry.first);
    }
    return out;
  }

 private:
  std::map<store::RankKey, int> sessions_;
};

/// \brief Generation changes, queued where the control plane decides them (under its lock) and
/// delivered to the listeners in order once it released that lock. Thread-safe; its locks are
/// leaves (a listener may call back into the control plane).
class GenerationEvents {
 public:
  using Listener = JobTimeline::GenerationListener;

  void AddListener(Listener listener) {
    MutexLock lock(listeners_mu_);
    listeners_.push_back(std::move(listener));
  }
  /// `job` moved to `generation`, dropping `dropped` slots newer than its base.
  void Queue(std::string job, JobGeneration generation, int dropped) {
    MutexLock lock(queue_mu_);
    queued_.push_back({std::move(job), std::move(generation), dropped});
  }
  /// Tells every listener what was queued. Call with no lock of the control plane held.
  void Deliver() {
    std::vector<Event> events;
    {
      MutexLock lock(queue_mu_);
      events.swap(queued_);
    }
    if (events.empty()) return;
    MutexLock lock(listeners_mu_);  // one delivery at a time: listeners see changes in order
    for (const auto& e : events) {
      for (const auto& l : listeners_) l(e.job, e.generation, e.dropped);
    }
  }

 private:
  struct Event {
    std::string job;
    JobGeneration generation;
    int dropped = 0;
  };
  Mutex queue_mu_;
  std::vector<Event> queued_ REFT_GUARDED_BY(queue_mu_);
  Mutex listeners_mu_;
  std::vector<Listener> listeners_ REFT_GUARDED_BY(listeners_mu_);
};

}  // namespace reft::coord
