#include "local_job_records.h"

#include <sys/stat.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace reft::app {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The unix ms a file was last written (0 when it cannot be read).
int64_t ModifiedMs(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// The same owner record: a job forgotten and claimed again has a new claim time.
bool SameClaim(const local::JobOwner& a, const local::JobOwner& b) {
  return a.uid == b.uid && a.gid == b.gid && a.claimed_at_ms == b.claimed_at_ms &&
         a.claimed_on == b.claimed_on;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

LocalJobRecords::LocalJobRecords(local::JobOwners* owners, store::SnapshotStore* store,
                                 SessionSource sessions, recovery::TierAccess* tier,
                                 LocalJobRecordsOptions options)
    : JobRecords(peer::SweepInterval(options.forget_after)),
      owners_(owners),
      store_(store),
      sessions_(std::move(sessions)),
      tier_(tier),
      options_(std::move(options)) {}

LocalJobRecords::~LocalJobRecords() { Stop(); }

Result<std::optional<int64_t>> LocalJobRecords::PersistedStep(const std::string& job) {
  if (tier_ == nullptr || !tier_->enabled()) return std::optional<int64_t>();
  REFT_ASSIGN_OR_RETURN(auto tier, tier_->Get(false));
  auto steps = tier->ListSteps(job);
  if (!steps.ok()) {
    tier_->Report(steps.status());
    return steps.status();
  }
  if (steps->empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(steps->back());
}

Result<std::map<std::string, int64_t>> LocalJobRecords::PersistedSteps(
    const std::set<std::string>& jobs) {
  std::map<std::string, int64_t> out;
  if (tier_ == nullptr || !tier_->enabled() || jobs.empty()) return out;
  REFT_ASSIGN_OR_RETURN(auto tier, tier_->Get(false));
  // One listing of the tier's root, then the steps of the jobs that are there.
  auto listed = tier->ListJobs();
  if (!listed.ok()) {
    tier_->Report(listed.status());
    return listed.status();
  }
  for (const auto& job : *listed) {
    if (jobs.count(job) == 0) continue;
    auto steps = tier->ListSteps(job);
    if (!steps.ok()) {
      tier_->Report(steps.status());
      return steps.status();
    }
    if (!steps->empty()) out[job] = steps->back();
  }
  return out;
}

Result<LocalJobRecords::Snapshot> LocalJobRecords::ReadAll() {
  Snapshot snap;
  REFT_ASSIGN_OR_RETURN(auto owned, owners_->All());
  if (sessions_) snap.sessions = sessions_();
  auto& jobs = snap.jobs;
  auto entry = [&jobs](const std::string& job) -> peer::JobRecord& {
    peer::JobRecord& r = jobs[job];
    r.job = job;
    return r;
  };
  for (auto& [job, owner] : owned) entry(job).owner = std::move(owner);
  for (const auto& s : snap.sessions) {
    if (s.joined) entry(s.rank.job).trainers++;
  }
  std::set<std::string> with_slots;
  std::map<std::string, int64_t> committed_at;  // unix ms the newest committed slot was written
  for (const auto& slot : store_->List()) {
    peer::JobRecord& r = entry(slot.rank.job);
    with_slots.insert(slot.rank.job);
    if (slot.state != store::SlotState::kCommitted) continue;
    if (!r.committed_step || slot.step > *r.committed_step) r.committed_step = slot.step;
    int64_t& at = committed_at[slot.rank.job];
    at = std::max(at, ModifiedMs(slot.path));
  }
  std::set<std::string> names;
  for (const auto& [job, r] : jobs) names.insert(job);
  auto persisted = PersistedSteps(names);
  if (!persisted.ok()) snap.tier_error = persisted.status();

  const int64_t now_ms = NowUnixMs();
  MutexLock lock(mu_);
  for (auto it = activity_.begin(); it != activity_.end();) {  // jobs no longer listed
    it = jobs.count(it->first) == 0 ? activity_.erase(it) : std::next(it);
  }
  for (auto& [job, r] : jobs) {
    if (persisted.ok()) {
      if (auto p = persisted->find(job); p != persisted->end()) r.persisted_step = p->second;
    }
    if (r.trainers > 0 || with_slots.count(job) > 0) r.nodes.push_back(options_.node_id);
    if (r.trainers > 0) {
      r.state = "running";
    } else if (with_slots.count(job) > 0) {
      r.state = "idle";
    } else if (r.persisted_step) {
      r.state = "persisted";
    } else {
      r.state = "gone";
    }
    Activity& a = activity_[job];
    if (r.trainers > 0) a.at_ms = now_ms;
    if (persisted.ok()) {
      // A new persisted step seen here (the first sighting after a start says nothing of when).
      if (r.persisted_step && a.persisted && *r.persisted_step != *a.persisted) a.at_ms = now_ms;
      a.persisted = r.persisted_step;
    }
    r.last_activity_ms = std::max({a.at_ms, r.owner ? r.owner->claimed_at_ms : 0,
                                   committed_at.count(job) ? committed_at[job] : 0});
  }
  return snap;
}

std::set<std::string> LocalJobRecords::RestoreRacedOwners(
    const std::vector<local::SessionInfo>& sessions) {
  std::map<std::string, local::JobOwner> raced;
  std::set<std::string> restored;
  {
    MutexLock lock(mu_);
    const auto now = Clock::now();
    for (auto it = forgotten_.begin(); it != forgotten_.end();) {
      it = now - it->second.at >= options_.forget_after ? forgotten_.erase(it) : std::next(it);
    }
    for (const auto& s : sessions) {
      if (!s.joined) continue;
      auto it = forgotten_.find(s.rank.job);
      if (it == forgotten_.end()) continue;
      raced.emplace(it->first, it->second.owner);
      forgotten_.erase(it);
    }
  }
  for (const auto& [job, owner] : raced) {
    // Admit claims the job with `owner` when nobody has claimed it since; a claim made since
    // stands (its trainer passed the same door).
    PeerCredentials as_owner;
    as_owner.uid = owner.uid;
    if (auto st = owners_->Admit(job, as_owner, owner); st.ok()) {
      spdlog::warn("a trainer of job {} joined while its owner was being forgotten: owner {} "
                   "kept", job, owner.Describe());
      restored.insert(job);
    }
  }
  return restored;
}

bool LocalJobRecords::StillGone(const std::string& job, const local::JobOwner& owner,
                                const std::set<std::string>& joined) {
  if (joined.count(job) > 0) return false;
  auto now = owners_->Owner(job);
  if (!now.ok() || !now->has_value() || !SameClaim(**now, owner)) return false;
  if (!store_->List(job).empty()) return false;
  auto persisted = PersistedStep(job);
  return persisted.ok() && !persisted->has_value();
}

Result<std::vector<std::string>> LocalJobRecords::SweepOnce() {
  REFT_ASSIGN_OR_RETURN(Snapshot snap, ReadAll());
  // A trainer admitted just before its job was forgotten may show up only now.
  RestoreRacedOwners(snap.sessions);
  const auto now = Clock::now();
  std::vector<std::pair<std::string, local::JobOwner>> expired;
  {
    MutexLock lock(mu_);
    for (auto it = gone_.begin(); it != gone_.end();) {  // jobs in use again, or forgotten
      auto j = snap.jobs.find(it->first);
      const bool still = j != snap.jobs.end() && j->second.state == "gone" && j->second.owner &&
                         SameClaim(*j->second.owner, it->second.owner);
      it = still ? std::next(it) : gone_.erase(it);
    }
    if (snap.tier_error) {
      if (!tier_unreadable_) {
        spdlog::warn("job records: the persistent tier cannot be read ({}); no job is forgotten "
                     "until it can", snap.tier_error->ToString());
      }
      tier_unreadable_ = true;
    } else {
      tier_unreadable_ = false;
    }
    for (const auto& [job, r] : snap.jobs) {
      if (r.state != "gone" || !r.owner) continue;  // nothing to forget without an owner
      auto it = gone_.try_emplace(job, Gone{now, *r.owner}).first;
      if (!snap.tier_error && now - it->second.since >= options_.forget_after) {
        expired.emplace_back(job, it->second.owner);
      }
    }
  }
  if (expired.empty()) return std::vector<std::string>();

  std::set<std::string> joined;
  if (sessions_) {
    for (const auto& s : sessions_()) {
      if (s.joined) joined.insert(s.rank.job);
    }
  }
  std::vector<std::string> forgot;
  for (const auto& [job, owner] : expired) {
    if (!StillGone(job, owner, joined)) continue;
    if (auto st = owners_->Forget(job); !st.ok()) {
      if (st.code() != StatusCode::kNotFound) spdlog::warn("forgetting job {}: {}", job, st.ToString());
      continue;
    }
    forgot.push_back(job);
    MutexLock lock(mu_);
    forgotten_[job] = Forgotten{Clock::now(), owner};
    gone_.erase(job);
    activity_.erase(job);
  }
  {
    // A trainer admitted (owner checked) just before its job was forgotten joins just after.
    if (sessions_) {
      const auto restored = RestoreRacedOwners(sessions_());
      forgot.erase(std::remove_if(forgot.begin(), forgot.end(),
                                  [&](const std::string& j) { return restored.count(j) > 0; }),
                   forgot.end());
    }
  }
  if (!forgot.empty()) {
    spdlog::info("forgot {} job(s) gone for {} s{}{}", forgot.size(),
                 std::chrono::duration_cast<std::chrono::seconds>(options_.forget_after).count(),
                 forgot.size() <= 8 ? ": " : "", forgot.size() <= 8 ? JoinNames(forgot) : "");
  }
  return forgot;
}

Status LocalJobRecords::NotePersisted(const std::string& job, int64_t step) {
  MutexLock lock(mu_);
  auto it = activity_.find(job);
  if (it == activity_.end()) return Status::OK();  // not listed: nothing to note
  it->second.at_ms = NowUnixMs();
  it->second.persisted = step;
  return Status::OK();
}

Result<std::vector<peer::JobRecord>> LocalJobRecords::List() {
  REFT_ASSIGN_OR_RETURN(Snapshot snap, ReadAll());
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<peer::JobRecord> out;
  out.reserve(snap.jobs.size());
  for (auto& [job, r] : snap.jobs) {
    if (r.state == "gone") {
      // The sweeper's count when it saw the job gone with this owner; else all of forget_after.
      auto left = options_.forget_after;
      auto it = gone_.find(job);
      if (it != gone_.end() && r.owner && SameClaim(*r.owner, it->second.owner)) {
        left -= std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.since);
      }
      r.forget_in_ms = std::max<int64_t>(0, left.count());
    }
    out.push_back(std::move(r));
  }
  return out;
}

Status LocalJobRecords::Release(const std::string& job, bool force) {
  REFT_ASSIGN_OR_RETURN(Snapshot snap, ReadAll());
  auto it = snap.jobs.find(job);
  if (it == snap.jobs.end()) return Status::NotFound("no job '" + job + "' has records");
  const peer::JobRecord& r = it->second;
  // The tier cannot tell whether it holds a step: refused unless forced (or a trainer says why).
  if (!force && r.trainers == 0 && snap.tier_error) {
    return Status::Unavailable("cannot tell whether the persistent tier holds a step of job '" +
                               job + "' (" + snap.tier_error->message() +
                               "); try again when it can be read, or --force");
  }
  REFT_RETURN_NOT_OK(peer::CheckReleasable(r, force));
  if (r.owner) {
    if (auto st = owners_->Forget(job); !st.ok() && st.code() != StatusCode::kNotFound) return st;
  }
  spdlog::warn("job {} released by an operator{} (owner {})", job, force ? " (forced)" : "",
               r.owner ? r.owner->Describe() : "none");
  MutexLock lock(mu_);
  gone_.erase(job);
  forgotten_.erase(job);
  activity_.erase(job);
  return Status::OK();
}

}  // namespace reft::app
