#include "gossip_job_coordinator.h"

#include <future>

#include "generation_file.h"
#include "reft/log.h"
#include "reft/peer/rank_id.h"
#include "reft/store/job_commit.h"

namespace reft::coord {

using peer::FromRankId;
using peer::ToRankId;

namespace {

// The job's restore epoch with gossip: the version of this node's own newest decision.
int64_t CurrentEpoch(const std::map<std::string, RestoreDecision>& decisions,
                     const std::string& job) {
  auto d = decisions.find(job);
  return d == decisions.end() ? 0 : d->second.version;
}

// A peer's state this node refuses to merge (another layout, a malformed state) changes nothing
// here; the exchange goes on with the other jobs and members.
void WarnIfRefused(const Status& merged, const std::string& job, const std::string& node) {
  if (!merged.ok()) {
    LogWarning("commit state of job '" + job + "' from node '" + node +
               "' not merged: " + merged.ToString());
  }
}

}  // namespace

GossipJobCoordinator::GossipJobCoordinator(store::SnapshotStore* store,
                                           SwimMembership* membership, peer::PeerClient* client,
                                           std::chrono::milliseconds interval)
    : store_(store), membership_(membership), client_(client), interval_(interval) {}

GossipJobCoordinator::~GossipJobCoordinator() { Stop(); }

Status GossipJobCoordinator::Start() {
  reft::MutexLock lock(mu_);
  if (running_) return Status::OK();
  running_ = true;
  thread_ = reft::Thread("reft-commit-xch", [this] { Run(); });
  return Status::OK();
}

void GossipJobCoordinator::Stop() {
  {
    reft::MutexLock lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

GossipJobCoordinator::JobState& GossipJobCoordinator::StateLocked(
    const std::string& job) {
  JobState& st = jobs_[job];
  if (st.recovered) return st;
  st.recovered = true;
  std::optional<int64_t> newest;
  for (const auto& r : store_->Ranks(job)) {
    auto c = store_->NewestCommitted(r);
    if (c && (!newest || *c > *newest)) newest = c;
  }
  // The generation this node's slots belong to (a restart after a fallback); a record that
  // cannot be read leaves generation 0, so the first peer state of the job's real generation
  // rolls this node back: the safe direction (its slots newer than the base are dropped).
  if (!state_dir_.empty()) {
    auto rec = internal::LoadGeneration(state_dir_, job);
    if (rec.ok() && rec->has_value()) {
      st.generation = (*rec)->generation;
      if (st.generation > 0) st.base_step = (*rec)->base_step;
      st.persist_floor = (*rec)->persist_floor;
      st.reason = (*rec)->reason;
      if (st.base_step && (!newest || *newest < *st.base_step)) newest = st.base_step;
    }
  }
  st.newest_committed = newest;
  // Complete (sealed, uncommitted) slots newer than the commit are completions this node made
  // before it restarted: they re-enter the sets (peers may have lost them with us).
  for (const auto& slot : store_->List(job)) {
    if (slot.state == store::SlotState::kComplete && (!newest || slot.step > *newest)) {
      st.completed.Add(slot.step, PendingCompletions::kMergedSource, CountingTimeline(st),
                       {slot.rank});
    }
  }
  if (newest) TryCommitLocked(job, st, newest);  // roll a half-finished local commit forward
  return st;
}

void GossipJobCoordinator::TryCommitLocked(const std::string& job, JobState& st,
                                                   std::optional<int64_t> known) {
  // `known`: a step already known committed somewhere (hence complete on every rank).
  std::optional<int64_t> target = known;
  if (st.has_layout) {
    auto covered = st.completed.NewestCovered(CountingTimeline(st), &st.layout);
    if (covered && (!target || *covered > *target)) target = covered;
  }
  if (!target) return;
  // Every local rank holding the step commits it; ranks outside the layout (a reshape) are
  // released (docs/recovery.md "Reshape").
  store::CommitJobStep(store_, job, *target, st.has_layout ? &st.layout : nullptr);
  if (!st.newest_committed || *target > *st.newest_committed) {
    st.newest_committed = target;
    dirty_.insert(job);
  }
  st.completed.DropThrough(*st.newest_committed);
  cv_.notify_all();
}

Status GossipJobCoordinator::Join(const store::RankKey& rank, const JobLayout& layout,
                                          const local::Joiner&) {
  REFT_RETURN_NOT_OK(layout.CheckRank(rank));
  reft::MutexLock lock(mu_);
  JobState& st = StateLocked(rank.job);
  if (st.has_layout && !(st.layout == layout)) {
    if (st.connected > 0) {
      return local::LayoutConflict(rank, st.layout, layout);
    }
    st.completed.Clear();  // reconfigured job: completions of the old world are void
  }
  st.layout = layout;
  st.has_layout = true;
  ++st.connected;
  joined_.Add(rank);
  return Status::OK();
}

void GossipJobCoordinator::Leave(const store::RankKey& rank) {
  reft::MutexLock lock(mu_);
  auto it = jobs_.find(rank.job);
  if (it != jobs_.end() && it->second.connected > 0) --it->second.connected;
  joined_.Remove(rank);
}

std::vector<store::RankKey> GossipJobCoordinator::JoinedRanks(
    const std::optional<std::string>& job) {
  reft::MutexLock lock(mu_);
  return joined_.Ranks(job);
}

bool GossipJobCoordinator::IsJoined(const store::RankKey& rank) {
  reft::MutexLock lock(mu_);
  return joined_.Contains(rank);
}

Status GossipJobCoordinator::SyncNow(const std::string& job,
                                             std::chrono::milliseconds timeout) {
  if (job.empty()) return Status::InvalidArgument("SyncNow: empty job id");
  v1::ExchangeCommitStateRequest req;
  {
    reft::MutexLock lock(mu_);
    *req.add_jobs() = ExportLocked(job, StateLocked(job));
  }
  // One call per live member at once; each ends at its own deadline, so this returns within
  // about `timeout` even when a member hangs (its future is then an error, not a wait).
  std::vector<std::pair<std::string, std::future<Status>>> calls;
  for (const auto& m : membership_->LiveMembers()) {
    calls.emplace_back(m.node_id, reft::Async("reft-sync-state", [this, m, req, timeout]() {
                         auto r = client_->ExchangeCommitState(m.address, req, timeout);
                         if (!r.ok()) return r.status();
                         for (const auto& j : r->jobs())
                           WarnIfRefused(MergeRemote(j).status(), j.job(), m.node_id);
                         return Status::OK();
                       }));
  }
  std::string missing;
  for (auto& [node, f] : calls) {
    Status s = f.get();
    if (s.ok()) continue;
    if (!missing.empty()) missing += "; ";
    missing += node + " (" + s.ToString() + ")";
  }
  if (!missing.empty()) {
    return Status::Unavailable("commit state of job '" + job +
                               "' could not be exchanged with: " + missing);
  }
  return Status::OK();
}

Status GossipJobCoordinator::Complete(const store::RankKey& rank, int64_t step,
                                              int64_t epoch) {
  {
    reft::MutexLock lock(mu_);
    const int64_t current = CurrentEpoch(decisions_, rank.job);
    if (epoch != current) return local::StaleEpoch(rank, step, epoch, current);
    JobState& st = StateLocked(rank.job);
    if (st.newest_committed && step <= *st.newest_committed) return Status::OK();
    st.completed.Add(step, PendingCompletions::kMergedSource, CountingTimeline(st), {rank});
    dirty_.insert(rank.job);
    TryCommitLocked(rank.job, st, std::nullopt);
  }
  cv_.notify_all();  // wakes the exchange thread to push at once
  return Status::OK();
}

int64_t GossipJobCoordinator::RestoreEpoch(const std::string& job) {
  reft::MutexLock lock(mu_);
  return CurrentEpoch(decisions_, job);
}

std::optional<int64_t> GossipJobCoordinator::NewestCommitted(const std::string& job) {
  reft::MutexLock lock(mu_);
  return StateLocked(job).newest_committed;
}

bool GossipJobCoordinator::WaitCommitted(const std::string& job, int64_t step,
                                                 std::chrono::milliseconds timeout) {
  reft::MutexLock lock(mu_);
  return lock.WaitFor(cv_, timeout, [&]() REFT_REQUIRES(mu_) {
    auto n = StateLocked(job).newest_committed;
    return n && *n >= step;
  });
}

v1::JobCommitState GossipJobCoordinator::ExportLocked(const std::string& job,
                                                              const JobState& st) const {
  v1::JobCommitState out;
  out.set_job(job);
  if (st.has_layout) {
    out.set_dp(st.layout.dp);
    out.set_tp(st.layout.tp);
    out.set_pp(st.layout.pp);
  }
  if (st.newest_committed) {
    out.set_has_committed(true);
    out.set_newest_committed(*st.newest_committed);
  }
  out.set_generation(st.generation);
  if (st.base_step) {
    out.set_has_base(true);
    out.set_base_step(*st.base_step);
  }
  out.set_persist_floor(st.persist_floor);
  out.set_fallback_reason(st.reason);
  for (const auto& [step, ranks] : st.completed.RanksByStep()) {
    auto* sc = out.add_completed();
    sc->set_step(step);
    for (const auto& r : ranks) {
      ToRankId(r, sc->add_ranks());
    }
  }
  return out;
}

Result<v1::JobCommitState> GossipJobCoordinator::MergeRemote(const v1::JobCommitState& in) {
  if (in.job().empty()) return Status::InvalidArgument("JobCommitState.job is empty");
  v1::JobCommitState out;
  {
    reft::MutexLock lock(mu_);
    JobState& st = StateLocked(in.job());
    // Generations: a lower one is stale (answered with ours, so the sender rolls back); a higher
    // one replaces ours. Two restores that started the same generation from different bases
    // (their views of the persistent tier differed) settle on the lower base, everywhere.
    if (in.generation() < st.generation) return ExportLocked(in.job(), st);
    const bool lower_base = in.generation() == st.generation && st.generation > 0 &&
                            in.has_base() && st.base_step && in.base_step() < *st.base_step;
    if (in.generation() > st.generation || lower_base) {
      AdoptGenerationLocked(in.job(), st, in.generation(), in.has_base() ? in.base_step() : -1,
                            in.persist_floor(), in.fallback_reason());
    }
    if (in.dp() > 0) {
      JobLayout l;
      l.dp = in.dp();
      l.tp = in.tp();
      l.pp = in.pp();
      l.zero = st.has_layout ? st.layout.zero : 0;  // zero does not change the world
      if (Status v = l.Validate(); !v.ok()) return v;
      if (st.has_layout && l.world() != st.layout.world()) {
        return Status::InvalidArgument("job '" + in.job() + "': peer reports layout dp=" +
                                       std::to_string(l.dp) + ",tp=" + std::to_string(l.tp) +
                                       ",pp=" + std::to_string(l.pp) + " but this node has " +
                                       st.layout.ToString());
      }
      if (!st.has_layout) {
        st.layout = l;
        st.has_layout = true;
      }
    }
    bool grew = false;
    for (const auto& sc : in.completed()) {
      if (st.newest_committed && sc.step() <= *st.newest_committed) continue;
      std::vector<store::RankKey> ranks;
      for (const auto& r : sc.ranks()) {
        store::RankKey k = FromRankId(r);
        if (k.job != in.job()) continue;
        if (st.has_layout && !st.layout.CheckRank(k).ok()) continue;
        ranks.push_back(std::move(k));
      }
      if (st.completed.Add(sc.step(), PendingCompletions::kMergedSource, CountingTimeline(st),
                           ranks)) {
        grew = true;
      }
    }
    std::optional<int64_t> known;
    if (in.has_committed()) known = in.newest_committed();
    if (grew) dirty_.insert(in.job());
    TryCommitLocked(in.job(), st, known);
    out = ExportLocked(in.job(), st);
  }
  cv_.notify_all();
  NotifyGenerations();
  return out;
}

void GossipJobCoordinator::AdoptGenerationLocked(const std::string& job, JobState& st,
                                                         uint64_t gen, int64_t base,
                                                         int64_t floor,
                                                         const std::string& reason) {
  st.generation = gen;
  st.base_step = base >= 0 ? std::optional<int64_t>(base) : std::nullopt;
  st.persist_floor = floor;
  st.reason = reason;
  st.completed.Clear();
  st.newest_committed = st.base_step;
  // Roll the store back: slots newer than the base belong to the abandoned timeline (a step
  // that will be trained again, possibly to other bytes). Dropping writing slots too makes a
  // trainer that did not restart fail its snapshot instead of completing a stale step.
  std::set<int64_t> newer;
  int dropped = 0;
  for (const auto& slot : store_->List(job)) {
    if (slot.step > base) {
      newer.insert(slot.step);
      ++dropped;
    }
  }
  for (int64_t step : newer) {
    if (Status d = store_->Drop(job, step); !d.ok()) {
      LogWarning("dropping step " + std::to_string(step) + " of job '" + job +
                 "' (abandoned by the new generation) failed: " + d.ToString());
    }
  }
  if (!state_dir_.empty()) {
    // Best effort: without the record a restarted daemon starts at generation 0 and is rolled
    // back again by its peers (dropping its slots newer than the base): safe, only slower.
    Status saved = internal::SaveGeneration(state_dir_, job,
                                            {st.generation, base, st.persist_floor, st.reason});
    if (!saved.ok()) {
      LogWarning("recording generation " + std::to_string(st.generation) + " of job '" + job +
                 "' failed: " + saved.ToString());
    }
  }
  dirty_.insert(job);
  generation_events_.Queue(job, InfoLocked(st), dropped);
}

JobGeneration GossipJobCoordinator::InfoLocked(const JobState& st) const {
  JobGeneration g;
  g.generation = st.generation;
  g.base_step = st.base_step;
  g.persist_floor = st.persist_floor;
  g.reason = st.reason;
  g.newest_committed = st.newest_committed;
  g.committed_in.generation = st.generation;  // gossip knows no epochs or layout revisions
  return g;
}

std::optional<JobLayout> GossipJobCoordinator::Layout(const std::string& job) {
  reft::MutexLock lock(mu_);
  if (!KnownLocked(job)) return std::nullopt;
  const JobState& st = StateLocked(job);
  if (!st.has_layout) return std::nullopt;
  return st.layout;
}

std::vector<std::string> GossipJobCoordinator::Jobs() {
  reft::MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [job, st] : jobs_) out.push_back(job);
  return out;
}

JobGeneration GossipJobCoordinator::Generation(const std::string& job) {
  reft::MutexLock lock(mu_);
  if (!KnownLocked(job)) return JobGeneration{};
  return InfoLocked(StateLocked(job));
}

bool GossipJobCoordinator::KnownLocked(const std::string& job) {
  // Admin queries name arbitrary jobs: only jobs seen here (state, slots, or a generation
  // record) get a state, so a typo is not gossiped to every member forever.
  if (jobs_.count(job) > 0 || !store_->Ranks(job).empty()) return true;
  if (state_dir_.empty()) return false;
  auto rec = internal::LoadGeneration(state_dir_, job);
  return !rec.ok() || rec->has_value();
}

JobGeneration GossipJobCoordinator::StartGeneration(const std::string& job,
                                                            const GenerationStart& start) {
  JobGeneration out;
  {
    reft::MutexLock lock(mu_);
    JobState& st = StateLocked(job);
    // This node's view only (no consensus): a step it committed since the fall-back was decided
    // voids the fall-back here.
    if (st.generation == start.from && st.newest_committed == start.seen_committed) {
      AdoptGenerationLocked(job, st, start.from + 1, start.base_step, start.persist_floor, start.reason);
      RestoreDecision& d = decisions_[job];
      const int64_t version = d.version + 1;
      d = RestoreDecision{start.from + 1,         start.base_step, RestoreSource::kTier,
                          membership_->node_id(), start.reason,    version};
    }
    out = InfoLocked(st);
  }
  cv_.notify_all();  // the exchange thread pushes the new generation at once
  NotifyGenerations();
  return out;
}

void GossipJobCoordinator::AddGenerationListener(GenerationListener listener) {
  generation_events_.AddListener(std::move(listener));
}

void GossipJobCoordinator::SetStateDir(std::string dir) {
  reft::MutexLock lock(mu_);
  state_dir_ = std::move(dir);
}

void GossipJobCoordinator::NotifyGenerations() { generation_events_.Deliver(); }

Result<std::vector<std::string>> GossipJobCoordinator::JobNodes(const std::string&) {
  std::vector<std::string> out;
  for (const auto& m : membership_->LiveMembers()) out.push_back(m.node_id);
  return out;
}

bool GossipJobCoordinator::LeadsJob(const std::string&) {
  for (const auto& m : membership_->LiveMembers()) {
    if (m.node_id < membership_->node_id()) return false;
  }
  return true;
}

Result<std::optional<RestoreDecision>> GossipJobCoordinator::Decision(
    const std::string& job) {
  reft::MutexLock lock(mu_);
  auto it = decisions_.find(job);
  if (it == decisions_.end()) return std::optional<RestoreDecision>();
  return std::optional<RestoreDecision>(it->second);
}

Result<RestoreDecision> GossipJobCoordinator::ProposeDecision(
    const std::string& job, const RestoreDecision& decision, int64_t expected_version) {
  reft::MutexLock lock(mu_);
  RestoreDecision& cur = decisions_[job];
  if (cur.version != expected_version) return cur;
  const int64_t next = cur.version + 1;
  cur = decision;
  cur.version = next;
  return cur;
}

std::vector<v1::JobCommitState> GossipJobCoordinator::AllStates() {
  reft::MutexLock lock(mu_);
  std::vector<v1::JobCommitState> out;
  for (const auto& [job, st] : jobs_) out.push_back(ExportLocked(job, st));
  return out;
}

void GossipJobCoordinator::PushAll(const std::vector<v1::JobCommitState>& jobs) {
  if (jobs.empty()) return;
  v1::ExchangeCommitStateRequest req;
  for (const auto& j : jobs) *req.add_jobs() = j;
  std::vector<std::future<void>> calls;
  for (const auto& m : membership_->LiveMembers()) {
    calls.push_back(reft::Async("reft-push-state", [this, m, req]() {
      auto r = client_->ExchangeCommitState(m.address, req);
      if (!r.ok()) return;  // the next round retries
      for (const auto& j : r->jobs()) WarnIfRefused(MergeRemote(j).status(), j.job(), m.node_id);
    }));
  }
  for (auto& c : calls) c.get();
}

void GossipJobCoordinator::Run() {
  auto next_full = std::chrono::steady_clock::now() + interval_;
  while (true) {
    std::vector<v1::JobCommitState> push;
    {
      reft::MutexLock lock(mu_);
      lock.WaitUntil(cv_, next_full,
                     [&]() REFT_REQUIRES(mu_) { return !running_ || !dirty_.empty(); });
      if (!running_) return;
      bool full = std::chrono::steady_clock::now() >= next_full;
      if (full) {
        next_full = std::chrono::steady_clock::now() + interval_;
        for (const auto& [job, st] : jobs_) push.push_back(ExportLocked(job, st));
      } else {
        for (const auto& job : dirty_) push.push_back(ExportLocked(job, jobs_[job]));
      }
      dirty_.clear();
    }
    PushAll(push);
  }
}

}  // namespace reft::coord
