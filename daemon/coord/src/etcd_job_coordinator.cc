#include "reft/coord/etcd_job_coordinator.h"

#include <algorithm>
#include <set>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "reft/coord/keys.h"
#include "reft/peer/generation_file.h"
#include "reft/store/job_commit.h"

namespace reft::coord {

namespace {

// A compare-and-swap on a key (`expected_version` its mod revision) plus fences that failed:
// true when the key itself was not replaced (absent, or still at `expected_version`), i.e. a
// fence failed; false when another writer replaced it (r.gets[0].kvs[0] is the winner).
bool KeyUnchanged(const TxnResult& r, int64_t expected_version) {
  return r.gets.empty() || r.gets[0].kvs.empty() || r.gets[0].kvs[0].mod_revision == expected_version;
}

std::optional<KeyValue> First(const RangeResult& r) {
  if (r.kvs.empty()) return std::nullopt;
  return r.kvs.front();
}

// Whether the coordinator key `kv` is held by `node` under `lease`.
bool HeldBy(const std::optional<KeyValue>& kv, const std::string& node, int64_t lease) {
  if (!kv || kv->lease != lease) return false;
  auto ref = DecodeNodeRef(kv->key, kv->value);
  return ref.ok() && ref->node == node;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

EtcdJobCoordinator::EtcdJobCoordinator(store::SnapshotStore* store,
                                       std::shared_ptr<EtcdClient> etcd, EtcdNodeDirectory* nodes,
                                       EtcdCoordinatorOptions options, peer::PeerClient* peers)
    : store_(store), etcd_(std::move(etcd)), nodes_(nodes), options_(options), peers_(peers) {
  nodes_->AddReregisterListener([this](int64_t lease) { OnReregistered(lease); });
  EtcdNodeDirectory::LeaseMoveListener move;
  move.may_move = [this] { return !LeadsAnyJob(); };
  move.moved = [this](int64_t lease) { OnLeaseMoved(lease); };
  nodes_->AddLeaseMoveListener(std::move(move));
}

EtcdJobCoordinator::~EtcdJobCoordinator() { Stop(); }

Status EtcdJobCoordinator::Start() {
  {
    reft::MutexLock lock(mu_);
    if (running_) return Status::OK();
    running_ = true;
  }
  worker_ = reft::Thread("reft-job-coord", [this] { Run(); });
  // Jobs whose slots this node holds (a restarted daemon): follow them from the start, so their
  // commit point and generation are current before a trainer asks.
  std::set<std::string> jobs;
  for (const auto& r : store_->Ranks()) jobs.insert(r.job);
  for (const auto& job : jobs) {
    Status s = Track(job);
    if (!s.ok()) spdlog::warn("job {}: cannot read its state from etcd yet: {}", job, s.ToString());
  }
  return Status::OK();
}

void EtcdJobCoordinator::Stop() {
  std::vector<int64_t> watches;
  {
    reft::MutexLock lock(mu_);
    if (!running_ && !worker_.joinable()) return;
    running_ = false;
    for (auto& [job, st] : jobs_) {
      watches.insert(watches.end(), st.watches.begin(), st.watches.end());
      TakeLeaderWatchesLocked(st, &watches);
      st.watches.clear();
      st.tracked = false;
    }
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (int64_t w : watches) etcd_->CancelWatch(w);
}

void EtcdJobCoordinator::Wake() {
  {
    reft::MutexLock lock(mu_);
    work_ = true;
  }
  cv_.notify_all();
}

void EtcdJobCoordinator::WakeAtLocked(Clock::time_point t) {
  if (!wake_at_ || t < *wake_at_) wake_at_ = t;
}

void EtcdJobCoordinator::RetryLaterLocked() { WakeAtLocked(Clock::now() + options_.retry_interval); }

// ---- reading and applying the job's state ----

void EtcdJobCoordinator::LoadLocalStateLocked(const std::string& job, JobState& st) {
  if (st.gen_loaded) return;
  st.gen_loaded = true;
  // The generation this node's slots belong to (a daemon restarted after a fallback): without
  // it, a newer generation in etcd could not tell the new timeline's slots from the old ones.
  if (!state_dir_.empty()) {
    auto rec = peer::internal::LoadGeneration(state_dir_, job);
    if (rec.ok() && rec->has_value()) {
      st.gen.generation = (*rec)->generation;
      if (st.gen.generation > 0) st.gen.base_step = (*rec)->base_step;
      st.gen.persist_floor = (*rec)->persist_floor;
      st.gen.reason = (*rec)->reason;
      st.decision_rev = (*rec)->epoch;
    } else if (!rec.ok()) {
      spdlog::warn("job {}: generation record unreadable ({}); following etcd", job,
                   rec.status().ToString());
    }
  }
  // Sealed slots newer than any commit are completions made before a restart: they re-enter.
  std::optional<int64_t> newest;
  for (const auto& r : store_->Ranks(job)) {
    auto c = store_->NewestCommitted(r);
    if (c && (!newest || *c > *newest)) newest = c;
  }
  for (const auto& slot : store_->List(job)) {
    if (slot.state == store::SlotState::kComplete && (!newest || slot.step > *newest)) {
      st.pending[slot.step].ranks.insert(slot.rank);
    }
  }
  if (!st.committed) {
    st.committed = newest;
    st.committed_in = TimelineStamp{st.gen.generation, 0, 0, 0};  // until etcd's record is read
  }
}

Status EtcdJobCoordinator::Track(const std::string& job) {
  {
    reft::MutexLock lock(mu_);
    if (jobs_[job].tracked) return Status::OK();
  }
  return Refresh(job, true);
}

bool EtcdJobCoordinator::SeenLocked(JobState& st, const std::string& key, int64_t revision) {
  int64_t& seen = st.seen[key];
  if (revision < seen) return false;
  seen = revision;
  return true;
}

Status EtcdJobCoordinator::Refresh(const std::string& job, bool start_watches) {
  reft::MutexLock io(track_mu_);
  Txn read;
  read.ThenGet(keys::Layout(job))
      .ThenGet(keys::Generation(job))
      .ThenGet(keys::Committed(job))
      .ThenGet(keys::Coordinator(job))
      .ThenGet(keys::Restore(job));
  auto r = etcd_->Commit(read);
  if (!r.ok()) return r.status().WithContext("reading job '" + job + "' from etcd");
  if (r->gets.size() != 5) return Status::Internal("etcd answered a 5-read txn with fewer reads");
  bool watch = false;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    LoadLocalStateLocked(job, st);
    // Another thread's read or a watch event may have applied something newer meanwhile (this
    // read waited for etcd without the lock): only keys nothing newer was seen of are applied.
    const std::pair<std::string, Apply> read_keys[] = {
        {keys::Layout(job), &EtcdJobCoordinator::ApplyLayoutLocked},
        {keys::Generation(job), &EtcdJobCoordinator::ApplyGenerationLocked},
        {keys::Committed(job), &EtcdJobCoordinator::ApplyCommittedLocked},
        {keys::Coordinator(job), &EtcdJobCoordinator::ApplyCoordinatorLocked},
        {keys::Restore(job), &EtcdJobCoordinator::ApplyDecisionLocked}};
    for (size_t i = 0; i < 5; ++i) {
      if (SeenLocked(st, read_keys[i].first, r->revision)) {
        (this->*read_keys[i].second)(job, st, First(r->gets[i]));
      }
    }
    st.stale = false;
    watch = start_watches && !st.tracked && running_;
    if (watch) st.tracked = true;
    if (!st.pending.empty()) work_ = true;
  }
  cv_.notify_all();
  NotifyGenerations();
  if (!watch) return Status::OK();
  // Watch each key from the revision just read: nothing between read and watch is missed.
  const int64_t from = r->revision + 1;
  const std::pair<std::string, Apply> watched[] = {
      {keys::Layout(job), &EtcdJobCoordinator::ApplyLayoutLocked},
      {keys::Generation(job), &EtcdJobCoordinator::ApplyGenerationLocked},
      {keys::Committed(job), &EtcdJobCoordinator::ApplyCommittedLocked},
      {keys::Coordinator(job), &EtcdJobCoordinator::ApplyCoordinatorLocked},
      {keys::Restore(job), &EtcdJobCoordinator::ApplyDecisionLocked}};
  std::vector<int64_t> handles;
  for (const auto& [key, apply] : watched) {
    auto h = etcd_->Watch(key, false, from, [this, job, key = key, apply = apply](const WatchUpdate& u) {
      {
        reft::MutexLock lock(mu_);
        JobState& st = jobs_[job];
        if (u.reset) st.stale = true;  // events may be lost: the worker re-reads the job
        for (const auto& e : u.events) {
          std::optional<KeyValue> kv;
          if (e.type == WatchEvent::Type::kPut) kv = e.kv;
          if (SeenLocked(st, key, e.kv.mod_revision)) (this->*apply)(job, st, kv);
        }
        work_ = true;
      }
      cv_.notify_all();
      NotifyGenerations();
    });
    if (h.ok()) {
      handles.push_back(*h);
    } else {
      spdlog::warn("job {}: cannot watch {}: {}", job, key, h.status().ToString());
    }
  }
  reft::MutexLock lock(mu_);
  auto& w = jobs_[job].watches;
  w.insert(w.end(), handles.begin(), handles.end());
  return Status::OK();
}

void EtcdJobCoordinator::ApplyLayoutLocked(const std::string&, JobState& st,
                                           const std::optional<KeyValue>& kv) {
  if (!kv) {
    st.layout_rev = 0;
    st.records_deleted = true;  // the worker forgets the job once nothing of it is left here
    work_ = true;
    return;
  }
  st.records_deleted = false;
  if (kv->mod_revision < st.layout_rev) return;
  auto l = DecodeLayout(kv->key, kv->value);
  if (!l.ok()) {
    spdlog::error("{}", l.status().ToString());
    return;
  }
  if (kv->mod_revision != st.layout_rev) {
    // Another layout record (a reshape): completions made under the old one never count toward
    // the new one's steps, even of the same generation and restore epoch. This node's are
    // dropped; the coordinator's view keeps every record (each carries its layout revision, and
    // one of the new layout may have arrived first) and counts again.
    for (auto it = st.pending.begin(); it != st.pending.end();) {
      const auto& stamp = it->second.layout_rev;
      it = stamp && *stamp != kv->mod_revision ? st.pending.erase(it) : std::next(it);
    }
    for (auto& [step, sc] : st.completions) sc.recount = true;
  }
  st.layout = *l;
  st.has_layout = true;
  st.layout_rev = kv->mod_revision;
}

void EtcdJobCoordinator::ApplyGenerationLocked(const std::string& job, JobState& st,
                                               const std::optional<KeyValue>& kv) {
  if (!kv) return;  // never deleted while the job exists
  if (kv->mod_revision <= st.gen_rev) return;
  auto rec = DecodeGeneration(kv->key, kv->value);
  if (!rec.ok()) {
    spdlog::error("{}", rec.status().ToString());
    return;
  }
  st.gen_rev = kv->mod_revision;
  if (rec->generation > st.gen.generation) {
    AdoptGenerationLocked(job, st, *rec);
  } else if (rec->generation == st.gen.generation) {
    st.gen = *rec;
  }
}

void EtcdJobCoordinator::AdoptGenerationLocked(const std::string& job, JobState& st,
                                               const GenerationRecord& rec) {
  st.gen = rec;
  st.pending.clear();
  st.completions.clear();
  const int64_t base = rec.base_step.value_or(-1);
  st.committed = rec.base_step;
  st.committed_in = TimelineStamp{rec.generation, 0, 0, 0};
  // Slots newer than the base belong to the abandoned timeline; writing ones too, so that a
  // trainer that did not restart fails its snapshot instead of completing a stale step.
  const int dropped = DropSlotsAfter(job, base, /*committed_too=*/true, "the old generation");
  SaveStateLocked(job, st);
  pending_events_.push_back({job, InfoLocked(st), dropped});
}

int EtcdJobCoordinator::DropSlotsAfter(const std::string& job, int64_t step, bool committed_too,
                                       const char* whose) {
  std::set<int64_t> newer;
  int dropped = 0;
  for (const auto& slot : store_->List(job)) {
    if (slot.step > step && (committed_too || slot.state != store::SlotState::kCommitted)) {
      newer.insert(slot.step);
      ++dropped;
    }
  }
  for (int64_t s : newer) {
    Status st = store_->Drop(job, s);
    if (!st.ok()) spdlog::warn("job {}: dropping step {} of {}: {}", job, s, whose, st.ToString());
  }
  return dropped;
}

void EtcdJobCoordinator::SaveStateLocked(const std::string& job, const JobState& st) {
  if (state_dir_.empty()) return;
  Status s = peer::internal::SaveGeneration(
      state_dir_, job,
      {st.gen.generation, st.gen.base_step.value_or(-1), st.gen.persist_floor, st.gen.reason,
       st.decision_rev});
  if (!s.ok()) spdlog::warn("job {}: generation record not saved: {}", job, s.ToString());
}

void EtcdJobCoordinator::ApplyDecisionLocked(const std::string& job, JobState& st,
                                             const std::optional<KeyValue>& kv) {
  // The key is never deleted; "absent" is only ever an older read (a Refresh that raced the
  // decision), like a put of a lower revision.
  if (!kv || kv->mod_revision <= st.decision_rev) return;
  auto d = DecodeDecision(kv->key, kv->value);
  if (!d.ok()) {
    spdlog::error("{}", d.status().ToString());
    return;
  }
  const int64_t decided_step = d->step;
  // A new restore epoch. Every completion this node holds is of the old one: its trainer
  // restored (or joined) before the decision, and may be a dead trainer's last snapshot that
  // reftd finished copying. None of them may count, or a step of the abandoned timeline could
  // commit after the ranks resumed from the decided one.
  st.decision_rev = kv->mod_revision;
  st.pending.clear();
  for (auto& [step, sc] : st.completions) sc.recount = true;
  // Their slots too (newer than both the decided step and the commit point, so never
  // committed): a daemon restarted later would otherwise re-enter them as completions of the
  // new epoch. No session of the new epoch exists on this node yet: sessions take their
  // epoch from this node's view, which only now reaches it.
  DropSlotsAfter(job, std::max(decided_step, st.committed.value_or(-1)), /*committed_too=*/false,
                 "the old restore epoch");
  SaveStateLocked(job, st);
}

void EtcdJobCoordinator::ApplyCommittedLocked(const std::string& job, JobState& st,
                                              const std::optional<KeyValue>& kv) {
  if (!kv || kv->mod_revision <= st.committed_rev) return;
  auto rec = DecodeCommitted(kv->key, kv->value);
  if (!rec.ok()) {
    spdlog::error("{}", rec.status().ToString());
    return;
  }
  st.committed_rev = kv->mod_revision;
  if (rec->generation < st.gen.generation) return;  // a stale commit of an abandoned timeline
  st.committed = rec->step;
  st.committed_in = TimelineStamp{rec->generation, rec->epoch, rec->layout_revision, 0};
  CommitLocalLocked(job, rec->step);
  st.pending.erase(st.pending.begin(), st.pending.upper_bound(rec->step));
  for (auto it = st.completions.begin(); it != st.completions.end() && it->first <= rec->step;) {
    it = st.completions.erase(it);
  }
}

void EtcdJobCoordinator::CommitLocalLocked(const std::string& job, int64_t step) {
  // Ranks the job's layout no longer has are released with this commit (docs/recovery.md
  // "Reshape").
  const JobState& st = jobs_[job];
  store::CommitJobStep(store_, job, step, st.has_layout ? &st.layout : nullptr);
}

void EtcdJobCoordinator::ApplyCoordinatorLocked(const std::string& job, JobState& st,
                                                const std::optional<KeyValue>& kv) {
  std::string holder;
  if (kv) {
    auto ref = DecodeNodeRef(kv->key, kv->value);
    if (ref.ok()) holder = ref->node;
  }
  const bool mine = HeldBy(kv, nodes_->node_id(), nodes_->lease());
  const int64_t term = kv ? kv->create_revision : 0;
  if (term != st.coordinator_rev) {
    // Another coordinator term: reports held only in the previous coordinator's memory are
    // gone with it, so every uncommitted step is reported again (to the new one, or to etcd).
    st.coordinator_rev = term;
    st.coordinator = holder;
    st.coordinator_address.clear();
    st.report_backoff = std::chrono::milliseconds(0);
    st.report_retry_at = {};
    for (auto& [step, p] : st.pending) p.written = 0;
    work_ = true;  // connect to the new coordinator now, not under the first report's deadline
  }
  if (!mine && st.leader) {
    spdlog::warn("job {}: this node no longer coordinates the job's commits ({})", job,
                 holder.empty() ? "its coordinator key is gone" : "node " + holder + " does");
    st.leader = false;
    st.completions.clear();
    // Cancelling from a watch callback is not allowed: the worker does it.
    TakeLeaderWatchesLocked(st, &cancel_watches_);
  }
  // Campaign decides whether this node may lead (trainers connected, or slots of the job held).
  if (holder.empty()) st.want_lead = true;
}

peer::JobGeneration EtcdJobCoordinator::InfoLocked(const JobState& st) const {
  peer::JobGeneration g;
  g.generation = st.gen.generation;
  g.base_step = st.gen.base_step;
  g.persist_floor = st.gen.persist_floor;
  g.reason = st.gen.reason;
  g.newest_committed = st.committed;
  g.committed_in = st.committed_in;
  return g;
}

void EtcdJobCoordinator::NotifyGenerations() {
  std::vector<GenerationEvent> events;
  {
    reft::MutexLock lock(mu_);
    events.swap(pending_events_);
  }
  if (events.empty()) return;
  reft::MutexLock lock(listeners_mu_);
  for (const auto& e : events) {
    for (const auto& l : listeners_) l(e.job, e.generation, e.dropped);
  }
}

// ---- CommitCoordinator ----

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
    for (const auto& [r, n] : joined_) here.insert(keys::Joined(r));
  }
  std::vector<std::string> where;
  for (const auto& kv : joined) {
    auto ref = DecodeNodeRef(kv.key, kv.value);
    if (!ref.ok()) continue;
    if (ref->node == nodes_->node_id() && here.count(kv.key) == 0) continue;
    where.push_back(kv.key.substr(keys::JoinedPrefix(rank.job).size()) + " on " + ref->node);
  }
  if (where.empty()) return Status::OK();
  return local::LayoutConflict(rank, running, layout, "ranks pp/tp/dp " + Joined(where));
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
    ++joined_[rank];
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
    auto j = joined_.find(rank);
    if (j != joined_.end() && --j->second <= 0) {
      joined_.erase(j);
      joined_layout_rev_.erase(rank);  // its session completes nothing more (Complete precedes Leave)
    }
    work_ = true;  // the worker deletes the joined key
  }
  cv_.notify_all();
}

