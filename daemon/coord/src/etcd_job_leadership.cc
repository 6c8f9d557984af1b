// EtcdJobCoordinator, leadership: the campaign for a job's coordinator key, what the winner takes
// over, and when it gives the key back.

#include "reft/coord/etcd_job_coordinator.h"

#include <algorithm>
#include <set>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "etcd_results.h"
#include "keys.h"
#include "generation_file.h"
#include "reft/store/job_commit.h"

namespace reft::coord {

std::optional<int64_t> EtcdJobCoordinator::LastHeardFrom(const std::string& job,
                                                         const std::string& node) {
  reft::MutexLock lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  auto heard = it->second.last_heard_ms.find(node);
  if (heard == it->second.last_heard_ms.end()) return std::nullopt;
  return heard->second;
}

bool EtcdJobCoordinator::LeadsJob(const std::string& job) {
  reft::MutexLock lock(mu_);
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second.leader;
}

void EtcdJobCoordinator::Campaign(const std::string& job) {
  const int64_t lease = nodes_->lease();
  // A node with trainers of the job connected, or with slots of it: the job needs a coordinator
  // between two runs too (its planner decides how the job goes on after a loss, when every
  // trainer has exited), and the nodes holding its state are the ones that outlive them.
  // The worker calls this for every job at each wake-up (every commit): the store is scanned
  // only when this node would campaign and has no trainer of the job connected.
  bool connected;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.want_lead || st.leader) return;
    connected = st.connected > 0;
  }
  if (!connected && store_->Ranks(job).empty()) return;
  if (lease == 0) {
    reft::MutexLock lock(mu_);
    RetryLaterLocked();  // not registered (again) yet
    return;
  }
  Txn t;
  t.IfCreateRevision(keys::Coordinator(job), Compare::kEqual, 0)
      .ThenPut(keys::Coordinator(job), Encode(NodeRef{nodes_->node_id(), -1}), lease)
      .ElseGet(keys::Coordinator(job));
  auto r = etcd_->Commit(t);
  if (!r.ok()) {
    reft::MutexLock lock(mu_);
    RetryLaterLocked();
    return;
  }
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    st.want_lead = false;
    std::optional<KeyValue> key;
    if (r->succeeded) {
      key = KeyValue{keys::Coordinator(job), Encode(NodeRef{nodes_->node_id(), -1}), r->revision,
                     r->revision, 1, lease};
    } else {
      // Someone leads: possibly this node under an older lease that etcd still holds (it
      // expires, the watch reports the delete, and this node campaigns again), or this node
      // under its current lease after its completions watch was reset: it leads again.
      if (!r->gets.empty()) key = FirstKey(r->gets[0]);
      if (!HeldBy(key, nodes_->node_id(), lease)) return;
    }
    // The term starts now, not when the watch reports the key: a plan or commit this node
    // makes as coordinator before that event is fenced by the term it holds.
    if (SeenLocked(st, keys::Coordinator(job), key->mod_revision)) {
      ApplyCoordinatorLocked(job, st, key);
    }
  }
  BecomeLeader(job);
}

// A coordinator with neither trainers nor slots of the job here gives the key back: a node that
// holds the job's state campaigns for it (its watch sees the key go), and a job nobody holds
// anything of is left uncoordinated, so that its records can be forgotten (EtcdJobRecords).
void EtcdJobCoordinator::MaybeResign(const std::string& job) {
  int64_t term = 0;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.leader || st.connected > 0 || !st.pending.empty() || st.coordinator_rev == 0) {
      return;
    }
    term = st.coordinator_rev;
  }
  if (!store_->Ranks(job).empty()) return;
  Txn t;
  t.IfCreateRevision(keys::Coordinator(job), Compare::kEqual, term)
      .ThenDelete(keys::Coordinator(job));
  auto r = etcd_->Commit(t);
  if (!r.ok()) {
    reft::MutexLock lock(mu_);
    RetryLaterLocked();
    return;
  }
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (!r->succeeded || st.coordinator_rev != term || st.connected > 0) return;
  st.leader = false;
  st.completions.Clear();
  TakeLeaderWatchesLocked(st, &cancel_watches_);
  spdlog::info("job {}: no trainer or slot of the job here; node {} stops coordinating it", job,
               nodes_->node_id());
}

void EtcdJobCoordinator::TakeLeaderWatchesLocked(JobState& st, std::vector<int64_t>* out) {
  for (int64_t* w : {&st.completions_watch, &st.joined_watch}) {
    if (*w != 0) out->push_back(*w);
    *w = 0;
  }
  st.joined_at.clear();
}

void EtcdJobCoordinator::BecomeLeader(const std::string& job) {
  auto locations = etcd_->GetPrefix(keys::LocationsPrefix(job));
  auto completions = etcd_->GetPrefix(keys::CompletionsPrefix(job));
  auto joined = etcd_->GetPrefix(keys::JoinedPrefix(job));
  if (!locations.ok() || !completions.ok() || !joined.ok()) {
    // Leading without a view would commit nothing; give the key back and try again.
    (void)etcd_->Delete(keys::Coordinator(job));
    reft::MutexLock lock(mu_);
    jobs_[job].want_lead = true;
    RetryLaterLocked();
    return;
  }
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    st.leader = true;
    st.locations.clear();
    for (const auto& kv : locations->kvs) {
      store::RankKey rank;
      auto ref = DecodeNodeRef(kv.key, kv.value);
      if (ref.ok() && keys::ParseRankKey(job, "locations", kv.key, &rank)) {
        st.locations[rank] = ref->node;
      }
    }
    // Reports already received stay (a coordinator that re-reads after its completions watch
    // was reset keeps them); the records in etcd are added to them.
    st.joined_at.clear();
    for (const auto& kv : joined->kvs) {
      store::RankKey rank;
      auto ref = DecodeNodeRef(kv.key, kv.value);
      if (ref.ok() && keys::ParseRankKey(job, "joined", kv.key, &rank)) {
        st.joined_at[rank] = ref->node;
      }
    }
  }
  // Which node each rank is joined on, for the completion reports (ReceiveCompletion).
  auto jw = etcd_->Watch(keys::JoinedPrefix(job), true, joined->revision + 1,
                         [this, job](const WatchUpdate& u) { OnJoinedEvent(job, u); });
  WatchUpdate initial;
  for (const auto& kv : completions->kvs) initial.events.push_back({WatchEvent::Type::kPut, kv});
  OnCompletionEvent(job, initial);
  // Puts only: the deletes are this node's own commits (and a new generation's reset, which the
  // generation watch reports), so etcd need not send the coordinator one event per node for them.
  auto h = etcd_->Watch(keys::CompletionsPrefix(job), true, completions->revision + 1,
                        [this, job](const WatchUpdate& u) { OnCompletionEvent(job, u); },
                        WatchEvents::kPutsOnly);
  {
    reft::MutexLock lock(mu_);
    if (h.ok()) jobs_[job].completions_watch = *h;
    if (jw.ok()) jobs_[job].joined_watch = *jw;
    spdlog::info("job {}: node {} coordinates the job's commits", job, nodes_->node_id());
    work_ = true;
  }
  std::vector<LeadershipListener> listeners;
  {
    reft::MutexLock lock(listeners_mu_);
    listeners = leadership_listeners_;
  }
  for (const auto& l : listeners) l(job);
}

bool EtcdJobCoordinator::LeadsAnyJob() {
  reft::MutexLock lock(mu_);
  for (const auto& [job, st] : jobs_) {
    if (st.leader) return true;
  }
  return false;
}

}  // namespace reft::coord
