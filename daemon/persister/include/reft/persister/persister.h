#pragma once
/// \file persister.h
/// \brief Writes committed steps to the persistent tier (docs/data-paths.md "Persist"): every K-th
/// committed step in a background thread, and on demand (`reftctl persist`), for a whole job.
///
/// What a node writes: for each rank of the job it holds, the slot's own data — regions
/// "meta", "rep/shard" and "unique/*" — with the layout read from the slot's meta
/// (PersistentTier::PersistStep). The redundancy is not persisted; the persisted shards of an
/// SG together are its full replicated state.
///
/// A job-wide persist (PersistJob) runs on one node: it chooses the step (default: the newest
/// committed after a commit-state sync), persists its own ranks and asks the job's other nodes to
/// persist theirs (Peer.PersistStep, in parallel), then checks that the step is complete in the
/// tier (CheckStep). The every-K schedule uses the same path, run by one node per job (the one
/// that LeadsJob: the job's coordinator), so every node persists the *same* step: nodes that
/// decided on their own would pick different steps whenever one of them skipped a commit (a
/// node may learn commits s and s+1 in one exchange) and no step would ever be complete.
/// "Every K steps" = whenever the newest committed step is >= the last one attempted + K
/// (initially: the tier's newest complete step, or at once when there is none); after a failure
/// the next attempt is K steps later.
///
/// Skipped by rule (not an error): a step not newer than the tier's newest complete step (a
/// re-persist would replace rank files one by one, and a reader could see a step mixing files
/// of two different runs of that step), a step at or below the job generation's persist_floor
/// (docs/recovery.md: after a fallback, step directories up to the floor may hold files of
/// the abandoned timeline), and a node whose ranks of the step are already valid in the tier.
///
/// Persist and commit ordered (docs/persist.md "Persist and commit"): with a commit hold (etcd),
/// a job-wide persist of the newest step first holds the job's next commit at that step
/// (coord::CommitHold), so that the commit of S+1 cannot free S before every node pinned its
/// slots of S; each node reports its pin right after pinning. The hold is bounded
/// (`commit_hold`): once it runs out the commit goes on and the persist fails on the nodes
/// that had not pinned. Without one (gossip) a lost race is answered by persisting the next
/// step as it commits (PersistJob).
///
/// Failures (directory missing, full, unwritable; slot freed by a newer commit) are returned,
/// recorded in TierAccess (health, last error) and passed to the observer (logs, metrics);
/// they never touch the in-memory snapshots and never stop the daemon. Thread-safe; a node
/// writes one step at a time (persists share the tier's bandwidth anyway).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "reft/coord/commit_hold.h"
#include "reft/mutex.h"
#include "reft/persister/persister_agreement.h"
#include "reft/recovery/tier_access.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"
#include "reft/thread.h"
#include "reft/v1/peer.pb.h"

namespace reft::peer {
class PeerNode;
}  // namespace reft::peer
namespace reft::local {
class JobOwnership;
}  // namespace reft::local

