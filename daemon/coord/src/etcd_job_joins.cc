// EtcdJobCoordinator, joins and slot locations: a rank's joined key, the job's layout and owner
// claimed with it, where each rank runs and where its slot of the committed step lives.

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

// The owner, the layout and the rank's joined key in etcd, in one transaction:
// - the owner is checked first (a stranger learns nothing of the job: not its layout, nor where
//   its ranks run), and claimed create-only with the layout when the job has none;
// - the layout is created, kept, or replaced when no trainer of the old one is joined;
// - the rank's joined key is created only if no other node holds it (create-revision compare).
// Read from etcd at every join, not from this node's cache: watches deliver history
// asynchronously, and a launcher restarts a job at another scale the moment its trainers exit.
Result<int64_t> EtcdJobCoordinator::RecordJoin(const store::RankKey& rank, const JobLayout& layout,
                                               const local::Joiner& who) {
  const auto settle = std::chrono::steady_clock::now() + options_.departed_wait;
  // The joined keys (one per rank of the job) are read only when the layout differs: a job
  // of W ranks starting must not read O(W) keys per rank.
  bool with_joined = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Txn read;
    read.ThenGet(keys::Owner(rank.job)).ThenGet(keys::Layout(rank.job)).ThenGet(keys::Joined(rank));
    if (with_joined) read.ThenGetPrefix(keys::JoinedPrefix(rank.job));
    auto r = etcd_->Commit(read);
    if (!r.ok() || r->gets.size() != (with_joined ? 4u : 3u)) {
      // The node's JobOwnership admitted the caller against a known owner (it refuses a job
      // whose owner it cannot read), so the join may go on: the commit path waits for etcd,
      // snapshots go on locally, and the worker writes the joined key (compared) later.
      spdlog::warn("job {}: join of {} not checked in etcd: {}", rank.job, rank.ToString(),
                   r.ok() ? "short answer" : r.status().ToString());
      return 0;
    }
    const KeyValue* owner_kv = r->gets[0].kvs.empty() ? nullptr : &r->gets[0].kvs[0];
    const KeyValue* layout_kv = r->gets[1].kvs.empty() ? nullptr : &r->gets[1].kvs[0];
    const KeyValue* joined_kv = r->gets[2].kvs.empty() ? nullptr : &r->gets[2].kvs[0];
    if (owner_kv != nullptr) {
      REFT_ASSIGN_OR_RETURN(local::JobOwner owner, DecodeOwner(owner_kv->key, owner_kv->value));
      if (!local::MayUse(owner, who.caller)) return local::NotYourJob(rank.job, who.caller);
      reft::MutexLock lock(mu_);
      jobs_[rank.job].owner = owner;
    }
    if (joined_kv != nullptr) {
      auto ref = DecodeNodeRef(joined_kv->key, joined_kv->value);
      // Our own key (a trainer of this node restarting) is this node's to keep: the local
      // sessions decide between themselves (HeldRanks).
      if (ref.ok() && ref->node != nodes_->node_id()) {
        return Status::AlreadyExists("rank " + rank.ToString() + " is already joined on node '" +
                                     ref->node + "'; one trainer per rank");
      }
    }
    bool put_layout = true;
    if (layout_kv != nullptr) {
      auto theirs = DecodeLayout(layout_kv->key, layout_kv->value);
      if (!theirs.ok()) return theirs.status();
      {
        reft::MutexLock lock(mu_);
        ApplyLayoutLocked(rank.job, jobs_[rank.job], *layout_kv);
      }
      if (*theirs == layout) {
        put_layout = false;
      } else if (!with_joined) {
        with_joined = true;  // read the layout again with the ranks still joined to it
        --attempt;
        continue;
      } else {
        Status none = CheckNoneJoined(rank, layout, *theirs, r->gets[3].kvs);
        if (!none.ok()) {
          // The old layout's trainers may just have exited: their nodes delete their keys
          // right after. A job that still runs is refused once the wait is over.
          const auto now = std::chrono::steady_clock::now();
          if (now >= settle) return none;
          std::this_thread::sleep_for(
              std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(20),
                                                            settle - now));
          --attempt;  // not a lost compare
          continue;
        }
      }
    }
    const bool claim = owner_kv == nullptr;
    const int64_t lease = nodes_->lease();
    if (!claim && !put_layout && lease == 0) return 0;  // the worker writes the joined key
    Txn write;
    write.IfModRevision(keys::Layout(rank.job), Compare::kEqual,
                        layout_kv ? layout_kv->mod_revision : 0);
    if (claim) {
      write.IfCreateRevision(keys::Owner(rank.job), Compare::kEqual, 0)
          .ThenPut(keys::Owner(rank.job), Encode(who.claim));
    } else {
      write.IfModRevision(keys::Owner(rank.job), Compare::kEqual, owner_kv->mod_revision);
    }
    if (put_layout) write.ThenPut(keys::Layout(rank.job), Encode(layout));
    if (lease != 0) {
      if (joined_kv == nullptr) {
        write.IfCreateRevision(keys::Joined(rank), Compare::kEqual, 0);
      } else {
        write.IfModRevision(keys::Joined(rank), Compare::kEqual, joined_kv->mod_revision);
      }
      write.ThenPut(keys::Joined(rank), Encode(NodeRef{nodes_->node_id(), -1}), lease);
    }
    auto w = etcd_->Commit(write);
    if (!w.ok()) {
      if (!claim) {
        spdlog::warn("job {}: join of {} not recorded in etcd yet: {}", rank.job,
                     rank.ToString(), w.status().ToString());
        return 0;  // the worker writes the joined key
      }
      // A job must never run without its owner recorded: another node would give it away.
      return Status::Unavailable("job '" + rank.job + "': its owner could not be recorded in " +
                                 "etcd (" + w.status().message() + "); connect again");
    }
    if (w->succeeded) {
      if (put_layout) {
        KeyValue kv;
        kv.key = keys::Layout(rank.job);
        kv.value = Encode(layout);
        kv.mod_revision = w->revision;
        reft::MutexLock lock(mu_);
        ApplyLayoutLocked(rank.job, jobs_[rank.job], kv);
      }
      if (claim) {
        spdlog::info("job {}: claimed by {} on this node", rank.job, who.claim.Describe());
        reft::MutexLock lock(mu_);
        jobs_[rank.job].owner = who.claim;
      }
      return lease != 0 ? w->revision : 0;
    }
    // Someone else claimed the job, wrote the layout or joined the rank between the read and
    // the write: read again.
  }
  return Status::Unavailable("job '" + rank.job + "': its record in etcd kept changing while " +
                             "rank " + rank.ToString() + " joined; connect again");
}

