#pragma once
/// \file reft_load.h
/// \brief REFT-load (docs/recovery.md, docs/data-paths.md "Restore" and "Rebuild"): the cluster side of
/// restore. Implements local::RestoreProvider for the local channel, and offers the rebuild of
/// lost ranks and the restore check to the Admin service.
///
/// Step choice (deviation from the paper's coordinator, step 2 of its REFT-load): the paper's
/// coordinator picks "the newest version every shard of every SG can be rebuilt at". Here the
/// step is the newest step *committed* job-wide by the distributed commit (after SyncNow with
/// every live member), never an older one: once step S committed, every node frees the slots
/// older than S, so no older in-memory step is complete anywhere, and restoring different steps
/// on different ranks would mix versions. If S cannot be rebuilt in memory, the fallback is the
/// persistent tier (SetPersistentTier), decided job-wide: if ANY sharding group cannot rebuild
/// S, every rank restores the newest complete persisted step P <= S, and the job's commit state
/// moves to a new generation rolled back to P on every node (docs/recovery.md "Fallback to
/// the persistent tier"); never silently an older in-memory step. There is no coordinator
/// process either: each restoring daemon locates the slots itself (manifests of all live
/// members) and pulls what its rank needs, which is REFT-load's all-gather done per rank.
///
/// Thread-safe: concurrent restores of different ranks run independently (each has its own
/// fetcher with RecoveryOptions::concurrency workers).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reft/local/recovery_hooks.h"
#include "reft/protect/sharding.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "reft/recovery/recovery_agreement.h"
#include "reft/recovery/recovery_options.h"
#include "reft/recovery/region_reader.h"
#include "reft/recovery/reshape.h"
#include "reft/recovery/restore_check.h"
#include "reft/recovery/restore_decider.h"
#include "reft/recovery/restore_stats.h"
#include "reft/recovery/staged_layers.h"
#include "reft/recovery/tier_access.h"

namespace reft::local {
class JobOwnership;
}  // namespace reft::local

namespace reft::recovery {

/// \brief Outcome of RebuildLostRanks for one rank.
struct RankRebuild {
  store::RankKey rank;
  Status status;       ///< OK: its slot was regenerated and committed on this node
  std::string detail;  ///< where its state came from
};

/// \brief Outcome of StageLayers: per layer, the bytes staged and whether they already were.
struct StageReport {
  struct Layer {
    int layer = -1;
    uint64_t bytes = 0;    ///< the layer's staged bytes (replicated and sharded buffers, whole)
    bool already = false;  ///< staged before (a retried or resumed move): nothing fetched
  };
  std::string job;
  int64_t step = -1;
  std::vector<Layer> layers;
  RestoreStats stats;  ///< what was read, from where (bytes_local, bytes_peer, ...)
};

struct RebuildReport {
  std::string job;
  int64_t step = -1;               ///< the newest committed step; -1 = nothing committed
  std::vector<RankRebuild> ranks;  ///< every rank no live node held at `step`
  RestoreStats stats;
};

class ReftLoad final : public local::RestoreProvider {
 public:
  /// Called after every Restore / RebuildLostRanks with the operation ("restore" or "rebuild"),
  /// its status and its stats (metrics, logs). Runs on the calling thread.
  using Observer =
      std::function<void(const std::string& operation, const Status&, const RestoreStats&)>;

  /// `peer` is the transport (membership, the Peer client); agreement on the job comes from
  /// `agreement` alone. `store`, `peer` and the roles must outlive this object.
  ReftLoad(store::SnapshotStore* store, peer::PeerNode* peer, RecoveryAgreement agreement,
           RecoveryOptions options = {});

  /// \brief RestoreProvider: see Restore(meta, stats, progress, request).
  Result<local::RestoredState> Restore(const protect::SlotMeta& meta,
                                       const local::RestoreRequest& request) override;
  Result<local::RestoredState> Restore(const protect::SlotMeta& meta) {
    return Restore(meta, local::RestoreRequest{});
  }

