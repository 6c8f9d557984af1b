#pragma once
/// \file job_coordinator.h
/// \brief The seam between what needs agreement (commit point, job generation, where slots
/// are, how a job restores) and the control plane that provides it. Two implementations:
/// - `coord::EtcdJobCoordinator` (daemon/coord): agreement in etcd — compare-and-swap for the
///   commit and the generation, linearizable reads for every restore. The production path for
///   more than one node (docs/coordination.md).
/// - `DistributedCommitCoordinator` (this component): completion sets exchanged between the
///   daemons themselves, for a few nodes without etcd. It has no consensus: the limits are
///   written in docs/coordination.md.
/// The recovery layer (restore, rebuild, persist) and reftd only use this interface.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/timeline.h"
#include "reft/local/commit_coordinator.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::peer {

/// \brief A job's generation and commit point.
///
/// Generation g+1 starts when memory cannot rebuild the newest committed step S and the job
/// restarts from a persisted step P <= S (the `base`): every node rolls back to P and drops
/// its slots newer than P; completions of older generations never count again.
struct JobGeneration {
  uint64_t generation = 0;              ///< 0: the job never fell back
  std::optional<int64_t> base_step;     ///< persisted step the generation restarted from
  int64_t persist_floor = -1;           ///< steps <= this are never persisted in the generation
  std::string reason;                   ///< why memory could not rebuild the step
  std::optional<int64_t> newest_committed;
  /// The timeline `newest_committed` was committed in (etcd: the generation, restore epoch and
  /// layout revision its commit compared; gossip: the generation only). Two views of "step S"
  /// are the same state exactly when these are equal: a layer staged for S is kept for it.
  coord::TimelineStamp committed_in;
};

/// \brief A fall-back to the persistent tier, as the restore that decided it saw the job.
struct GenerationStart {
  uint64_t from = 0;                     ///< the generation it ends
  std::optional<int64_t> seen_committed; ///< the newest committed step it was decided on
  int64_t base_step = -1;                ///< the persisted step the new generation restarts from
  int64_t persist_floor = -1;            ///< steps <= this are never persisted in the new one
  std::string reason;                    ///< why memory could not rebuild the step
};

/// \brief How the ranks of a job restore, decided once per (generation, committed step) and
/// followed by every rank, so that no two ranks restore different steps or sources.
struct RestoreDecision {
  uint64_t generation = 0;
  int64_t step = -1;       ///< -1: nothing to restore (a fresh start for every rank)
  std::string source;      ///< "memory" | "tier" | "none"
  std::string decided_by;  ///< node id
  std::string detail;      ///< why (e.g. the restore check's summary)
  int64_t version = 0;     ///< opaque compare-and-swap token of the stored decision (0: none)
};

/// \brief One node's ranks that sealed one step of a job, as reported to the job's coordinator.
struct StepCompletionReport {
  std::string job;
  int64_t step = -1;
  std::string node;         ///< the reporting node (the authenticated caller)
  uint64_t generation = 0;  ///< the job generation the ranks completed the step in
  int64_t epoch = 0;        ///< the restore epoch they completed it in
  std::vector<store::RankKey> ranks;
  /// The revision of the job's layout record the ranks joined under (etcd): a completion made
  /// in a layout the job has since left never counts toward the new one (0: no layout record).
  int64_t layout_revision = 0;
};