Status EtcdJobCoordinator::CheckNoneJoined(const store::RankKey& rank, const JobLayout& layout,
                                           const JobLayout& running,
                                           const std::vector<KeyValue>& joined) {
  // This node's ranks that have left but whose keys the worker has not deleted yet do not hold
  // the layout.
  std::set<std::string> here;
  {
    reft::MutexLock lock(mu_);
    for (const auto& r : joined_.Ranks()) here.insert(keys::Joined(r));
  }
  std::vector<std::string> where;
  for (const auto& kv : joined) {
    auto ref = DecodeNodeRef(kv.key, kv.value);
    if (!ref.ok()) continue;
    if (ref->node == nodes_->node_id() && here.count(kv.key) == 0) continue;
    where.push_back(kv.key.substr(keys::JoinedPrefix(rank.job).size()) + " on " + ref->node);
  }
  if (where.empty()) return Status::OK();
  return local::LayoutConflict(rank, running, layout, "ranks pp/tp/dp " + CommaList(where));
}

Status EtcdJobCoordinator::Join(const store::RankKey& rank, const JobLayout& layout,
                                const local::Joiner& who) {
  REFT_RETURN_NOT_OK(layout.CheckRank(rank));
  Status tracked = Track(rank.job);
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[rank.job];
    if (st.has_layout && !(st.layout == layout) && st.connected > 0) {
      return local::LayoutConflict(rank, st.layout, layout);
    }
  }
  int64_t joined_rev = 0;  // the revision of this rank's joined key, when the join wrote it
  if (tracked.ok()) {
    auto recorded = RecordJoin(rank, layout, who);
    if (!recorded.ok()) return recorded.status();
    joined_rev = *recorded;
  } else {
    spdlog::warn("job {}: etcd unreachable at join ({}); snapshots continue locally, commits wait",
                 rank.job, tracked.ToString());
  }
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[rank.job];
    // The layout record the rank joins under (RecordJoin read or wrote it): its completions
    // count only while the job keeps that record. Unknown when etcd was not reached.
    if (tracked.ok() && st.has_layout && st.layout == layout && st.layout_rev != 0) {
      joined_layout_rev_[rank] = st.layout_rev;
    } else {
      joined_layout_rev_.erase(rank);
    }
    st.layout = layout;
    st.has_layout = true;
    ++st.connected;
    joined_.Add(rank);
    int64_t& known = joined_in_etcd_[rank];
    if (joined_rev != 0) {
      known = joined_rev;
    } else if (known < 0) {
      known = 0;  // joined again after another node held it: the worker claims it anew
    }
    if (!st.leader) st.want_lead = true;
    work_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