  /// \brief The newest step committed job-wide, assembled for the rank `meta` describes: its
  /// sharding group's replicated buffers (own shards from the members' slots, lost ones rebuilt
  /// from ARC copies, AEC or RS) and its unique buffers (own slot, else rank dp−1's peer/AOR
  /// copy), verified, in a memfd: replicated buffers back to back in name order from offset 0
  /// (the SG's canonical vector), then each unique buffer at a 4 KiB boundary.
  /// When this node holds no slot of the rank at that step (a replacement node) and
  /// rebuild_on_restore is set, the slot is regenerated and committed here (a failure to do so
  /// is a warning in `stats`, the restore still succeeds).
  /// With a persistent tier set, the choice between memory and the tier is made job-wide first
  /// (see the file comment); a fallback answers source "tier" and a detail naming why
  /// memory failed.
  /// When the step was saved under another layout than `meta` declares: with
  /// `request.reshape` the rank's buffers are assembled by global name (reshape_restore.h);
  /// without it InvalidArgument naming both layouts and the way out (reshape).
  /// \return step -1 when nothing is committed (and nothing is persisted); InvalidArgument
  /// naming the differences when the trainer declares other buffers/layout/protection than the
  /// snapshot; Lost naming exactly what cannot be rebuilt (and why the tier cannot help);
  /// Timeout past restore_timeout. Never reads a step other than the newest committed one, or
  /// the persisted step the job fell back to.
  Result<local::RestoredState> Restore(const protect::SlotMeta& meta, RestoreStats* stats,
                                       const ProgressCallback& progress = nullptr,
                                       const local::RestoreRequest& request = {});

  /// \brief Regenerates onto this node the slot of every rank of `job` that no live node holds
  /// at the newest committed step (world from the snapshots' layout). Per-rank outcomes in the
  /// report (Lost for ranks that cannot be rebuilt). NotFound when nothing is committed or no
  /// slot of the step is left anywhere. Backs `reftctl rebuild`.
  Result<RebuildReport> RebuildLostRanks(const std::string& job,
                                         const ProgressCallback& progress = nullptr);

  /// \brief Whether the newest committed step of `job` can be rebuilt, and from what (no bytes
  /// are moved). step -1 when nothing is committed. `progress` (optional) gets one call per
  /// sharding group checked (phase kLocate; bytes_done/bytes_total count groups). A check whose
  /// step was superseded while it read (its slots freed by a newer commit) is made again of the
  /// newer step, up to three times.
  Result<RestoreCheck> CheckRestore(const std::string& job,
                                    const ProgressCallback& progress = nullptr);

  /// \brief What the newest committed step of `job` holds (its layout, every buffer with its
  /// layer: the snapshot metas of every saved sharding group) and where the job's slots are,
  /// for the planner's job model. Moves no payload. NotFound when nothing is committed; Lost
  /// when some group's metas are all gone.
  struct StepDescription {
    StepCatalog catalog;
    ClusterView view;
  };
  Result<StepDescription> DescribeNewest(const std::string& job);

  /// \brief Stages `layers` of step `step` of `job` on this node (a move of the planner's
  /// transfer plan; staged_layers.h): each layer's replicated and sharded buffers assembled
  /// whole from wherever the step holds them (its holders' slots, redundancy decoded), verified,
  /// and kept for a reshaped restore here. Idempotent: a layer already staged is not fetched
  /// again. Busy when `step` is not the job's newest committed step any more (the
  /// plan is stale); InvalidArgument naming a layer the step has no buffer of; Lost / Timeout
  /// like a restore. Requires SetStagedLayers.
  Result<StageReport> StageLayers(const std::string& job, int64_t step,
                                  const std::vector<int>& layers);

  /// \brief Where staged layers are kept and reshaped restores look first (must outlive this
  /// object; call before use). Without it StageLayers is Unsupported.
  void SetStagedLayers(StagedLayers* staged) { staged_ = staged; }

  /// Sets the observer (call before use; not synchronised with running operations).
  void SetObserver(Observer observer) { observer_ = std::move(observer); }

  /// \brief Enables the fallback to the persistent tier (must outlive this object; call before
  /// use). Without it a step memory cannot rebuild is Lost.
  void SetPersistentTier(TierAccess* tier) { tier_ = tier; }