/// \brief The planner's decision for a job after a node loss, as published by the node that
/// plans for the job (docs/planner.md "The online path"). One per job; replaced only by a
/// compare-and-swap on `version`, and only in the generation it was decided in.
struct PublishedPlan {
  uint64_t generation = 0;  ///< the job generation it was decided in (older ones are void)
  int64_t step = -1;        ///< the committed step the job model was read from
  std::string basis;        ///< what it decides on: the lost nodes, sorted, comma-separated
  std::string planner;      ///< the node that decided
  /// "waiting_for_spare" (a spare may still come; `wait_until_ms`), "awaiting_confirmation"
  /// (operator-confirmed mode), "decided" (automatic mode), "confirmed", "undecided" (the
  /// planner cannot decide: no profile and no measured step time; the document says why), or
  /// "no_loss" (the lost nodes came back before the decision was acted on: withdrawn).
  std::string state;
  int64_t decided_at_ms = 0;  ///< unix time of the publication
  int64_t wait_until_ms = 0;  ///< waiting_for_spare: when the planner stops waiting
  std::string plan_json;      ///< the planner's document (planner::online::Decide)
  /// Execution of a reconfiguration's transfer plan (docs/planner.md "Executing the transfer
  /// plan"): a JSON object, or empty before it starts.
  std::string transfer_json;
  int64_t version = 0;        ///< opaque compare-and-swap token (0: none)
};

/// \brief Who publishes a job's plan: its coordinator (the planner; fenced by its term) or an
/// operator approving the published decision through any node (`reftctl plan confirm`;
/// fenced by the version the operator was shown).
enum class PlanPublisher { kCoordinator, kOperator };

/// \brief What the control plane knows about one node's liveness.
enum class NodeLiveness {
  kAlive,    ///< registered and not declared dead: its answers must be waited for
  kDead,     ///< declared dead (lease expired, or SWIM's verdict): its memory is gone
  kUnknown,  ///< never heard of
};

class JobCoordinator : public local::CommitCoordinator {
 public:
  /// Starts background work (watches, exchanges). After the node directory started.
  virtual Status Start() = 0;
  virtual void Stop() = 0;

  /// \brief Brings this node's view of `job` up to date with the control plane (etcd: a
  /// linearizable read; gossip: an exchange with every live member), within `timeout`.
  /// Unavailable when the control plane could not be reached (the view is then what it was).
  virtual Status SyncNow(const std::string& job, std::chrono::milliseconds timeout) = 0;

  /// \brief The job's layout as recorded; std::nullopt if unknown.
  virtual std::optional<JobLayout> Layout(const std::string& job) = 0;
  /// \brief Every job this node takes part in (joined ranks, slots, or learned), sorted.
  virtual std::vector<std::string> Jobs() = 0;
  /// \brief The job's generation and newest committed step as last synchronised.
  virtual JobGeneration Generation(const std::string& job) = 0;

  /// \brief Starts generation `start.from`+1 of `job` restarting from persisted step
  /// `start.base_step`, if the job is still at generation `start.from` with the newest committed
  /// step `start.seen_committed` (compare-and-swap: concurrent restores of the same failure start
  /// it once, and a step committed since the fall-back was decided voids it), and records the
  /// restore decision {from+1, base_step, "tier"} with it. Returns the job's generation
  /// afterwards (the new one, or the one in force: the caller then decides again).
  virtual JobGeneration StartGeneration(const std::string& job, const GenerationStart& start) = 0;

  /// Called after this node moved a job to another generation: the new generation and the
  /// number of local slots dropped.
  using GenerationListener =
      std::function<void(const std::string& job, const JobGeneration& generation, int dropped)>;
  virtual void AddGenerationListener(GenerationListener listener) = 0;
  /// Called (on a control-plane thread; must not block) when this node starts to lead a job
  /// (LeadsJob). Control planes whose leadership is a pure function of the membership (gossip)
  /// never call it.
  using LeadershipListener = std::function<void(const std::string& job)>;
  virtual void AddLeadershipListener(LeadershipListener listener) { (void)listener; }

  /// \brief Directory for the per-job generation records next to the slots (reftd:
  /// <shm_dir>/commit-state), so a restarted daemon knows the generation of its adopted slots.
  virtual void SetStateDir(std::string dir) = 0;