Status EtcdJobCoordinator::Complete(const store::RankKey& rank, int64_t step, int64_t epoch) {
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[rank.job];
    if (epoch != st.decision_rev) return local::StaleEpoch(rank, step, epoch, st.decision_rev);
    std::optional<int64_t> layout_rev;
    if (auto j = joined_layout_rev_.find(rank); j != joined_layout_rev_.end()) {
      if (j->second != st.layout_rev) return LayoutMoved(rank, step, j->second, st.layout_rev);
      layout_rev = j->second;
    } else if (st.layout_rev != 0) {
      layout_rev = st.layout_rev;
    }
    if (st.committed && step <= *st.committed) return Status::OK();
    PendingStep& p = st.pending[step];
    if (p.ranks.empty()) p.since = Clock::now();
    p.ranks.insert(rank);
    if (!p.layout_rev) p.layout_rev = layout_rev;
    work_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

int64_t EtcdJobCoordinator::RestoreEpoch(const std::string& job) {
  (void)Track(job);
  reft::MutexLock lock(mu_);
  return jobs_[job].decision_rev;
}

std::optional<int64_t> EtcdJobCoordinator::NewestCommitted(const std::string& job) {
  (void)Track(job);  // offline: what this node knew
  reft::MutexLock lock(mu_);
  return jobs_[job].committed;
}

bool EtcdJobCoordinator::WaitCommitted(const std::string& job, int64_t step,
                                       std::chrono::milliseconds timeout) {
  (void)Track(job);
  reft::MutexLock lock(mu_);
  return lock.WaitFor(cv_, timeout, [&]() REFT_REQUIRES(mu_) {
    auto c = jobs_[job].committed;
    return c && *c >= step;
  });
}

// ---- JobCoordinator ----

Status EtcdJobCoordinator::SyncNow(const std::string& job, std::chrono::milliseconds) {
  if (job.empty()) return Status::InvalidArgument("SyncNow: empty job id");
  bool tracked;
  {
    reft::MutexLock lock(mu_);
    tracked = jobs_[job].tracked;
  }
  return Refresh(job, !tracked);
}

std::optional<JobLayout> EtcdJobCoordinator::Layout(const std::string& job) {
  (void)Track(job);
  reft::MutexLock lock(mu_);
  const JobState& st = jobs_[job];
  if (!st.has_layout) return std::nullopt;
  return st.layout;
}

std::vector<std::string> EtcdJobCoordinator::Jobs() {
  std::set<std::string> out;
  for (const auto& r : store_->Ranks()) out.insert(r.job);
  reft::MutexLock lock(mu_);
  for (const auto& [job, st] : jobs_) {
    if (st.tracked || st.connected > 0) out.insert(job);
  }
  return {out.begin(), out.end()};
}

peer::JobGeneration EtcdJobCoordinator::Generation(const std::string& job) {
  (void)Track(job);
  reft::MutexLock lock(mu_);
  return InfoLocked(jobs_[job]);
}

peer::JobGeneration EtcdJobCoordinator::StartGeneration(const std::string& job,
                                                        const peer::GenerationStart& start) {
  (void)Refresh(job, false);
  int64_t gen_rev, committed_rev;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    // A step committed after the fall-back was decided (the killed trainers' last snapshots
    // sealed while the tier was scanned) voids it: memory holds a newer step than it saw.
    if (st.gen.generation != start.from || st.committed != start.seen_committed) return InfoLocked(st);
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  const uint64_t next_generation = start.from + 1;
  GenerationRecord next{next_generation, start.base_step, start.persist_floor, start.reason};
  peer::RestoreDecision decision{next_generation, start.base_step, "tier", nodes_->node_id(), start.reason, 0};
  // Both keys compared: a commit between the read above and this transaction fails it too, so
  // the new timeline never overwrites a commit, nor computes its persist floor from an older one.
  Txn t;
  t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .ThenPut(keys::Generation(job), Encode(next))
      .ThenPut(keys::Committed(job), Encode(CommittedRecord{start.base_step, next_generation}))
      .ThenDeleteRange(keys::CompletionsPrefix(job), PrefixEnd(keys::CompletionsPrefix(job)))
      .ThenPut(keys::Restore(job), Encode(decision));
  auto r = etcd_->Commit(t);
  if (!r.ok()) spdlog::warn("job {}: starting generation {} failed: {}", job, next_generation, r.status().ToString());
  (void)Refresh(job, false);  // applies whichever generation won (and rolls this node back)
  reft::MutexLock lock(mu_);
  return InfoLocked(jobs_[job]);
}

void EtcdJobCoordinator::AddGenerationListener(GenerationListener listener) {
  reft::MutexLock lock(listeners_mu_);
  listeners_.push_back(std::move(listener));
}

void EtcdJobCoordinator::AddLeadershipListener(LeadershipListener listener) {
  reft::MutexLock lock(listeners_mu_);
  leadership_listeners_.push_back(std::move(listener));
}

void EtcdJobCoordinator::SetStateDir(std::string dir) {
  reft::MutexLock lock(mu_);
  state_dir_ = std::move(dir);
}

std::vector<store::RankKey> EtcdJobCoordinator::JoinedRanks(
    const std::optional<std::string>& job) {
  reft::MutexLock lock(mu_);
  std::vector<store::RankKey> out;
  for (const auto& [rank, n] : joined_) {
    if (!job || rank.job == *job) out.push_back(rank);
  }
  return out;
}

bool EtcdJobCoordinator::IsJoined(const store::RankKey& rank) {
  reft::MutexLock lock(mu_);
  return joined_.count(rank) > 0;
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

bool EtcdJobCoordinator::LeadsJob(const std::string& job) {
  reft::MutexLock lock(mu_);
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second.leader;
}

Result<std::optional<peer::RestoreDecision>> EtcdJobCoordinator::Decision(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Restore(job)));
  if (!kv) return std::optional<peer::RestoreDecision>();
  REFT_ASSIGN_OR_RETURN(peer::RestoreDecision d, DecodeDecision(kv->key, kv->value));
  d.version = kv->mod_revision;
  {
    // The restore that follows it hands this epoch to its session: this node must be in it.
    reft::MutexLock lock(mu_);
    ApplyDecisionLocked(job, jobs_[job], kv);
  }
  return std::optional<peer::RestoreDecision>(d);
}