namespace reft::persister {

struct PersisterOptions {
  std::string node_id;  ///< this node (reported per node)
  /// K of "every K committed steps" (persist.every_steps); 0 = on demand only.
  int64_t every_steps = 0;
  /// How often the schedule looks at the jobs' newest committed steps.
  std::chrono::milliseconds poll_interval{250};
  /// Deadline of one member's PersistStep (it writes size / bandwidth seconds).
  std::chrono::milliseconds peer_timeout{std::chrono::minutes(30)};
  /// Commit-state exchange before an on-demand persist chooses its step.
  std::chrono::milliseconds sync_timeout{2000};
  /// How long a persist of "the newest step" that lost the race with the training's commits
  /// waits for the next step to commit on every node (it is then persisted as it commits).
  std::chrono::milliseconds next_commit_wait{std::chrono::minutes(10)};
  /// How long a persist holds the job's next commit for every node to pin the step
  /// (persist.commit_hold_ms; with a commit hold only). 0: no hold.
  std::chrono::milliseconds commit_hold{5000};
};

/// \brief One node's part of persisting a step.
struct NodePersist {
  std::string node;
  std::string job;
  int64_t step = -1;
  Status status;  ///< OK, or why this node's part failed
  bool skipped = false;
  std::string skipped_reason;
  std::vector<store::RankKey> ranks;  ///< rank files written
  uint64_t bytes = 0;                 ///< rank files and manifest
  double seconds = 0;
  std::vector<int64_t> removed_steps;  ///< deleted by retention afterwards
  std::string retention_error;
};

/// \brief A job-wide persist of one step.
struct JobPersistReport {
  std::string job;
  int64_t step = -1;
  std::vector<NodePersist> nodes;     ///< this node first, then the members, by node id
  bool complete = false;              ///< the step is complete in the tier for the job's layout
  std::vector<std::string> problems;  ///< why not (CheckStep), or the check's own error
  std::optional<int64_t> newest_complete;  ///< the tier's newest complete step afterwards
  std::vector<std::string> warnings;       ///< e.g. a member the commit sync did not reach
  /// Every node OK (or skipped by rule) and the step complete in the tier.
  bool ok() const;
};

/// \brief Progress of a job-wide persist: `done` of `total` nodes finished.
using PersistProgress = std::function<void(int done, int total, const std::string& message)>;

class Persister {
 public:
  /// Called after every persist this node did of its own ranks (also skipped and failed ones):
  /// logs and metrics. Runs on the persisting thread.
  using Observer = std::function<void(const NodePersist&)>;

  /// `peer` is the transport (membership, the Peer client, the PersistStep handler); agreement
  /// on the job comes from `agreement` alone. `store`, `peer`, the roles and `tier` must
  /// outlive the persister.
  Persister(store::SnapshotStore* store, peer::PeerNode* peer, PersisterAgreement agreement,
            recovery::TierAccess* tier, PersisterOptions options);
  ~Persister();

  /// Serves Peer.PersistStep and, when every_steps > 0, starts the schedule thread.
  void Start();
  /// Stops the thread and withdraws the Peer handler (waits for a running pass).
  void Stop();

  /// \brief Persists this node's ranks of `job` at `step` (a committed step whose slots are
  /// still here). `force`: reopen a failed tier now instead of waiting for the retry interval.
  /// `wait_commit` > 0: `step` may commit later; waits up to that long first.
  NodePersist PersistLocal(const std::string& job, int64_t step, bool force = true,
                           std::chrono::milliseconds wait_commit = std::chrono::milliseconds(0));

  /// \brief Job-wide persist (see the file comment). `step` std::nullopt = the newest
  /// committed; when a newer commit frees it on some node while it is being persisted, the
  /// newer step is persisted instead (a warning in the report says so). NotFound when the job
  /// has nothing committed; InvalidArgument when `step` is newer than the newest committed
  /// step. Node failures are in the report, not the status.
  Result<JobPersistReport> PersistJob(const std::string& job, std::optional<int64_t> step,
                                      const PersistProgress& progress = nullptr);

  /// \brief One pass of the every-K schedule (the thread runs it every poll_interval): the
  /// job-wide persists it started. Does nothing for a job this node does not lead
  /// (PlanBoard::LeadsJob).
  std::vector<JobPersistReport> RunScheduleOnce();

  /// Sets the observer (call before Start).
  void SetObserver(Observer observer) { observer_ = std::move(observer); }

  /// \brief The registry of job owners (must outlive the persister; call before Start): every
  /// manifest this node writes records the job's current owner, which a tier restore checks
  /// (docs/security.md "Jobs belong to their owner"). A job without an owner is written
  /// without one; an owner that cannot be read fails this node's persist (an ownerless
  /// manifest would be restored to anyone). Null (the default): no owner is recorded.
  void SetJobOwnership(local::JobOwnership* owners) { owners_ = owners; }

