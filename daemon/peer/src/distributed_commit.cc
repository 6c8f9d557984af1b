#include "reft/peer/distributed_commit.h"

#include <future>

namespace reft::peer {

namespace {
store::RankKey FromRankId(const v1::RankId& r) {
  store::RankKey k;
  k.job = r.job();
  k.pp = r.pp();
  k.tp = r.tp();
  k.dp = r.dp();
  return k;
}
}  // namespace

DistributedCommitCoordinator::DistributedCommitCoordinator(store::SnapshotStore* store,
                                                           Membership* membership,
                                                           PeerClient* client,
                                                           std::chrono::milliseconds interval)
    : store_(store), membership_(membership), client_(client), interval_(interval) {}

DistributedCommitCoordinator::~DistributedCommitCoordinator() { Stop(); }

void DistributedCommitCoordinator::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void DistributedCommitCoordinator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DistributedCommitCoordinator::JobState& DistributedCommitCoordinator::StateLocked(
    const std::string& job) {
  JobState& st = jobs_[job];
  if (st.recovered) return st;
  st.recovered = true;
  std::optional<int64_t> newest;
  for (const auto& r : store_->Ranks(job)) {
    auto c = store_->NewestCommitted(r);
    if (c && (!newest || *c > *newest)) newest = c;
  }
  st.newest_committed = newest;
  // Complete (sealed, uncommitted) slots newer than the commit are completions this node made
  // before it restarted: they re-enter the sets (peers may have lost them with us).
  for (const auto& slot : store_->List(job)) {
    if (slot.state == store::SlotState::kComplete && (!newest || slot.step > *newest)) {
      st.completed[slot.step].insert(slot.rank);
    }
  }
  if (newest) TryCommitLocked(job, st, newest);  // roll a half-finished local commit forward
  return st;
}

void DistributedCommitCoordinator::TryCommitLocked(const std::string& job, JobState& st,
                                                   std::optional<int64_t> known) {
  // `known`: a step already known committed somewhere (hence complete on every rank).
  std::optional<int64_t> target = known;
  if (st.has_layout) {
    for (const auto& [step, ranks] : st.completed) {
      if (static_cast<int64_t>(ranks.size()) >= st.layout.world() && (!target || step > *target)) {
        target = step;
      }
    }
  }
  if (!target) return;
  // Commit every local rank holding the step (older slots are freed by the store only now).
  for (const auto& r : store_->Ranks(job)) {
    auto c = store_->NewestCommitted(r);
    if (c && *c >= *target) continue;
    if (!store_->Get(r, *target).ok()) continue;  // this rank's slot lives elsewhere
    (void)store_->Commit(r, *target);
  }
  if (!st.newest_committed || *target > *st.newest_committed) {
    st.newest_committed = target;
    dirty_.insert(job);
  }
  st.completed.erase(st.completed.begin(), st.completed.upper_bound(*st.newest_committed));
  cv_.notify_all();
}

Status DistributedCommitCoordinator::Join(const store::RankKey& rank,
                                          const local::JobLayout& layout) {
  REFT_RETURN_NOT_OK(local::ValidateRankInLayout(rank, layout));
  std::lock_guard<std::mutex> lock(mu_);
  JobState& st = StateLocked(rank.job);
  if (st.has_layout && !(st.layout == layout)) {
    if (st.connected > 0) {
      return Status::InvalidArgument("job '" + rank.job + "' is running with layout " +
                                     st.layout.ToString() + "; rank " + rank.ToString() +
                                     " connected with " + layout.ToString());
    }
    st.completed.clear();  // reconfigured job: completions of the old world are void
  }
  st.layout = layout;
  st.has_layout = true;
  ++st.connected;
  ++joined_[rank];
  return Status::OK();
}

void DistributedCommitCoordinator::Leave(const store::RankKey& rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(rank.job);
  if (it != jobs_.end() && it->second.connected > 0) --it->second.connected;
  auto j = joined_.find(rank);
  if (j != joined_.end() && --j->second <= 0) joined_.erase(j);
}

std::vector<store::RankKey> DistributedCommitCoordinator::JoinedRanks(
    const std::optional<std::string>& job) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::RankKey> out;
  for (const auto& [rank, n] : joined_) {
    if (!job || rank.job == *job) out.push_back(rank);
  }
  return out;
}

bool DistributedCommitCoordinator::IsJoined(const store::RankKey& rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return joined_.count(rank) > 0;
}