Result<peer::RestoreDecision> EtcdJobCoordinator::ProposeDecision(
    const std::string& job, const peer::RestoreDecision& decision, int64_t expected_version) {
  int64_t gen_rev, committed_rev;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    const int64_t committed = st.committed.value_or(-1);
    if (st.gen.generation != decision.generation ||
        (decision.source == "none" ? committed >= 0 : committed != decision.step)) {
      return Status::Busy("job '" + job + "' moved to generation " +
                          std::to_string(st.gen.generation) + ", committed step " +
                          std::to_string(committed) + " while deciding");
    }
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  // The decision stands only for the generation and commit point it was made on (a decision of
  // an older generation must never replace a fallback's), and it starts a new restore epoch:
  // every completion recorded so far is of the old one and is deleted with it.
  Txn t;
  t.IfModRevision(keys::Restore(job), Compare::kEqual, expected_version)
      .IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .ThenPut(keys::Restore(job), Encode(decision))
      .ThenDeleteRange(keys::CompletionsPrefix(job), PrefixEnd(keys::CompletionsPrefix(job)))
      .ElseGet(keys::Restore(job));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
  if (r.succeeded) {
    peer::RestoreDecision d = decision;
    d.version = r.revision;
    KeyValue kv;
    kv.key = keys::Restore(job);
    kv.value = Encode(decision);
    kv.mod_revision = r.revision;
    reft::MutexLock lock(mu_);
    ApplyDecisionLocked(job, jobs_[job], kv);
    return d;
  }
  if (KeyUnchanged(r, expected_version)) {
    reft::MutexLock lock(mu_);
    jobs_[job].stale = true;
    return Status::Busy("the generation or commit point of job '" + job +
                        "' moved while deciding its restore");
  }
  const KeyValue& kv = r.gets[0].kvs[0];
  REFT_ASSIGN_OR_RETURN(peer::RestoreDecision d, DecodeDecision(kv.key, kv.value));
  d.version = kv.mod_revision;
  // The caller may follow the winner: its epoch must be this node's before a session gets it
  // (applied later by the watch, it would void the session's first completions).
  reft::MutexLock lock(mu_);
  ApplyDecisionLocked(job, jobs_[job], kv);
  return d;
}