Status EtcdJobCoordinator::DeclareReplicated(const store::RankKey& rank,
                                             const local::ReplicatedBuffers& buffers) {
  const std::string mine = keys::Replicated(rank);
  auto check = [&](const std::vector<KeyValue>& kvs) -> Status {
    for (const auto& kv : kvs) {
      store::RankKey other;
      if (kv.key == mine || !keys::ParseRankKey(rank.job, "replicated", kv.key, &other)) continue;
      auto theirs = DecodeReplicated(kv.key, kv.value);
      if (!theirs.ok()) continue;  // unreadable: not a reason to refuse a snapshot
      REFT_RETURN_NOT_OK(local::CheckReplicatedAgree(rank, buffers, other, *theirs));
    }
    return Status::OK();
  };
  auto before = etcd_->GetPrefix(keys::ReplicatedPrefix(rank.job));
  if (!before.ok()) return Status::OK();
  REFT_RETURN_NOT_OK(check(before->kvs));
  const int64_t lease = nodes_->lease();
  if (lease == 0) return Status::OK();  // not registered (again) yet: checked, not recorded
  auto put = etcd_->Put(mine, Encode(buffers), lease);
  if (!put.ok()) return Status::OK();
  {
    reft::MutexLock lock(mu_);
    declared_in_etcd_[rank] = *put;
    work_ = true;  // withdrawn by the worker if the rank left meanwhile
  }
  auto after = etcd_->GetPrefix(keys::ReplicatedPrefix(rank.job));
  if (!after.ok()) return Status::OK();
  Status agreed = check(after->kvs);
  if (!agreed.ok()) {
    Txn withdraw;
    withdraw.IfModRevision(mine, Compare::kEqual, *put).ThenDelete(mine);
    if (etcd_->Commit(withdraw).ok()) {
      reft::MutexLock lock(mu_);
      auto it = declared_in_etcd_.find(rank);
      if (it != declared_in_etcd_.end() && it->second == *put) declared_in_etcd_.erase(it);
    }
  }
  return agreed;
}

void EtcdJobCoordinator::Leave(const store::RankKey& rank) {
  {
    reft::MutexLock lock(mu_);
    auto it = jobs_.find(rank.job);
    if (it != jobs_.end() && it->second.connected > 0) --it->second.connected;
    if (joined_.Remove(rank)) {
      joined_layout_rev_.erase(rank);  // its session completes nothing more (Complete precedes Leave)
    }
    work_ = true;  // the worker deletes the joined key
  }
  cv_.notify_all();
}

std::vector<store::RankKey> EtcdJobCoordinator::JoinedRanks(
    const std::optional<std::string>& job) {
  reft::MutexLock lock(mu_);
  return joined_.Ranks(job);
}

bool EtcdJobCoordinator::IsJoined(const store::RankKey& rank) {
  reft::MutexLock lock(mu_);
  return joined_.Contains(rank);
}

