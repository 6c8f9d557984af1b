#pragma once
/// \file local_job_records.h
/// \brief peer::JobRecords without etcd (one node, or the gossip control plane): the node's own
/// records of its jobs, which `reftctl jobs list|release` show and release, and the sweeper that
/// forgets the owners of jobs gone for `jobs.forget_after_s` so that the owner journal
/// (`<shm_dir>/job-owners`) stays bounded (docs/operations.md "Job records").
///
/// A job has records here when this node has an owner recorded for it (local::JobOwners), a
/// trainer of it joined (a local session), or a slot of it that is not free. Its state, as
/// coord::EtcdJobRecords names it: "running" (a trainer joined), "idle" (snapshots on this
/// node), "persisted" (only the persistent tier holds a step of it: a step directory, complete
/// or not), "gone" (none of these). A job gone for `forget_after` — counted from the first sweep
/// that saw it gone — has its owner forgotten; the next trainer to open it claims it anew.
/// While the tier cannot be read, nothing is forgotten (a step there may be the job's).
///
/// The sweep re-checks a job just before forgetting it (owner unchanged, no session, no slot,
/// no step in the tier). A trainer admitted (its owner checked) just before and joined just
/// after gets its owner back, by the check right after the forget or at the next sweep; in
/// between (at most one sweep interval) a hello of another uid could claim the name first.
/// Thread-safe; owns one thread ("reft-sweeper") between Start and Stop.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reft/local/job_owners.h"
#include "reft/local/local_server.h"
#include "reft/mutex.h"
#include "reft/peer/job_records.h"
#include "reft/recovery/tier_access.h"
#include "reft/store/snapshot_store.h"

namespace reft::app {

struct LocalJobRecordsOptions {
  /// A job gone this long has its owner forgotten (reftd: `jobs.forget_after_s`).
  std::chrono::milliseconds forget_after{600000};
  /// This node's id: the `nodes` of its running and idle jobs.
  std::string node_id;
};

class LocalJobRecords final : public peer::JobRecords {
 public:
  /// The local channel's sessions (LocalServer::Sessions in reftd).
  using SessionSource = std::function<std::vector<local::SessionInfo>()>;

  /// `owners` and `store` are required; `tier` may be null (no persistent tier). All outlive
  /// this object.
  LocalJobRecords(local::JobOwners* owners, store::SnapshotStore* store, SessionSource sessions,
                  recovery::TierAccess* tier, LocalJobRecordsOptions options);
  ~LocalJobRecords() override;

  Status NotePersisted(const std::string& job, int64_t step) override;
  Result<std::vector<peer::JobRecord>> List() override;
  Status Release(const std::string& job, bool force) override;

  /// \brief One sweep now (tests; the thread runs it every forget_after / 4, between 100 ms and
  /// 30 s): the jobs whose owners it forgot.
  Result<std::vector<std::string>> SweepOnce() override;

 private:
  using Clock = std::chrono::steady_clock;
  /// What one read of the node's sources found.
  struct Snapshot {
    std::map<std::string, peer::JobRecord> jobs;
    std::vector<local::SessionInfo> sessions;
    /// The tier's steps could not be read: persisted steps are unknown (the error).
    std::optional<Status> tier_error;
  };
  /// A gone job's first sighting, and the owner it had then.
  struct Gone {
    Clock::time_point since;
    local::JobOwner owner;
  };
  /// An owner the sweep forgot, kept for forget_after in case a trainer that was admitted just
  /// before joins just after.
  struct Forgotten {
    Clock::time_point at;
    local::JobOwner owner;
  };

  Result<Snapshot> ReadAll();
  /// Newest step directory in the tier of each of `jobs` that has one (nothing without a tier).
  Result<std::map<std::string, int64_t>> PersistedSteps(const std::set<std::string>& jobs);
  /// The newest step directory of one job in the tier, if any.
  Result<std::optional<int64_t>> PersistedStep(const std::string& job);
  /// Whether `job` is still gone with `owner` as its owner: read afresh, but for the jobs with
  /// a trainer joined (`joined`, read once for the whole batch).
  bool StillGone(const std::string& job, const local::JobOwner& owner,
                 const std::set<std::string>& joined);
  /// Gives the owners back to jobs the sweep forgot whose trainers joined anyway; those jobs.
  std::set<std::string> RestoreRacedOwners(const std::vector<local::SessionInfo>& sessions);

  local::JobOwners* const owners_;
  store::SnapshotStore* const store_;
  const SessionSource sessions_;
  recovery::TierAccess* const tier_;
  const LocalJobRecordsOptions options_;

  Mutex mu_;
  std::map<std::string, Gone> gone_ REFT_GUARDED_BY(mu_);
  std::map<std::string, Forgotten> forgotten_ REFT_GUARDED_BY(mu_);
  /// Unix ms of the last activity this process saw of each listed job (a trainer joined, a new
  /// persisted step), with the persisted step it saw. (Commits are read from the slot files.)
  struct Activity {
    int64_t at_ms = 0;
    std::optional<int64_t> persisted;
  };
  std::map<std::string, Activity> activity_ REFT_GUARDED_BY(mu_);
  bool tier_unreadable_ REFT_GUARDED_BY(mu_) = false;  ///< logged once per failure spell
};

}  // namespace reft::app