Result<std::optional<peer::PublishedPlan>> EtcdJobCoordinator::PublishedPlanOf(const std::string& job) {
  REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Plan(job)));
  if (!kv) return std::optional<peer::PublishedPlan>();
  REFT_ASSIGN_OR_RETURN(peer::PublishedPlan p, DecodePlan(kv->key, kv->value));
  p.version = kv->mod_revision;
  return std::optional<peer::PublishedPlan>(std::move(p));
}

Result<peer::PublishedPlan> EtcdJobCoordinator::PublishPlan(const std::string& job,
                                                            const peer::PublishedPlan& plan,
                                                            int64_t expected_version,
                                                            peer::PlanPublisher publisher) {
  const bool as_coordinator = publisher == peer::PlanPublisher::kCoordinator;
  int64_t gen_rev;
  int64_t term = 0;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (st.gen.generation != plan.generation) {
      return Status::Busy("job '" + job + "' is in generation " + std::to_string(st.gen.generation) +
                          ", not " + std::to_string(plan.generation) + " the plan was decided in");
    }
    if (as_coordinator && (!st.leader || st.coordinator_rev == 0)) {
      return Status::Busy("node " + nodes_->node_id() + " does not coordinate job '" + job +
                          "' (any more): its plan is not published");
    }
    gen_rev = st.gen_rev;
    term = st.coordinator_rev;
  }
  // A plan stands only in the generation it was decided in: a planner that missed a fallback
  // (partitioned, or its watch behind) cannot publish over the newer generation. And only the
  // coordinator's term it was decided in: a deposed planner (its lease lapsed while it
  // planned) cannot publish over, or beside, the next coordinator's decision.
  Txn t;
  t.IfModRevision(keys::Plan(job), Compare::kEqual, expected_version)
      .IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev);
  if (as_coordinator) t.IfCreateRevision(keys::Coordinator(job), Compare::kEqual, term);
  t.ThenPut(keys::Plan(job), Encode(plan)).ElseGet(keys::Plan(job));
  REFT_ASSIGN_OR_RETURN(TxnResult r, etcd_->Commit(t));
  if (r.succeeded) {
    peer::PublishedPlan p = plan;
    p.version = r.revision;
    return p;
  }
  if (KeyUnchanged(r, expected_version)) {
    reft::MutexLock lock(mu_);
    jobs_[job].stale = true;
    return Status::Busy("the generation or the coordinator of job '" + job + "' moved (or its "
                        "published decision was removed) while planning");
  }
  const KeyValue& kv = r.gets[0].kvs[0];
  REFT_ASSIGN_OR_RETURN(peer::PublishedPlan p, DecodePlan(kv.key, kv.value));
  p.version = kv.mod_revision;
  return p;
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