Result<std::vector<std::string>> EtcdJobCoordinator::JobNodes(const std::string& job) {
  std::set<std::string> nodes;
  for (const std::string& prefix : {keys::LocationsPrefix(job), keys::JoinedPrefix(job)}) {
    REFT_ASSIGN_OR_RETURN(RangeResult r, etcd_->GetPrefix(prefix));
    for (const auto& kv : r.kvs) {
      auto ref = DecodeNodeRef(kv.key, kv.value);
      if (ref.ok() && ref->node != nodes_->node_id()) nodes.insert(ref->node);
    }
  }
  return std::vector<std::string>(nodes.begin(), nodes.end());
}

std::optional<std::string> EtcdJobCoordinator::SlotLocation(const store::RankKey& rank) {
  auto kv = etcd_->Get(keys::Location(rank));
  if (!kv.ok() || !kv->has_value()) return std::nullopt;
  auto ref = DecodeNodeRef((*kv)->key, (*kv)->value);
  if (!ref.ok()) return std::nullopt;
  return ref->node;
}

std::optional<std::string> EtcdJobCoordinator::JoinedNode(const store::RankKey& rank) {
  auto kv = etcd_->Get(keys::Joined(rank));
  if (!kv.ok() || !kv->has_value()) return std::nullopt;
  auto ref = DecodeNodeRef((*kv)->key, (*kv)->value);
  if (!ref.ok()) return std::nullopt;
  return ref->node;
}

Status EtcdJobCoordinator::RecordSlot(const store::RankKey& rank, int64_t step) {
  int64_t gen_rev;
  {
    reft::MutexLock lock(mu_);
    gen_rev = jobs_[rank.job].gen_rev;
  }
  Txn t;
  t.IfModRevision(keys::Generation(rank.job), Compare::kEqual, gen_rev)
      .ThenPut(keys::Location(rank), Encode(NodeRef{nodes_->node_id(), step}));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
  if (!r.succeeded) {
    return Status::Unavailable("job '" + rank.job +
                               "' moved to another generation; the slot location of " +
                               rank.ToString() + " was not recorded");
  }
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[rank.job];
  if (st.leader) st.locations[rank] = nodes_->node_id();
  return Status::OK();
}

void EtcdJobCoordinator::OnJoinedEvent(const std::string& job, const WatchUpdate& u) {
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (!st.leader) return;
  // Events may be lost: forget the view; ranks it lacks are read from etcd (ConfirmTied).
  if (u.reset) st.joined_at.clear();
  for (const auto& e : u.events) {
    store::RankKey rank;
    if (!keys::ParseRankKey(job, "joined", e.kv.key, &rank)) continue;
    auto ref = e.type == WatchEvent::Type::kPut ? DecodeNodeRef(e.kv.key, e.kv.value)
                                                : Result<NodeRef>(Status::NotFound("deleted"));
    if (ref.ok()) {
      st.joined_at[rank] = ref->node;
    } else {
      st.joined_at.erase(rank);
    }
  }
}

