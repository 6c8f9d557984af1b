#pragma once
/// \file gossip_job_coordinator.h
/// \brief The gossip control plane's agreement: global commit across reftd nodes (docs/data-paths.md "Commit", docs/peer.md "Global commit": two-phase
/// commit): ranks report completion to their local daemon; daemons exchange per-job completion
/// sets (push on every completion, plus a periodic anti-entropy exchange with every live member
/// so a lost message never blocks a commit); a step is committed on a node once the union of
/// completions it knows covers every rank of the layout (dp*tp*pp). Each node then commits its
/// local ranks in the store (which frees older slots only after that) and wakes waiters.
///
/// Safety: completion facts are only ever produced by a rank sealing its slot, and merged as
/// unions, so no node commits a step some rank did not complete, whatever dies when. A peer's
/// "committed S" implies all ranks completed S, so it rolls S forward here too.
/// Recovery after a restart: the store's committed slots give the newest committed step (rolled
/// forward for lagging local ranks) and its complete slots re-enter the completion sets.
///
/// Generations (restore fallback to the persistent tier, docs/recovery.md): a job whose newest
/// committed step S cannot be rebuilt in memory restarts from a persisted step P <= S. The
/// restoring node starts generation g+1 with base P (StartGeneration); every node that learns a
/// higher generation replaces its state of the job by it: completions cleared, newest committed
/// = P, local slots newer than P dropped from the store. A state of a lower generation is
/// ignored, so no node re-learns "committed S" from a peer that has not rolled back yet. The
/// generation is kept in a file per job under SetStateDir() (next to the slots), so a restarted
/// daemon knows which generation its adopted slots belong to.
/// Thread-safe; owns one exchange thread (Start/Stop).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reft/local/commit_coordinator.h"
#include "reft/mutex.h"
#include "reft/coord/job_book.h"
#include "reft/coord/job_coordinator.h"
#include "swim_membership.h"
#include "reft/peer/gossip_endpoints.h"
#include "reft/peer/peer_client.h"
#include "reft/store/snapshot_store.h"
#include "reft/thread.h"
#include "reft/v1/peer.pb.h"

namespace reft::coord {

/// A development fallback for a few nodes (docs/coordination.md says which guarantees it lacks).
class GossipJobCoordinator final : public JobCoordinator, public peer::CommitExchangeEndpoint {
 public:
  GossipJobCoordinator(store::SnapshotStore* store, SwimMembership* membership,
                       peer::PeerClient* client, std::chrono::milliseconds exchange_interval);
  ~GossipJobCoordinator() override;
  Status Start() override;
  void Stop() override;

  using local::CommitCoordinator::Join;
  /// The owner was checked by the node's own JobOwners: gossip records no owner.
  Status Join(const store::RankKey& rank, const JobLayout& layout,
              const local::Joiner& who) override;
  void Leave(const store::RankKey& rank) override;
  /// Gossip: epochs are this node's own decisions' versions (docs/recovery.md "Restore
  /// epochs"): a trainer of this node restored under an older local decision is refused.
  Status Complete(const store::RankKey& rank, int64_t step, int64_t epoch) override;
  int64_t RestoreEpoch(const std::string& job) override;
  std::optional<int64_t> NewestCommitted(const std::string& job) override;
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override;

  /// \brief Exchanges `job`'s commit state with every live member now, in parallel, each call
  /// bounded by `timeout`, and merges the answers: afterwards NewestCommitted(job) covers every
  /// commit a reachable member knows. A restore calls it before choosing its step, so a node
  /// that missed a commit message (or just replaced a dead one) never restores an older step
  /// than the job committed. OK when every live member answered; otherwise Unavailable naming
  /// the members that did not (what the others said is merged all the same).
  Status SyncNow(const std::string& job, std::chrono::milliseconds timeout) override;

  /// \brief The job's layout as joined locally or learned from a peer; std::nullopt if unknown.
  std::optional<JobLayout> Layout(const std::string& job) override;
  /// \brief Every job this node has a commit state for (its own or learned from peers), sorted.
  std::vector<std::string> Jobs() override;

  /// \brief The job's generation and newest committed step as this node knows them.
  JobGeneration Generation(const std::string& job) override;

  /// \brief Starts generation `from`+1 of `job` restarting from persisted step `base_step`, if
  /// the job is still at generation `from` here (compare and set: concurrent restores of the
  /// same failure start it once). Rolls this node back (completions cleared, newest committed =
  /// base_step, local slots newer than base_step dropped), records it under the state dir and
  /// pushes it to the members. Returns the job's generation afterwards (the new one, or the
  /// one another restore or peer started first).
  JobGeneration StartGeneration(const std::string& job, const GenerationStart& start) override;