// ---- the worker ----

void EtcdJobCoordinator::Run() {
  reft::MutexLock lock(mu_);
  while (running_) {
    // Idle until there is work or a timed round is due: no periodic wake-up (a node follows its
    // jobs through watches), and no spinning while etcd is unreachable (retries are timed).
    const auto ready = [&]() REFT_REQUIRES(mu_) { return !running_ || work_; };
    if (wake_at_) {
      lock.WaitUntil(cv_, *wake_at_, ready);
    } else {
      lock.Wait(cv_, ready);
    }
    if (!running_) return;
    work_ = false;
    wake_at_.reset();
    std::vector<int64_t> cancel;
    cancel.swap(cancel_watches_);
    std::vector<std::string> jobs, forgotten;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      const std::string job = it->first;
      ++it;  // ForgetIfGoneLocked may erase the job
      (ForgetIfGoneLocked(job, &cancel) ? forgotten : jobs).push_back(job);
    }
    lock.Unlock();
    for (int64_t h : cancel) etcd_->CancelWatch(h);
    if (on_forget_) {
      for (const auto& job : forgotten) on_forget_(job);
    }
    for (const auto& job : jobs) {
      bool tracked, stale;
      {
        reft::MutexLock l(mu_);
        tracked = jobs_[job].tracked;
        stale = jobs_[job].stale;
      }
      const Status read = !tracked ? Track(job) : stale ? Refresh(job, false) : Status::OK();
      if (!read.ok()) {
        reft::MutexLock l(mu_);
        RetryLaterLocked();  // etcd unreachable
        continue;
      }
      FlushCompletions(job);
      Campaign(job);
      TryCommit(job);
      MaybeResign(job);
    }
    SyncJoined();
    lock.Lock();
  }
}

void EtcdJobCoordinator::FlushCompletions(const std::string& job) {
  struct Write {
    int64_t step;
    CompletionRecord rec;
    size_t n;
  };
  std::vector<Write> writes;
  int64_t gen_rev, epoch, term;
  std::string coordinator;
  bool direct;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    gen_rev = st.gen_rev;
    epoch = st.decision_rev;
    term = st.coordinator_rev;
    coordinator = st.coordinator;
    // The coordinator's own completions go through etcd: they must outlive its node, whose
    // reports are lost with it while the other nodes' are sent again to its successor. A node
    // that cannot reach etcd reports nothing (its completions wait, as in etcd, until it can):
    // it could not learn the commits they would make, and its lease is running out.
    const auto now = Clock::now();
    direct = peers_ != nullptr && options_.report_to_coordinator && !coordinator.empty() &&
             coordinator != nodes_->node_id() && etcd_->reachable() && now >= st.report_retry_at;
    // One write per step and node: a step is written once every rank of the job connected here
    // completed it (they complete within moments of each other), or when the linger runs out.
    std::vector<store::RankKey> connected;
    for (const auto& [rank, n] : joined_) {
      if (rank.job == job) connected.push_back(rank);
    }
    for (const auto& entry : st.pending) {
      const int64_t step = entry.first;
      const PendingStep& p = entry.second;  // a lambda may not capture a structured binding
      if (st.committed && step <= *st.committed) continue;
      if (p.written >= p.ranks.size()) continue;
      const bool all = std::all_of(connected.begin(), connected.end(),
                                   [&](const store::RankKey& r) { return p.ranks.count(r) > 0; });
      if (!all && now < p.since + options_.completion_linger) {
        WakeAtLocked(p.since + options_.completion_linger);
        continue;
      }
      // Stamped with the layout record its ranks joined under; pending steps of an older one
      // were dropped when this node read the newer (ApplyLayoutLocked).
      writes.push_back({step,
                        {st.gen.generation, epoch, {p.ranks.begin(), p.ranks.end()},
                         p.layout_rev.value_or(st.layout_rev)},
                        p.ranks.size()});
    }
  }
  if (!writes.empty()) AtTestPoint(kReportBuilt, job);
  if (direct) {
    std::string address;
    {
      reft::MutexLock lock(mu_);
      address = jobs_[job].coordinator_address;
    }
    if (address.empty()) ConnectToCoordinator(job, coordinator, term);
  }
  for (auto& w : writes) {
    if (direct) {
      peer::StepCompletionReport report{job,          w.step,      nodes_->node_id(),
                                        w.rec.generation, w.rec.epoch, w.rec.ranks,
                                        w.rec.layout_revision};
      if (ReportToCoordinator(job, coordinator, term, report)) {
        reft::MutexLock lock(mu_);
        JobState& st = jobs_[job];
        // Counts only while that coordinator's term lasts; a new term re-sends everything.
        auto p = st.pending.find(w.step);
        if (st.coordinator_rev == term && p != st.pending.end()) {
          p->second.written = std::max(p->second.written, w.n);
        }
        continue;
      }
      direct = false;  // this and the remaining steps go through etcd
    }
    Txn t;
    t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
        .IfModRevision(keys::Restore(job), Compare::kEqual, epoch)
        .IfModRevision(keys::Layout(job), Compare::kEqual, w.rec.layout_revision)
        .ThenPut(keys::Completion(job, w.step, nodes_->node_id()), Encode(w.rec));
    auto r = etcd_->Commit(t);
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!r.ok()) {
      RetryLaterLocked();
      return;
    }
    if (!r->succeeded) {
      // The generation, the epoch or the layout moved: re-read the job (which drops what belongs
      // to the old timeline), then write again.
      st.stale = true;
      work_ = true;
      return;
    }
    ++traffic_.written;
    auto p = st.pending.find(w.step);
    if (p != st.pending.end()) p->second.written = std::max(p->second.written, w.n);
  }
}

