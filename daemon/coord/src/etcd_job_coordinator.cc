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
#include "reft/test_point.h"

namespace reft::coord {

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
    auto rec = internal::LoadGeneration(state_dir_, job);
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
        (this->*read_keys[i].second)(job, st, FirstKey(r->gets[i]));
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
      test_point::Reach(kKeyEvent, job, this);
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
    // one of the new layout may have arrived first) and counts again under the new revision.
    for (auto it = st.pending.begin(); it != st.pending.end();) {
      const auto& stamp = it->second.layout_rev;
      it = stamp && *stamp != kv->mod_revision ? st.pending.erase(it) : std::next(it);
    }
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
  st.completions.Clear();
  const int64_t base = rec.base_step.value_or(-1);
  st.committed = rec.base_step;
  st.committed_in = TimelineStamp{rec.generation, 0, 0, 0};
  // Slots newer than the base belong to the abandoned timeline; writing ones too, so that a
  // trainer that did not restart fails its snapshot instead of completing a stale step.
  const int dropped = DropSlotsAfter(job, base, /*committed_too=*/true, "the old generation");
  SaveStateLocked(job, st);
  generation_events_.Queue(job, InfoLocked(st), dropped);
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
  Status s = internal::SaveGeneration(state_dir_, job,
                                      {st.gen.generation, st.gen.base_step.value_or(-1),
                                       st.gen.persist_floor, st.gen.reason, st.decision_rev});
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
  st.pending.clear();  // the coordinator's view keeps its records: they count no more
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
  {
    reft::MutexLock lock(listeners_mu_);
    for (const CommitListener& l : commit_listeners_) l(job, rec->step);
  }
  st.pending.erase(st.pending.begin(), st.pending.upper_bound(rec->step));
  st.completions.DropThrough(rec->step);
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
    st.late_since.reset();
    for (auto& [step, p] : st.pending) p.written = 0;
    work_ = true;  // connect to the new coordinator now, not under the first report's deadline
  }
  if (!mine && st.leader) {
    spdlog::warn("job {}: this node no longer coordinates the job's commits ({})", job,
                 holder.empty() ? "its coordinator key is gone" : "node " + holder + " does");
    st.leader = false;
    st.completions.Clear();
    // Cancelling from a watch callback is not allowed: the worker does it.
    TakeLeaderWatchesLocked(st, &cancel_watches_);
  }
  // Campaign decides whether this node may lead (trainers connected, or slots of the job held).
  if (holder.empty()) st.want_lead = true;
}

JobGeneration EtcdJobCoordinator::InfoLocked(const JobState& st) const {
  JobGeneration g;
  g.generation = st.gen.generation;
  g.base_step = st.gen.base_step;
  g.persist_floor = st.gen.persist_floor;
  g.reason = st.gen.reason;
  g.newest_committed = st.committed;
  g.committed_in = st.committed_in;
  return g;
}

void EtcdJobCoordinator::NotifyGenerations() { generation_events_.Deliver(); }

// ---- CommitCoordinator ----

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

JobGeneration EtcdJobCoordinator::Generation(const std::string& job) {
  (void)Track(job);
  reft::MutexLock lock(mu_);
  return InfoLocked(jobs_[job]);
}

void EtcdJobCoordinator::AddGenerationListener(GenerationListener listener) {
  generation_events_.AddListener(std::move(listener));
}

void EtcdJobCoordinator::AddLeadershipListener(LeadershipListener listener) {
  reft::MutexLock lock(listeners_mu_);
  leadership_listeners_.push_back(std::move(listener));
}

void EtcdJobCoordinator::AddCommitListener(CommitListener listener) {
  reft::MutexLock lock(listeners_mu_);
  commit_listeners_.push_back(std::move(listener));
}

void EtcdJobCoordinator::SetStateDir(std::string dir) {
  reft::MutexLock lock(mu_);
  state_dir_ = std::move(dir);
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
    for (const auto& job : forgotten) persist_hold_.Forget(job);
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

bool EtcdJobCoordinator::ForgetIfGoneLocked(const std::string& job, std::vector<int64_t>* cancel) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || !it->second.records_deleted) return false;
  JobState& st = it->second;
  if (st.connected > 0 || !st.pending.empty() || st.leader) return false;
  if (joined_.AnyOf(job)) return false;
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
        st.completions.Clear();
        TakeLeaderWatchesLocked(st, &cancel_watches_);
      }
      st.want_lead = true;  // Campaign decides whether it may
    }
  }
  cv_.notify_all();
}

}  // namespace reft::coord