  /// Listeners run without the coordinator's lock held.
  void AddGenerationListener(GenerationListener listener) override;

  /// \brief Directory for the per-job generation records (reftd: <shm_dir>/commit-state).
  /// Call before any job is used; empty (default) = kept in memory only.
  void SetStateDir(std::string dir) override;

  /// \brief Ranks whose trainer is connected to this node now (Join without a matching Leave),
  /// of `job` or of every job; sorted. Served in GetManifest's `joined`.
  std::vector<store::RankKey> JoinedRanks(
      const std::optional<std::string>& job = std::nullopt) override;
  /// \brief True when `rank`'s trainer is connected to this node.
  bool IsJoined(const store::RankKey& rank) override;

  /// Every live member (gossip keeps no record of where slots are).
  Result<std::vector<std::string>> JobNodes(const std::string& job) override;
  std::optional<std::string> SlotLocation(const store::RankKey&) override { return std::nullopt; }
  std::optional<std::string> JoinedNode(const store::RankKey&) override { return std::nullopt; }
  Status RecordSlot(const store::RankKey&, int64_t) override { return Status::OK(); }
  /// The live member with the smallest node id (this node included).
  bool LeadsJob(const std::string& job) override;
  /// Decisions are this node's own (no consensus): kept in memory per job.
  Result<std::optional<RestoreDecision>> Decision(const std::string& job) override;
  Result<RestoreDecision> ProposeDecision(const std::string& job, const RestoreDecision& decision,
                                          int64_t expected_version) override;
  bool HasConsensus() const override { return false; }

  // --- server side (PeerService) ---
  /// Merges a peer's view of a job and returns the merged view. InvalidArgument on a layout
  /// that differs from the known one.
  Result<v1::JobCommitState> MergeRemote(const v1::JobCommitState& state) override;
  std::vector<v1::JobCommitState> AllStates() override;

 private:
  struct JobState {
    bool recovered = false;
    bool has_layout = false;
    JobLayout layout;
    int connected = 0;
    std::optional<int64_t> newest_committed;
    // Completions not committed yet: one set per step whoever made them (kMergedSource), all
    // of the current generation (a new one clears them).
    PendingCompletions completed;
    uint64_t generation = 0;
    std::optional<int64_t> base_step;
    int64_t persist_floor = -1;
    std::string reason;
  };
  /// The timeline completions count in: gossip knows generations, no epochs or layout records.
  static TimelineStamp CountingTimeline(const JobState& st) {
    return TimelineStamp{st.generation, 0, 0, 0};
  }
  JobState& StateLocked(const std::string& job) REFT_REQUIRES(mu_);
  /// Has a state, slots here, or a generation record.
  bool KnownLocked(const std::string& job) REFT_REQUIRES(mu_);
  /// Replaces the job's state by generation `gen` (rollback to `base`, slots > base dropped).
  void AdoptGenerationLocked(const std::string& job, JobState& st, uint64_t gen, int64_t base,
                             int64_t floor, const std::string& reason) REFT_REQUIRES(mu_);
  JobGeneration InfoLocked(const JobState& st) const REFT_REQUIRES(mu_);
  void NotifyGenerations();
  void TryCommitLocked(const std::string& job, JobState& st, std::optional<int64_t> known)
      REFT_REQUIRES(mu_);
  v1::JobCommitState ExportLocked(const std::string& job, const JobState& st) const
      REFT_REQUIRES(mu_);
  void Run();
  void PushAll(const std::vector<v1::JobCommitState>& jobs);

  store::SnapshotStore* store_;
  SwimMembership* membership_;
  peer::PeerClient* client_;
  std::chrono::milliseconds interval_;
  reft::Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, JobState> jobs_ REFT_GUARDED_BY(mu_);
  JoinedSessions joined_ REFT_GUARDED_BY(mu_);
  std::set<std::string> dirty_ REFT_GUARDED_BY(mu_);
  std::string state_dir_ REFT_GUARDED_BY(mu_);
  GenerationEvents generation_events_;  // delivered by NotifyGenerations()
  std::map<std::string, RestoreDecision> decisions_ REFT_GUARDED_BY(mu_);  // this node's own
  bool running_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread thread_;
};

}  // namespace reft::coord