void EtcdJobCoordinator::ConnectToCoordinator(const std::string& job, const std::string& node,
                                              int64_t term) {
  auto member = nodes_->Find(node);
  if (!member || member->state == peer::MemberState::kDead) return;
  // Every node of the job connects when a coordinator takes over (at job start, spread over
  // the nodes' joins), not all at once at the first step under a report's deadline.
  peers_->Connect(member->address);
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (st.coordinator_rev == term) st.coordinator_address = member->address;
}

bool EtcdJobCoordinator::ReportToCoordinator(const std::string& job, const std::string& node,
                                             int64_t term,
                                             const peer::StepCompletionReport& report) {
  // The address was looked up once for the term (ConnectToCoordinator), not per report: N
  // nodes reporting every step must not turn into N etcd reads per step. A failure forgets
  // it, so the next round looks it up again.
  std::string address;
  {
    reft::MutexLock lock(mu_);
    const JobState& st = jobs_[job];
    if (st.coordinator_rev == term) address = st.coordinator_address;
  }
  const Status s = address.empty()
                       ? Status::Unavailable("node '" + node + "' is not registered")
                       : peers_->ReportStepCompletion(address, report, options_.report_timeout);
  reft::MutexLock lock(mu_);
  if (s.ok()) {
    ++traffic_.reported;
  } else {
    ++traffic_.report_failures;
  }
  JobState& st = jobs_[job];
  if (st.coordinator_rev != term) return s.ok();  // a new term starts afresh
  st.coordinator_address = s.ok() ? address : "";
  if (s.ok()) {
    st.report_backoff = std::chrono::milliseconds(0);
    return true;
  }
  // A coordinator that just started takes every node's first connection at once, and one that
  // is cut off from its peers may stay so: back off exponentially, from report_retry up to
  // report_retry_max, while this term lasts.
  st.report_backoff = st.report_backoff.count() == 0
                          ? options_.report_retry
                          : std::min(2 * st.report_backoff, options_.report_retry_max);
  if (st.report_backoff == options_.report_retry ||
      st.report_backoff == options_.report_retry_max) {
    spdlog::warn("job {}: coordinator {} did not take a completion report ({}); completions go "
                 "through etcd for {} ms",
                 job, node, s.ToString(), st.report_backoff.count());
  }
  st.report_retry_at = Clock::now() + st.report_backoff;
  return false;
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
      if (!r->gets.empty()) key = First(r->gets[0]);
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
  st.completions.clear();
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

// A node reports only its own ranks: ones joined there, or whose slot is recorded there. The
// coordinator's view (the joined keys it watches, the locations it commits) answers at once; a
// rank the view does not tie to the reporting node yet (its joined key's event still on the
// way) is read from etcd before the report is refused.
Status EtcdJobCoordinator::NotTied(const peer::StepCompletionReport& report,
                                   const store::RankKey& rank) {
  return Status::PermissionDenied("completion report of job '" + report.job + "' step " +
                                  std::to_string(report.step) + " from node '" + report.node +
                                  "' names rank " + rank.ToString() +
                                  ", which is neither joined on that node nor recorded there");
}

Result<std::set<store::RankKey>> EtcdJobCoordinator::ConfirmTied(
    const peer::StepCompletionReport& report) {
  std::vector<store::RankKey> unknown;
  {
    reft::MutexLock lock(mu_);
    auto it = jobs_.find(report.job);
    if (it == jobs_.end()) return std::set<store::RankKey>();  // refused below
    const JobState& st = it->second;
    for (const auto& r : report.ranks) {
      auto j = st.joined_at.find(r);
      auto l = st.locations.find(r);
      if ((j == st.joined_at.end() || j->second != report.node) &&
          (l == st.locations.end() || l->second != report.node)) {
        unknown.push_back(r);
      }
    }
  }
  std::set<store::RankKey> confirmed;
  for (const auto& r : unknown) {
    if (r.job != report.job) continue;  // refused below
    REFT_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd_->Get(keys::Joined(r)));
    if (!kv) continue;
    auto ref = DecodeNodeRef(kv->key, kv->value);
    if (ref.ok() && ref->node == report.node) confirmed.insert(r);
  }
  return confirmed;
}

