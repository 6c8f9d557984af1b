#pragma once
/// \file distributed_commit.h
/// \brief Global commit across reftd nodes (DESIGN.md §3 "Commit", seeds-spec §1.10 two-phase
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
/// Thread-safe; owns one exchange thread (Start/Stop).

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "reft/local/commit_coordinator.h"
#include "reft/peer/membership.h"
#include "reft/peer/peer_client.h"
#include "reft/store/snapshot_store.h"
#include "reft/v1/peer.pb.h"

namespace reft::peer {

class DistributedCommitCoordinator : public local::CommitCoordinator {
 public:
  DistributedCommitCoordinator(store::SnapshotStore* store, Membership* membership,
                               PeerClient* client, std::chrono::milliseconds exchange_interval);
  ~DistributedCommitCoordinator() override;
  void Start();
  void Stop();

  Status Join(const store::RankKey& rank, const local::JobLayout& layout) override;
  void Leave(const store::RankKey& rank) override;
  Status Complete(const store::RankKey& rank, int64_t step) override;
  std::optional<int64_t> NewestCommitted(const std::string& job) override;
  bool WaitCommitted(const std::string& job, int64_t step,
                     std::chrono::milliseconds timeout) override;

  /// \brief Exchanges `job`'s commit state with every live member now, in parallel, each call
  /// bounded by `timeout`, and merges the answers: afterwards NewestCommitted(job) covers every
  /// commit a reachable member knows. A restore calls it before choosing its step, so a node
  /// that missed a commit message (or just replaced a dead one) never restores an older step
  /// than the job committed. OK when every live member answered; otherwise Unavailable naming
  /// the members that did not (what the others said is merged all the same).
  Status SyncNow(const std::string& job, std::chrono::milliseconds timeout);

  /// \brief Ranks whose trainer is connected to this node now (Join without a matching Leave),
  /// of `job` or of every job; sorted. Served in GetManifest's `joined`.
  std::vector<store::RankKey> JoinedRanks(const std::optional<std::string>& job = std::nullopt);
  /// \brief True when `rank`'s trainer is connected to this node.
  bool IsJoined(const store::RankKey& rank);

  // --- server side (PeerService) ---
  /// Merges a peer's view of a job and returns the merged view. InvalidArgument on a layout
  /// that differs from the known one.
  Result<v1::JobCommitState> MergeRemote(const v1::JobCommitState& state);
  std::vector<v1::JobCommitState> AllStates();

 private:
  struct JobState {
    bool recovered = false;
    bool has_layout = false;
    local::JobLayout layout;
    int connected = 0;
    std::optional<int64_t> newest_committed;
    std::map<int64_t, std::set<store::RankKey>> completed;
  };
  JobState& StateLocked(const std::string& job);
  void TryCommitLocked(const std::string& job, JobState& st, std::optional<int64_t> known);
  v1::JobCommitState ExportLocked(const std::string& job, const JobState& st) const;
  void Run();
  void PushAll(const std::vector<v1::JobCommitState>& jobs);

  store::SnapshotStore* store_;
  Membership* membership_;
  PeerClient* client_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, JobState> jobs_;
  std::map<store::RankKey, int> joined_;  // rank -> connected sessions (Join - Leave)
  std::set<std::string> dirty_;
  bool running_ = false;
  std::thread thread_;
};

}  // namespace reft::peer