  /// \brief The commit hold of the control plane (must outlive the persister; call before
  /// Start; null, the default: persists are not ordered with commits). See the file comment.
  void SetCommitHold(coord::CommitHold* hold) { hold_ = hold; }

  /// \brief Newest complete persisted step per job, as this node last saw it after a persist.
  std::map<std::string, int64_t> LastComplete() const;

 private:
  struct Schedule {
    bool initialised = false;
    uint64_t generation = 0;
    std::optional<int64_t> last;  ///< last step attempted (or found complete in the tier)
  };
  /// The checks that need no tier (committed, above the floor) and a SlotRef to every local
  /// slot of `step`; false with `n` filled in (error or skip) when there is nothing to do.
  /// `freed`: why a slot of the step is gone (a newer commit freed it); an error unless the
  /// tier already has a newer complete step.
  bool PinStep(const std::string& job, int64_t step, NodePersist* n,
               std::vector<std::shared_ptr<store::SlotRef>>* pins, std::string* freed);
  /// The rest of PersistLocal, under write_mu_: layout, tier checks and the rank files.
  void PersistPinned(const std::vector<std::shared_ptr<store::SlotRef>>& pins,
                     const std::string& freed, bool force, NodePersist* n)
      REFT_REQUIRES(write_mu_);
  /// One job-wide persist of `step`: this node's ranks and the other nodes' (in parallel), then
  /// the tier's completeness check. `wait_commit` as in PersistLocal, on every node.
  Result<JobPersistReport> PersistStepOnNodes(const std::string& job, int64_t step,
                                              const PersistProgress& progress,
                                              std::chrono::milliseconds wait_commit);
  /// This node runs the every-K schedule of `job` (the job's coordinator, so one node does).
  bool IsScheduleLeader(const std::string& job) const;
  /// Holds the job's next commit at its commit point (`step`: only if it is that one) for
  /// the job's live nodes; the held step, or std::nullopt (no hold, a warning says why when
  /// the hold failed).
  std::optional<int64_t> HoldCommit(const std::string& job, std::optional<int64_t> step,
                                    std::vector<std::string>* warnings);
  void Run();

  store::SnapshotStore* store_;
  peer::PeerNode* peer_;
  PersisterAgreement agreement_;
  recovery::TierAccess* tier_;
  PersisterOptions options_;
  Observer observer_;
  local::JobOwnership* owners_ = nullptr;
  coord::CommitHold* hold_ = nullptr;

  Mutex write_mu_;  // one local persist at a time
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool running_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread thread_;  // started by Start(), joined by Stop()
  std::map<std::string, Schedule> schedule_ REFT_GUARDED_BY(mu_);
  std::map<std::string, int64_t> last_complete_ REFT_GUARDED_BY(mu_);
};

/// \brief Why a persist failed, in the fixed set the metrics use (label `reason`).
enum class PersistFailureKind { kMissingDir, kNoSpace, kPermission, kIo, kOther };
/// \brief Classifies a failed NodePersist status: the tier's NotFound naming the persistent
/// directory = missing dir; IoError "no space left" / "quota" = no space; PermissionDenied;
/// other IoError; anything else (slot freed, not committed, ...) = other.
PersistFailureKind ClassifyPersistFailure(const Status& status);

/// \brief Whether persisting the newest step should move on to a newer commit: some node found
/// the step's slots freed (NotFound, not a missing directory) and no node failed otherwise. A
/// full tier, an I/O error or a missing directory fails a newer step the same way, so such a
/// failure is the answer, whatever else raced.
bool StepFreedUnderPersist(const std::vector<NodePersist>& nodes);

/// \brief NodePersist <-> Peer.PersistStepResponse.
v1::PersistStepResponse ToProto(const NodePersist& n);
NodePersist FromProto(const v1::PersistStepResponse& r);

}  // namespace reft::persister