Status EtcdJobCoordinator::ReceiveCompletion(const peer::StepCompletionReport& report) {
  if (report.step < 0) {
    return Status::InvalidArgument("completion report of job '" + report.job + "' for step " +
                                   std::to_string(report.step));
  }
  REFT_ASSIGN_OR_RETURN(const std::set<store::RankKey> confirmed, ConfirmTied(report));
  {
    reft::MutexLock lock(mu_);
    // Never creates a job's state: only a job this node coordinates takes reports.
    auto it = jobs_.find(report.job);
    if (it == jobs_.end() || !it->second.leader) {
      return Status::Protocol("node '" + nodes_->node_id() +
                              "' does not coordinate the commits of job '" + report.job + "'");
    }
    JobState& st = it->second;
    if (report.layout_revision > st.layout_rev) {
      // A layout record this node has not read yet (its watch is behind): it re-reads; the
      // sender writes the report to etcd, whose compare of the layout record decides.
      st.stale = true;
      work_ = true;
      return Status::Unavailable("node '" + nodes_->node_id() + "' has not read layout revision " +
                                 std::to_string(report.layout_revision) + " of job '" +
                                 report.job + "' yet");
    }
    if (report.layout_revision != st.layout_rev) {
      return Status::Cancelled(
          "completion report of job '" + report.job + "' step " + std::to_string(report.step) +
          " from node '" + report.node + "' was made under layout revision " +
          std::to_string(report.layout_revision) + "; the job's layout record is revision " +
          std::to_string(st.layout_rev) + " (" + st.layout.ToString() +
          ") since it was reshaped: a completion of the old layout never counts toward the new one");
    }
    if (st.has_layout && report.ranks.size() > static_cast<size_t>(st.layout.world())) {
      return Status::InvalidArgument("completion report of job '" + report.job + "' from node '" +
                                     report.node + "' names " +
                                     std::to_string(report.ranks.size()) +
                                     " ranks; the job has " + std::to_string(st.layout.world()));
    }
    for (const auto& r : report.ranks) {
      Status ok = r.job != report.job ? Status::InvalidArgument("a rank of job '" + r.job + "'")
                  : st.has_layout     ? st.layout.CheckRank(r)
                                      : Status::OK();
      if (!ok.ok()) {
        return Status::InvalidArgument("completion report of job '" + report.job +
                                       "' from node '" + report.node + "' names rank " +
                                       r.ToString() + ": " + ok.message());
      }
    }
    if (st.committed && report.step <= *st.committed) return Status::OK();  // a late copy
    for (const auto& r : report.ranks) {
      auto j = st.joined_at.find(r);
      auto l = st.locations.find(r);
      const bool tied = (j != st.joined_at.end() && j->second == report.node) ||
                        (l != st.locations.end() && l->second == report.node);
      if (!tied && confirmed.count(r) == 0) {
        return NotTied(report, r);
      }
    }
    if (st.completions.size() >= options_.max_pending_steps &&
        st.completions.count(report.step) == 0) {
      return Status::Busy("job '" + report.job + "' has " +
                          std::to_string(st.completions.size()) +
                          " uncommitted steps with completions; write this one to etcd");
    }
    AddCompletionLocked(st, report.step, report.node,
                        CompletionRecord{report.generation, report.epoch, report.ranks,
                                         report.layout_revision});
    ++traffic_.received;
    work_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

CompletionTraffic EtcdJobCoordinator::completion_traffic() const {
  reft::MutexLock lock(mu_);
  return traffic_;
}

void EtcdJobCoordinator::OnCompletionEvent(const std::string& job, const WatchUpdate& u) {
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.leader) return;
    if (u.reset) {
      // Events may have been missed: lead again (this node still holds the key) and re-read
      // the completions in etcd; the reports received meanwhile stay.
      st.leader = false;
      st.want_lead = true;
      TakeLeaderWatchesLocked(st, &cancel_watches_);
    }
    for (const auto& e : u.events) {
      if (e.type != WatchEvent::Type::kPut) continue;
      const int64_t step = keys::CompletionStep(job, e.kv.key);
      if (step < 0) continue;
      if (st.committed && step <= *st.committed) continue;
      auto rec = DecodeCompletion(job, e.kv.key, e.kv.value);
      if (!rec.ok()) {
        spdlog::error("{}", rec.status().ToString());
        continue;
      }
      AddCompletionLocked(st, step, e.kv.key.substr(e.kv.key.rfind('/') + 1), std::move(*rec));
    }
    work_ = true;
  }
  cv_.notify_all();
}

void EtcdJobCoordinator::AddCompletionLocked(JobState& st, int64_t step, const std::string& node,
                                             CompletionRecord rec) {
  StepCompletions& sc = st.completions[step];
  auto [it, fresh] = sc.by_node.try_emplace(node, std::move(rec));
  CompletionRecord& held = it->second;
  if (!fresh) {
    // Within one generation, restore epoch and layout completions only accumulate: a node's
    // record may arrive twice (a report, then its etcd key) and out of order, and adds ranks,
    // never removes them. A record of a newer timeline replaces an older one; an older one is a
    // late copy and changes nothing.
    const auto stamp = [](const CompletionRecord& c) {
      return std::tie(c.generation, c.epoch, c.layout_revision);
    };
    if (stamp(rec) < stamp(held)) return;
    if (stamp(rec) == stamp(held)) {
      for (const auto& r : rec.ranks) {
        if (std::find(held.ranks.begin(), held.ranks.end(), r) == held.ranks.end()) {
          held.ranks.push_back(r);
        }
      }
    } else {
      held = std::move(rec);
      sc.recount = true;
    }
  }
  if (sc.recount || !Counts(st, held)) return;
  for (const auto& r : held.ranks) {
    if (st.layout.CheckRank(r).ok()) sc.covered.insert(r);
  }
}

bool EtcdJobCoordinator::Counts(const JobState& st, const CompletionRecord& rec) {
  return st.has_layout && rec.generation == st.gen.generation && rec.epoch == st.decision_rev &&
         rec.layout_revision == st.layout_rev;
}

Status EtcdJobCoordinator::LayoutMoved(const store::RankKey& rank, int64_t step,
                                       int64_t joined_under, int64_t current) {
  return Status::Cancelled("step " + std::to_string(step) + " of " + rank.ToString() +
                           " is not counted: the job's layout record changed (revision " +
                           std::to_string(current) + ") since this trainer joined under revision " +
                           std::to_string(joined_under) +
                           "; restart the trainer so that it joins the job's layout");
}

void EtcdJobCoordinator::SetTestHook(TestHook hook) {
  reft::MutexLock lock(hook_mu_);
  test_hook_ = std::move(hook);
}

void EtcdJobCoordinator::AtTestPoint(const char* point, const std::string& job) {
  TestHook hook;
  {
    reft::MutexLock lock(hook_mu_);
    hook = test_hook_;
  }
  if (hook) hook(point, job);
}

void EtcdJobCoordinator::RecountLocked(const JobState& st, StepCompletions& sc) const {
  sc.covered.clear();
  sc.recount = false;
  for (const auto& [node, rec] : sc.by_node) {
    if (!Counts(st, rec)) continue;
    for (const auto& r : rec.ranks) {
      if (st.layout.CheckRank(r).ok()) sc.covered.insert(r);
    }
  }
}

