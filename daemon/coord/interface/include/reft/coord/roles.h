#pragma once
/// \file roles.h
/// \brief The roles of a job's agreement, each the few calls one kind of consumer needs.
///
/// The problem: agreement on a job (its timeline, where its state lives, how it restores, what
/// the planner decided, which steps completed) is one concept with many consumers, and a single
/// interface of two dozen calls handed every consumer all of them — the planner could start a
/// generation, the persister could publish a plan, and nobody could tell from a constructor what
/// a component relies on. Each role below is what one kind of consumer uses; a control plane
/// (etcd: coord::EtcdJobCoordinator; gossip: coord::GossipJobCoordinator) implements them
/// all through coord::JobCoordinator, and a consumer takes only the roles it uses.
///
/// | role | used by |
/// |---|---|
/// | local::CommitCoordinator (the commit ledger: join, complete, commit point) | the local channel |
/// | JobTimeline (generation, layout, fall-back) | restores, the persister, the planner, Admin (status, restore-check) |
/// | SlotDirectory (which nodes hold the job's slots and trainers) | restores, rebuilds, persists, peer copies, the Peer service (GetManifest), the job model |
/// | RestoreAgreement (one restore decision per job) | restores |
/// | PlanBoard (the planner's published decision, who leads the job) | the planner |
/// | CompletionInbox (completion reports to the job's coordinator) | the Peer service |
///
/// Header-only; the records they exchange are in agreement.h.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/agreement.h"
#include "reft/job_layout.h"
#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

/// \brief A job's timeline: its layout, generation and commit point as agreed, and the one
/// way to leave it (a fall-back to the persistent tier starts the next generation).
class JobTimeline {
 public:
  virtual ~JobTimeline() = default;

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
  /// restore decision {from+1, base_step, tier} with it. Returns the job's generation
  /// afterwards (the new one, or the one in force: the caller then decides again).
  virtual JobGeneration StartGeneration(const std::string& job, const GenerationStart& start) = 0;

  /// Called after this node moved a job to another generation: the new generation and the
  /// number of local slots dropped.
  using GenerationListener =
      std::function<void(const std::string& job, const JobGeneration& generation, int dropped)>;
  virtual void AddGenerationListener(GenerationListener listener) = 0;
};

/// \brief Where a job's state lives: the nodes with its trainers and slots.
class SlotDirectory {
 public:
  virtual ~SlotDirectory() = default;

  /// \brief Ranks whose trainer is connected to this node now, of `job` or of every job.
  virtual std::vector<store::RankKey> JoinedRanks(
      const std::optional<std::string>& job = std::nullopt) = 0;
  virtual bool IsJoined(const store::RankKey& rank) = 0;

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
};

/// \brief One restore decision per job, followed by every rank.
class RestoreAgreement {
 public:
  virtual ~RestoreAgreement() = default;

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
};

/// \brief Who acts for a job where one node must, and the planner's published decision.
class PlanBoard {
 public:
  virtual ~PlanBoard() = default;

  /// \brief Whether this node acts for the whole job where one node must (the every-K-steps
  /// persist schedule, the planner): etcd: it holds the job's coordinator key; gossip: it has
  /// the smallest node id among the live members.
  virtual bool LeadsJob(const std::string& job) = 0;
  /// Called (on a control-plane thread; must not block) when this node starts to lead a job
  /// (LeadsJob). Control planes whose leadership is a pure function of the membership (gossip)
  /// never call it.
  using LeadershipListener = std::function<void(const std::string& job)>;
  virtual void AddLeadershipListener(LeadershipListener listener) { (void)listener; }
  /// \brief When this node, as the coordinator of `job`, last took a completion report from
  /// `node` (unix ms; direct, forwarded or through etcd): the latest moment the node is known
  /// to have been alive, a recovery's `lost_at`. None when it took none in its term (or the
  /// control plane does not keep it).
  virtual std::optional<int64_t> LastHeardFrom(const std::string& job, const std::string& node) {
    (void)job;
    (void)node;
    return std::nullopt;
  }

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

/// \brief Completion reports sent to the job's coordinator by the other nodes.
class CompletionInbox {
 public:
  virtual ~CompletionInbox() = default;

  /// \brief Takes another node's completion report, when this node coordinates the job's
  /// commits (Peer.ReportStepCompletion). Protocol ("does not coordinate") otherwise: the
  /// sender records it in the control plane instead. Control planes without a coordinator
  /// answer Unsupported.
  virtual Status ReceiveCompletion(const StepCompletionReport& report) {
    return Status::Unsupported("node does not take completion reports for job '" + report.job +
                               "'");
  }
  /// \brief Reports an aggregator carries to this node as the job's coordinator (one batch,
  /// never forwarded again): one answer per report, in order; each is taken as
  /// ReceiveCompletion would take it from its own node, and a refusal leaves the others alone.
  virtual std::vector<Status> ReceiveForwarded(const std::vector<StepCompletionReport>& reports) {
    std::vector<Status> out;
    for (const auto& r : reports) {
      out.push_back(Status::Unsupported("node does not take completion reports for job '" +
                                        r.job + "'"));
    }
    return out;
  }
  /// \brief Where `node` sends its next reports of `job`, as this node, the job's coordinator,
  /// assigns it in the answer to a direct report; nullopt: straight to the coordinator.
  virtual std::optional<ReportRoute> RouteFor(const std::string& job, const std::string& node) {
    (void)job;
    (void)node;
    return std::nullopt;
  }
};

}  // namespace reft::coord