  /// \brief The registry of job owners (must outlive this object; call before use). A step of
  /// the persistent tier is then restored only when its manifests record the job's current
  /// owner, or none (CheckPersistedOwner); otherwise PermissionDenied, and no fallback
  /// generation is started for it. Without it (null) the owner is unknown: nothing is checked.
  void SetJobOwnership(local::JobOwnership* owners) { owners_ = owners; }

  /// \brief Named test points (reft/test_point.h), reached for the job by this ReftLoad.
  /// kLayersFetched: StageLayers fetched and verified every layer's bytes and is about to keep
  /// them (StagedLayers::Put); a fall-back right there must leave nothing kept or served.
  static constexpr const char* kLayersFetched = "staging-layers-fetched";
  /// kTierScanned: a restore scanned the tier, decided to fall back to a persisted step and is
  /// about to start the new generation (StartGeneration); a commit right there voids it.
  static constexpr const char* kTierScanned = "fall-back-tier-scanned";
  /// kCheckStepChosen: a restore check chose the committed step it checks and is about to
  /// locate its slots; a newer commit right there frees them.
  static constexpr const char* kCheckStepChosen = "restore-check-step-chosen";

 private:
  /// What a restore already knows when it reaches RestoreImpl: the step the job decided on
  /// (no second sync to choose it) and, when the decision was checked on this node, the view
  /// the check located and the snapshot metas it read per sharding group (no second manifest
  /// exchange with every node, no second read of a peer's meta region).
  struct Known {
    int64_t step = -1;
    std::optional<ClusterView> view;  ///< `metas` point into its slots
    std::map<std::pair<int32_t, int32_t>, LocatedMeta> metas;  ///< by (pp, tp)
  };
  // The job-wide decision (restore_decider.h; the types are in src/restore_call.h):
  // snapshot → decide → propose → follow.
  struct RestoreCall;  ///< one restore's arguments and what it learnt so far
  struct LocatedStep;  ///< a decided step, the one way into the restore units
  struct Followed;     ///< what following a step came to
  struct Attempt;      ///< what one attempt came to
  /// The driver: attempts until a state, a job-wide error, or too many moves of the job.
  Result<local::RestoredState> RestoreConsistent(const protect::SlotMeta& meta, RestoreStats* stats,
                                                 const ProgressCallback& progress,
                                                 const local::RestoreRequest& request);
  /// One attempt over one snapshot: decide, gather what the rule asks for, propose, follow.
  Result<Attempt> RunAttempt(RestoreCall& call, AgreementSnapshot snapshot);
  /// The snapshot: sync, then the generation, commit point and recorded decision, read once.
  Result<AgreementSnapshot> ReadAgreement(RestoreCall& call);
  /// What memory can rebuild of the snapshot's committed step (the job-wide check).
  Result<MemoryVerdict> CheckMemory(RestoreCall& call, const AgreementSnapshot& snapshot);
  /// What the tier offers a fall-back from the snapshot's committed step.
  TierVerdict ScanTier(RestoreCall& call, const AgreementSnapshot& snapshot);
  /// Records `decision` (compare-and-swap); nullopt when the job moved or another rank won.
  Result<std::optional<LocatedStep>> Propose(RestoreCall& call, const coord::RestoreDecision& decision,
                                             int64_t expected_version);
  /// Starts generation g+1 from the persisted step; nullopt when another restore started it.
  std::optional<LocatedStep> StartFallBack(RestoreCall& call, const coord::GenerationStart& start);
  /// Memory holds nothing and the tier cannot be read: no restore (a warning says why).
  local::RestoredState StartFresh(RestoreCall& call, const RestoreVerdict& verdict);
  /// The restore units, one per source.
  Result<Followed> Follow(RestoreCall& call, LocatedStep step);
  Result<Followed> FollowMemory(RestoreCall& call, LocatedStep step);
  Result<Followed> FollowTier(RestoreCall& call, LocatedStep step);
  /// `step` from the tier (plain, reshaped or probed); nullopt when the generation left
  /// `generation` meanwhile.
  Result<std::optional<local::RestoredState>> ReadTierStep(RestoreCall& call, int64_t step,
                                                           uint64_t generation,
                                                           const std::string& detail);
  /// Whether persisted `step` of `job` may go to the job's current owner.
  Status OwnerAllows(persist::PersistentTier* tier, const std::string& job, int64_t step);
  /// Sync + newest committed step + located slots.
  Result<int64_t> ChooseStep(const std::string& job, RestoreStats* stats);
  /// The job's slots, after waiting (agreement_timeout at most) for holders alive but silent.
  Result<ClusterView> Locate(const std::string& job, std::chrono::steady_clock::time_point deadline,
                             RestoreStats* stats, const ProgressCallback& progress);
  static Status LostOrUndecided(const Status& lost, const ClusterView& view);
  /// The check of step `committed`, which the caller chose right after a sync, handing out
  /// what it located and read (`located`: step, view and metas, when the check got that far).
  Result<RestoreCheck> CheckRestoreOn(const std::string& job, const ProgressCallback& progress,
                                      int64_t committed, Known* located);
  /// One sharding group of the check (CheckRestoreOn).
  GroupCheck CheckGroup(const std::string& job, int64_t step, int pp, int tp,
                        const ClusterView& view, const LocatedMeta& any,
                        std::chrono::steady_clock::time_point deadline, RestoreCheck* out,
                        std::map<std::pair<int32_t, int32_t>, LocatedMeta>* metas);
  /// The rank's state at the decided step `known.step`, from memory (located afresh unless
  /// `known` carries the view this node's check located).
  Result<local::RestoredState> RestoreImpl(const protect::SlotMeta& meta, RestoreStats* stats,
                                           const ProgressCallback& progress,
                                           const local::RestoreRequest& request, Known known);
  /// RestoreImpl's assembly of the rank's state from `view` once its group's meta `snap` was
  /// read and matches the trainer's declaration: streamed, or into a memfd.
  Result<local::RestoredState> AssembleRank(const protect::SlotMeta& meta,
                                            const LocatedMeta& snap, int64_t step,
                                            const ClusterView& view,
                                            const local::RestoreRequest& request,
                                            RestoreStats* stats, const ProgressCallback& progress,
                                            std::chrono::steady_clock::time_point deadline);
  /// The state of `snapshot`'s rank at `step` through `sink` (RestoreRequest::sink) while
  /// fetching, the replacement's slot captured on the way. nullopt: this restore cannot be
  /// streamed (a shard has no copy to read; a slot with parity to regenerate) or a source
  /// failed part-way: the stream is ended incomplete and the caller assembles a memfd. An
  /// error only when the trainer stopped taking the stream.
  Result<std::optional<local::RestoredState>> StreamImpl(
      const protect::SlotMeta& snapshot, const protect::SgGeometry& g,
      const std::map<std::string, uint64_t>& offsets, uint64_t size, int64_t step,
      const ClusterView& view, bool rebuild, uint64_t meta_region_size, Fetcher* fetcher,
      local::RestoreSink* sink, RestoreStats* stats, std::chrono::steady_clock::time_point deadline);
  /// The rank's state by global names from `step`, saved under another layout (reshape.h).
  Result<local::RestoredState> ReshapeImpl(const protect::SlotMeta& meta, int64_t step,
                                           const ClusterView& view,
                                           const local::RestoreRequest& request,
                                           RestoreStats* stats,
                                           const ProgressCallback& progress,
                                           std::chrono::steady_clock::time_point deadline);
  Result<RebuildReport> RebuildImpl(const std::string& job, const ProgressCallback& progress);

  store::SnapshotStore* store_;
  peer::PeerNode* peer_;
  RecoveryAgreement agreement_;
  RecoveryOptions options_;
  Locator locator_;
  RegionReader reader_;
  Observer observer_;
  TierAccess* tier_ = nullptr;
  StagedLayers* staged_ = nullptr;
  local::JobOwnership* owners_ = nullptr;
};

}  // namespace reft::recovery