void EtcdJobCoordinator::TryCommit(const std::string& job) {
  int64_t step = -1;
  uint64_t generation;
  int64_t gen_rev, committed_rev, epoch, layout_rev;
  std::vector<std::pair<store::RankKey, std::string>> moved;
  {
    reft::MutexLock lock(mu_);
    JobState& st = jobs_[job];
    if (!st.leader || !st.has_layout) return;
    generation = st.gen.generation;
    epoch = st.decision_rev;
    layout_rev = st.layout_rev;
    // The newest step whose completions (of this generation, restore epoch and layout record)
    // cover every rank of the layout.
    for (auto it = st.completions.rbegin(); it != st.completions.rend(); ++it) {
      if (st.committed && it->first <= *st.committed) break;
      StepCompletions& sc = it->second;
      if (sc.recount) RecountLocked(st, sc);
      if (static_cast<int64_t>(sc.covered.size()) < st.layout.world()) continue;
      step = it->first;
      for (const auto& [node, rec] : sc.by_node) {
        if (!Counts(st, rec)) continue;
        for (const auto& r : rec.ranks) {
          auto loc = st.locations.find(r);
          if (loc == st.locations.end() || loc->second != node) moved.emplace_back(r, node);
        }
      }
      break;
    }
    if (step < 0) return;
    gen_rev = st.gen_rev;
    committed_rev = st.committed_rev;
  }
  // Slot locations that changed (a rank on another node than at the last commit): written
  // with the commit, or before it in batches when there are many (a whole job moved).
  const size_t room = options_.max_txn_ops - 2;
  size_t first = 0;
  while (moved.size() - first > room) {
    Txn batch;
    batch.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
        .IfModRevision(keys::Layout(job), Compare::kEqual, layout_rev);
    for (size_t i = 0; i < options_.max_txn_ops && first < moved.size(); ++i, ++first) {
      batch.ThenPut(keys::Location(moved[first].first), Encode(NodeRef{moved[first].second, step}));
    }
    auto r = etcd_->Commit(batch);
    if (!r.ok() || !r->succeeded) {
      reft::MutexLock lock(mu_);
      if (r.ok()) {
        jobs_[job].stale = true;  // the generation or layout moved: re-read, then decide again
        work_ = true;
      } else {
        RetryLaterLocked();
      }
      return;
    }
  }
  Txn t;
  // The commit stands only in the timeline its completions were counted in: the generation,
  // the restore epoch and the layout record (a reshape a partitioned coordinator has not seen
  // yet fails it), and after the commit point it read.
  const CommittedRecord committed{step, generation, NowUnixMs(), epoch, layout_rev};
  t.IfModRevision(keys::Generation(job), Compare::kEqual, gen_rev)
      .IfModRevision(keys::Committed(job), Compare::kEqual, committed_rev)
      .IfModRevision(keys::Restore(job), Compare::kEqual, epoch)
      .IfModRevision(keys::Layout(job), Compare::kEqual, layout_rev)
      .ThenPut(keys::Committed(job), Encode(committed));
  for (size_t i = first; i < moved.size(); ++i) {
    t.ThenPut(keys::Location(moved[i].first), Encode(NodeRef{moved[i].second, step}));
  }
  t.ThenDeleteRange(keys::CompletionsPrefix(job), keys::CompletionsEnd(job, step));
  auto r = etcd_->Commit(t);
  reft::MutexLock lock(mu_);
  JobState& st = jobs_[job];
  if (!r.ok()) {
    RetryLaterLocked();
    return;
  }
  if (!r->succeeded) {
    st.stale = true;  // the timeline or the commit point moved: re-read, then decide again
    work_ = true;
    return;
  }
  for (const auto& [rank, node] : moved) st.locations[rank] = node;
  // The watch delivers the commit too; applying it now saves this node a round trip.
  KeyValue kv;
  kv.key = keys::Committed(job);
  kv.value = Encode(committed);
  kv.mod_revision = r->revision;
  ApplyCommittedLocked(job, st, kv);
  cv_.notify_all();
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
    for (const auto& [rank, n] : joined_) {
      auto it = joined_in_etcd_.find(rank);
      if (it == joined_in_etcd_.end() || it->second == 0) put.push_back(rank);
    }
    for (const auto& [rank, rev] : joined_in_etcd_) {
      if (joined_.count(rank) == 0) del.emplace_back(rank, rev);
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
      if (joined_.count(rank) == 0) withdraw.emplace_back(rank, rev);
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
    } else if (it != joined_in_etcd_.end() && it->second == rev && joined_.count(rank) == 0) {
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

bool EtcdJobCoordinator::ForgetIfGoneLocked(const std::string& job, std::vector<int64_t>* cancel) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || !it->second.records_deleted) return false;
  JobState& st = it->second;
  if (st.connected > 0 || !st.pending.empty() || st.leader) return false;
  for (const auto& [rank, n] : joined_) {
    if (rank.job == job) return false;
  }
  if (!store_->Ranks(job).empty()) return false;  // its slots still hold state: keep following it
  cancel->insert(cancel->end(), st.watches.begin(), st.watches.end());
  TakeLeaderWatchesLocked(st, cancel);
  for (auto* m : {&joined_in_etcd_, &declared_in_etcd_, &joined_layout_rev_}) {
    for (auto r = m->begin(); r != m->end();) r = r->first.job == job ? m->erase(r) : std::next(r);
  }
  jobs_.erase(it);
  spdlog::debug("job {}: its records were deleted; this node forgot it", job);
  return true;
}

std::optional<local::JobOwner> EtcdJobCoordinator::KnownOwner(const std::string& job) const {
  reft::MutexLock lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.owner;
}

size_t EtcdJobCoordinator::followed_jobs() const {
  reft::MutexLock lock(mu_);
  return jobs_.size();
}

bool EtcdJobCoordinator::LeadsAnyJob() {
  reft::MutexLock lock(mu_);
  for (const auto& [job, st] : jobs_) {
    if (st.leader) return true;
  }
  return false;
}

void EtcdJobCoordinator::RebindLeasedKeysLocked() {
  // The worker puts the joined keys under the node's current lease (SyncJoined).
  // Replicated-buffer declarations are declared again at the rank's next snapshot: they are a
  // check, not state.
  for (auto& [rank, rev] : joined_in_etcd_) rev = 0;
  declared_in_etcd_.clear();
  work_ = true;
}

void EtcdJobCoordinator::OnLeaseMoved(int64_t) {
  // The old lease lapses a TTL from now, well after the worker moved the joined keys.
  {
    reft::MutexLock lock(mu_);
    RebindLeasedKeysLocked();
  }
  cv_.notify_all();
}

void EtcdJobCoordinator::OnReregistered(int64_t) {
  // Everything bound to the old lease is gone: joined keys and the coordinator keys.
  {
    reft::MutexLock lock(mu_);
    RebindLeasedKeysLocked();
    for (auto& [job, st] : jobs_) {
      if (st.leader) {
        st.leader = false;
        st.completions.clear();
        TakeLeaderWatchesLocked(st, &cancel_watches_);
      }
      st.want_lead = true;  // Campaign decides whether it may
    }
  }
  cv_.notify_all();
}

}  // namespace reft::coord