  /// \brief Ranks whose trainer is connected to this node now, of `job` or of every job.
  virtual std::vector<store::RankKey> JoinedRanks(
      const std::optional<std::string>& job = std::nullopt) = 0;
  virtual bool IsJoined(const store::RankKey& rank) = 0;

  // ---- where the job's state lives ----

  /// \brief The nodes (other than this one) that may hold slots of `job` or host its trainers:
  /// the ones a restore, a rebuild, a persist or a peer copy asks. etcd: the nodes recorded in
  /// the job's slot locations and joined ranks; gossip: every live member.
  virtual Result<std::vector<std::string>> JobNodes(const std::string& job) = 0;
  /// \brief The node that held `rank`'s slot when the newest step was committed (etcd), if
  /// recorded. Gossip: std::nullopt (ask every member).
  virtual std::optional<std::string> SlotLocation(const store::RankKey& rank) = 0;
  /// \brief The node whose trainer of `rank` is connected now, if known.
  virtual std::optional<std::string> JoinedNode(const store::RankKey& rank) = 0;
  /// \brief Records that this node now holds `rank`'s slot of committed step `step` (a
  /// replacement node regenerated it), so later restores find it here. Gossip: nothing to do.
  virtual Status RecordSlot(const store::RankKey& rank, int64_t step) = 0;
  /// \brief Whether this node acts for the whole job where one node must (the every-K-steps
  /// persist schedule, the planner): etcd: it holds the job's coordinator key; gossip: it has
  /// the smallest node id among the live members.
  virtual bool LeadsJob(const std::string& job) = 0;

  // ---- restore agreement ----

  /// \brief The recorded restore decision of `job` (linearizable with etcd), if any.
  virtual Result<std::optional<RestoreDecision>> Decision(const std::string& job) = 0;
  /// \brief Records `decision` unless another one was recorded since `expected_version`
  /// (0: none). Returns the decision in force afterwards: `decision` if it won, else the one
  /// recorded first. Unavailable when the control plane cannot be reached.
  virtual Result<RestoreDecision> ProposeDecision(const std::string& job,
                                                  const RestoreDecision& decision,
                                                  int64_t expected_version) = 0;
  /// \brief True when agreement is real (a consensus store); false for the gossip fallback,
  /// whose decisions are this node's alone (reported in every restore's detail).
  virtual bool HasConsensus() const = 0;

  // ---- commit ----

  /// \brief Takes another node's completion report, when this node coordinates the job's
  /// commits (Peer.ReportStepCompletion). Protocol ("does not coordinate") otherwise: the
  /// sender records it in the control plane instead. Control planes without a coordinator
  /// answer Unsupported.
  virtual Status ReceiveCompletion(const StepCompletionReport& report) {
    return Status::Unsupported("node does not take completion reports for job '" + report.job +
                               "'");
  }

  // ---- the planner's published decision ----

  /// \brief The published plan of `job`, if any (linearizable with etcd). Unsupported by a
  /// control plane without consensus: there each node plans from its own view and publishes
  /// nothing (two nodes could publish different plans).
  virtual Result<std::optional<PublishedPlan>> PublishedPlanOf(const std::string& job) {
    return Status::Unsupported("the control plane of job '" + job + "' publishes no plans");
  }
  /// \brief Publishes `plan` unless another one was published since `expected_version` (0:
  /// none) or the job left `plan.generation`; as PlanPublisher::kCoordinator, also unless this
  /// node's term as the job's coordinator ended (a deposed planner publishes nothing). Returns
  /// the plan in force afterwards: `plan` if it won, else the one published first. Busy when the
  /// generation or the coordinator moved (the plan is void).
  virtual Result<PublishedPlan> PublishPlan(const std::string& job, const PublishedPlan& plan,
                                            int64_t expected_version, PlanPublisher publisher) {
    (void)plan;
    (void)expected_version;
    (void)publisher;
    return Status::Unsupported("the control plane of job '" + job + "' publishes no plans");
  }
};

}  // namespace reft::peer