// joined_in_etcd_ holds the revision each rank's key was written at: a delete only removes
// the key it knows, so a rank that joins again while its old key is being deleted keeps the
// new one (written by its join or by the next pass here).
void EtcdJobCoordinator::SyncJoined() {
  const int64_t lease = nodes_->lease();
  std::vector<store::RankKey> put;
  std::vector<std::pair<store::RankKey, int64_t>> del;
  {
    reft::MutexLock lock(mu_);
    for (const auto& rank : joined_.Ranks()) {
      auto it = joined_in_etcd_.find(rank);
      if (it == joined_in_etcd_.end() || it->second == 0) put.push_back(rank);
    }
    for (const auto& [rank, rev] : joined_in_etcd_) {
      if (!joined_.Contains(rank)) del.emplace_back(rank, rev);
    }
  }
  if (lease == 0 && !put.empty()) {
    reft::MutexLock lock(mu_);
    RetryLaterLocked();  // not registered (again) yet
    return;
  }
  // The node's ranks in as few transactions as etcd allows (one, for a node's ranks), each
  // compared: a key is created, or replaced when it is still the one this node wrote (a lease
  // move); a rank another node joined meanwhile is never taken over (ClaimJoined sorts a batch
  // whose compares failed out rank by rank).
  for (size_t first = 0; first < put.size(); first += options_.max_txn_ops / 2) {
    const size_t last = std::min(put.size(), first + options_.max_txn_ops / 2);
    Txn t;
    {
      reft::MutexLock lock(mu_);
      for (size_t i = first; i < last; ++i) {
        auto it = joined_in_etcd_.find(put[i]);
        const int64_t rev = it == joined_in_etcd_.end() ? 0 : it->second;
        if (rev == 0) {
          t.IfCreateRevision(keys::Joined(put[i]), Compare::kEqual, 0);
        } else {
          t.IfModRevision(keys::Joined(put[i]), Compare::kEqual, rev);
        }
      }
    }
    for (size_t i = first; i < last; ++i) {
      t.ThenPut(keys::Joined(put[i]), Encode(NodeRef{nodes_->node_id(), -1}), lease);
    }
    auto r = etcd_->Commit(t);
    if (r.ok() && !r->succeeded) {
      for (size_t i = first; i < last; ++i) ClaimJoined(put[i], lease);
      continue;
    }
    reft::MutexLock lock(mu_);
    if (!r.ok()) {
      RetryLaterLocked();
      break;
    }
    for (size_t i = first; i < last; ++i) joined_in_etcd_[put[i]] = r->revision;
  }
  std::vector<std::pair<store::RankKey, int64_t>> withdraw;
  {
    reft::MutexLock lock(mu_);
    for (const auto& [rank, rev] : declared_in_etcd_) {
      if (!joined_.Contains(rank)) withdraw.emplace_back(rank, rev);
    }
  }
  for (const auto& [rank, rev] : withdraw) {
    Txn t;  // only the declaration this node wrote: a rejoined rank's newer one stays
    t.IfModRevision(keys::Replicated(rank), Compare::kEqual, rev).ThenDelete(keys::Replicated(rank));
    const bool ok = etcd_->Commit(t).ok();
    reft::MutexLock lock(mu_);
    auto it = declared_in_etcd_.find(rank);
    if (!ok) {
      RetryLaterLocked();
    } else if (it != declared_in_etcd_.end() && it->second == rev) {
      declared_in_etcd_.erase(it);
    }
  }
  for (const auto& [rank, rev] : del) {
    bool ok = true;
    if (rev != 0) {  // 0: gone with an old lease
      Txn t;
      t.IfModRevision(keys::Joined(rank), Compare::kEqual, rev).ThenDelete(keys::Joined(rank));
      ok = etcd_->Commit(t).ok();  // a failed compare: the key is a newer join's
    }
    reft::MutexLock lock(mu_);
    auto it = joined_in_etcd_.find(rank);
    if (!ok) {
      RetryLaterLocked();
    } else if (it != joined_in_etcd_.end() && it->second == rev && !joined_.Contains(rank)) {
      joined_in_etcd_.erase(it);
    }
  }
}

void EtcdJobCoordinator::ClaimJoined(const store::RankKey& rank, int64_t lease) {
  const std::string key = keys::Joined(rank);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto kv = etcd_->Get(key);
    if (!kv.ok()) break;
    int64_t rev = 0;
    if (kv->has_value()) {
      auto ref = DecodeNodeRef((*kv)->key, (*kv)->value);
      if (ref.ok() && ref->node != nodes_->node_id()) {
        // Taken while this node was away (its lease lapsed): the trainer there is the rank now;
        // this node's session of it is stale and its completions do not count.
        spdlog::warn("job {}: rank {} is joined on node '{}' now; this node's trainer of it is "
                     "stale", rank.job, rank.ToString(), ref->node);
        reft::MutexLock lock(mu_);
        joined_in_etcd_[rank] = -1;  // never written by this node again (until it rejoins)
        return;
      }
      rev = (*kv)->mod_revision;
    }
    Txn t;
    if (rev == 0) {
      t.IfCreateRevision(key, Compare::kEqual, 0);
    } else {
      t.IfModRevision(key, Compare::kEqual, rev);
    }
    t.ThenPut(key, Encode(NodeRef{nodes_->node_id(), -1}), lease);
    auto r = etcd_->Commit(t);
    if (!r.ok()) break;
    if (r->succeeded) {
      reft::MutexLock lock(mu_);
      joined_in_etcd_[rank] = r->revision;
      return;
    }
  }
  reft::MutexLock lock(mu_);
  RetryLaterLocked();
}

}  // namespace reft::coord