Status DistributedCommitCoordinator::SyncNow(const std::string& job,
                                             std::chrono::milliseconds timeout) {
  if (job.empty()) return Status::InvalidArgument("SyncNow: empty job id");
  v1::ExchangeCommitStateRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    *req.add_jobs() = ExportLocked(job, StateLocked(job));
  }
  // One call per live member at once; each ends at its own deadline, so this returns within
  // about `timeout` even when a member hangs (its future is then an error, not a wait).
  std::vector<std::pair<std::string, std::future<Status>>> calls;
  for (const auto& m : membership_->LiveMembers()) {
    calls.emplace_back(m.node_id, std::async(std::launch::async, [this, m, req, timeout]() {
                         auto r = client_->ExchangeCommitState(m.address, req, timeout);
                         if (!r.ok()) return r.status();
                         for (const auto& j : r->jobs()) (void)MergeRemote(j);
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

Status DistributedCommitCoordinator::Complete(const store::RankKey& rank, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    JobState& st = StateLocked(rank.job);
    if (st.newest_committed && step <= *st.newest_committed) return Status::OK();
    st.completed[step].insert(rank);
    dirty_.insert(rank.job);
    TryCommitLocked(rank.job, st, std::nullopt);
  }
  cv_.notify_all();  // wakes the exchange thread to push at once
  return Status::OK();
}

std::optional<int64_t> DistributedCommitCoordinator::NewestCommitted(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  return StateLocked(job).newest_committed;
}

bool DistributedCommitCoordinator::WaitCommitted(const std::string& job, int64_t step,
                                                 std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    auto n = StateLocked(job).newest_committed;
    return n && *n >= step;
  });
}

v1::JobCommitState DistributedCommitCoordinator::ExportLocked(const std::string& job,
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
  for (const auto& [step, ranks] : st.completed) {
    auto* sc = out.add_completed();
    sc->set_step(step);
    for (const auto& r : ranks) {
      auto* id = sc->add_ranks();
      id->set_job(r.job);
      id->set_pp(r.pp);
      id->set_tp(r.tp);
      id->set_dp(r.dp);
    }
  }
  return out;
}

Result<v1::JobCommitState> DistributedCommitCoordinator::MergeRemote(const v1::JobCommitState& in) {
  if (in.job().empty()) return Status::InvalidArgument("JobCommitState.job is empty");
  v1::JobCommitState out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    JobState& st = StateLocked(in.job());
    if (in.dp() > 0) {
      local::JobLayout l;
      l.dp = in.dp();
      l.tp = in.tp();
      l.pp = in.pp();
      l.zero = st.has_layout ? st.layout.zero : 0;  // zero does not change the world
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
      auto& set = st.completed[sc.step()];
      for (const auto& r : sc.ranks()) {
        store::RankKey k = FromRankId(r);
        if (k.job != in.job()) continue;
        if (st.has_layout && !local::ValidateRankInLayout(k, st.layout).ok()) continue;
        grew = set.insert(k).second || grew;
      }
    }
    std::optional<int64_t> known;
    if (in.has_committed()) known = in.newest_committed();
    if (grew) dirty_.insert(in.job());
    TryCommitLocked(in.job(), st, known);
    out = ExportLocked(in.job(), st);
  }
  cv_.notify_all();
  return out;
}

std::vector<v1::JobCommitState> DistributedCommitCoordinator::AllStates() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::JobCommitState> out;
  for (const auto& [job, st] : jobs_) out.push_back(ExportLocked(job, st));
  return out;
}

void DistributedCommitCoordinator::PushAll(const std::vector<v1::JobCommitState>& jobs) {
  if (jobs.empty()) return;
  v1::ExchangeCommitStateRequest req;
  for (const auto& j : jobs) *req.add_jobs() = j;
  std::vector<std::future<void>> calls;
  for (const auto& m : membership_->LiveMembers()) {
    calls.push_back(std::async(std::launch::async, [this, m, req]() {
      auto r = client_->ExchangeCommitState(m.address, req);
      if (!r.ok()) return;  // the next round retries
      for (const auto& j : r->jobs()) (void)MergeRemote(j);
    }));
  }
  for (auto& c : calls) c.get();
}

void DistributedCommitCoordinator::Run() {
  auto next_full = std::chrono::steady_clock::now() + interval_;
  while (true) {
    std::vector<v1::JobCommitState> push;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next_full, [&] { return !running_ || !dirty_.empty(); });
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

}  // namespace reft::peer
