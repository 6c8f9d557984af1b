#pragma once
/// \file job_planner.h
/// \brief The planner in the loop (docs/planner.md "The online path"). When a node leaves the
/// cluster, the job's coordinator — the node that holds the job's coordinator key in etcd
/// (coord::JobCoordinator::LeadsJob; elected among the nodes with trainers or slots of the job)
/// — reads the job's model, decides how the job goes on (planner::online::Decide) and
/// publishes the decision (coord::JobCoordinator::PublishPlan, a compare-and-swap fenced by the
/// job generation and by this node's term as the job's coordinator). Without a spare it waits up
/// to `spare_wait` for one when restarting on a spare after the wait would still train more than
/// going on now (reft/planner/spare_wait.h). In operator-confirmed mode the decision then waits
/// for `reftctl plan confirm`. Every node answers `plan show`
/// with the published decision.
///
/// With the gossip control plane nothing is published (there is no consensus to publish
/// through): `plan show` computes the decision from the asked node's own view.
///
/// A reconfiguration's transfer plan is executed by the coordinator once the decision is final
/// (plan_transfer.h): every receiving node stages its layers before the trainers restart;
/// the progress is published with the decision and resumed by a coordinator that takes over.
///
/// A loss is withdrawn when its nodes come back before anyone acted on the decision (a reftd
/// restarted for a configuration change re-registers and adopts its slots): the coordinator
/// replaces the decision by a `no_loss` publication (plan_finality.h has the rule).
///
/// A job that runs below the size it had (it lost nodes) grows back onto nodes that come
/// (planner::online::Decide, policy "grow"): the coordinator of such a job follows arrivals too.
///
/// Thread-safe; owns one thread (Start/Stop) that sleeps until a node leaves (or comes, see
/// above), this node starts to lead a job, or a spare wait or retry is due.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "reft/replan/plan_decision.h"
#include "reft/replan/plan_profiles.h"
#include "reft/replan/plan_transfer.h"
#include "reft/replan/planner_mode.h"
#include "reft/replan/step_cadence.h"
#include "reft/local/plan_source.h"
#include "reft/mutex.h"
#include "reft/coord/roles.h"
#include "reft/peer/node_directory.h"
#include "reft/planner/online.h"
#include "reft/result.h"
#include "reft/thread.h"

namespace reft::replan {

struct JobPlannerOptions {
  PlannerMode mode = PlannerMode::kAutomatic;
  /// With fewer spares than lost nodes, how long the decision may wait for one (restarting on
  /// a spare from memory moves no state) before it is made without; it waits only when that
  /// pays (reft/planner/spare_wait.h); 0: never wait.
  std::chrono::milliseconds spare_wait{30000};
  /// A job whose model or control plane could not be read is planned again this often.
  std::chrono::milliseconds retry{1000};
  /// A transfer plan that failed (a receiving node unreachable, say) is run again at most this
  /// many times in all; a new loss decides anew anyway.
  int transfer_attempts = 3;
  /// Receiving nodes that stage layers at once.
  int transfer_concurrency = 8;
  /// The nodes' lease TTL (etcd `lease_ttl_s`): a node declared lost when its lease lapsed
  /// renewed it last this long before (the decision's `phases.lost_at`); 0: not known.
  std::chrono::milliseconds lease_ttl{0};
};

/// \brief The roles of a job's agreement the planner uses (reft/coord/roles.h): four of them;
/// it never joins, completes, commits nor starts a generation.
struct PlannerAgreement {
  coord::JobTimeline* timeline = nullptr;     ///< the jobs and their generations
  coord::SlotDirectory* slots = nullptr;      ///< the nodes that hold a job
  coord::RestoreAgreement* restores = nullptr;  ///< whether a trainer restored under a decision
  coord::PlanBoard* plans = nullptr;          ///< who leads a job; its published decision
  /// Every role from one control plane (a coord::JobCoordinator, or a test's fake).
  template <typename ControlPlane>
  static PlannerAgreement Of(ControlPlane* c) {
    return {c, c, c, c};
  }
};

/// Also the local channel's PlanSource: trainers ask for their own job's plan on the local
/// socket (the session checks the owner first), operators for any job through Admin/ShowPlan.
class JobPlanner : public local::PlanSource {
 public:
  using ModelSource =
      std::function<Result<planner::online::JobModelView>(const std::string& job)>;

  /// `nodes`, the roles of `agreement` and `profiles` (may be null) must outlive the planner.
  JobPlanner(std::string node_id, JobPlannerOptions options, peer::NodeDirectory* nodes,
             PlannerAgreement agreement, const PlanProfiles* profiles, ModelSource model);
  ~JobPlanner() override;
  JobPlanner(const JobPlanner&) = delete;
  JobPlanner& operator=(const JobPlanner&) = delete;

  /// \brief How the coordinator executes a reconfiguration's transfer plan (plan_transfer.h);
  /// without one the plan is published and never executed. Call before Start.
  void SetStager(Stager stager) { stager_ = std::move(stager); }
  /// \brief Where `plan show` reads the first step committed after a recovery (the commit
  /// path notes them: StepCadence::NoteCommitted); may be null. Call before Start.
  void SetCommitLog(const StepCadence* commits) { commits_ = commits; }

  /// Follows the membership and plans (no thread when the mode is off).
  void Start();
  void Stop();

  /// \brief Plans every job again soon (a profile was attached: a decision that is not final
  /// yet is made again with it).
  void Replan();

  /// \brief `plan show`: the published decision while it is the job's current one (its
  /// generation and committed step), else the decision from this node's view; either way with
  /// the publication (the published record, or none) and this node's planner mode. Serialised
  /// by the caller (ToJson, plan_decision.h): Admin/ShowPlan and PlanJson.
  Result<PlanShow> Show(const std::string& job);
  /// \brief Show() as JSON text, for the local channel (local::PlanSource).
  Result<std::string> PlanJson(const std::string& job) override;
  /// \brief `plan confirm`: marks the published decision "confirmed". `version` (0: any) must
  /// be the one shown (Busy when the decision changed since). NotFound without a published
  /// decision; InvalidArgument when it does not await confirmation.
  Result<coord::PublishedPlan> Confirm(const std::string& job, int64_t version);

  /// \brief Named test point (reft/test_point.h), reached for the job by this planner:
  /// kPlanDecided: the loop decided the job's plan and is about to publish it (PublishPlan); a
  /// coordinator term that ends right there must not let the plan stand.
  static constexpr const char* kPlanDecided = "planner-plan-decided";

 private:
  using Clock = std::chrono::steady_clock;

  planner::online::Membership CurrentMembership() const;
  /// Plans again whenever a node comes (from the first call on).
  void FollowArrivals();
  /// Plans `job` once when this node plans for it; returns when it wants to be planned again
  /// (time_point::max(): at the next membership change).
  Clock::time_point PlanJob(const std::string& job);
  /// Decides for `job` (led by this node) on its `model` and publishes the decision unless the
  /// publication `current` already says it; returns when to look again.
  Clock::time_point DecideJob(const std::string& job, const std::optional<coord::PublishedPlan>& current,
                              planner::online::JobModelView model);
  /// Sets the state of `plan` (undecided, waiting for a spare, awaiting confirmation or
  /// decided) and, for a loss, its spare wait: the deadline a publication of the same loss
  /// (`same_loss`) started, and the document's `spare_wait` (how long it waited, and why it
  /// waits or not: reft/planner/spare_wait.h); returns when to look again for the state's sake.
  /// The phases of a loss of `lost` in `job` known now: the latest departure of them this node
  /// heard (declared) and the latest moment that node is known alive (lost): its last lease
  /// renewal or its last completion report, whichever is later.
  RecoveryPhases LossPhases(const std::string& job, const std::vector<std::string>& lost) const;
  /// `plan show`'s last recovery: the published loss `record`'s phases and the first step
  /// committed after it.
  std::optional<LastRecovery> LastRecoveryOf(const std::string& job, const coord::PublishedPlan& record) const;
  Clock::time_point ChooseState(const std::optional<coord::PublishedPlan>& same_loss, PlanDecision* plan) const;
  /// Publishes `plan` over `current` and runs its transfer when it is decided; returns when to
  /// look again (no later than `due`).
  Clock::time_point Publish(const std::string& job, const std::optional<coord::PublishedPlan>& current,
                            const PlanDecision& plan, Clock::time_point due);
  /// Replaces the loss decision `current` by a `no_loss` publication (with the planner's
  /// document `doc`, which finds no loss) unless a trainer restored under it; returns when to
  /// look again.
  Clock::time_point WithdrawLoss(const std::string& job, const coord::PublishedPlan& current,
                                 const PlanDocument& doc);
  /// Runs (or resumes) the transfer plan of the final decision `plan` when it has one that is
  /// not done; returns when to look again.
  Clock::time_point ExecuteTransfer(const std::string& job, const coord::PublishedPlan& plan);
  void Run();

  const std::string node_id_;
  const JobPlannerOptions options_;
  peer::NodeDirectory* const nodes_;
  const PlannerAgreement agreement_;
  const PlanProfiles* const profiles_;
  const ModelSource model_;
  Stager stager_;
  const StepCadence* commits_ = nullptr;
  std::once_flag arrivals_once_;

  // Shared with the membership listener, which the directory keeps as long as it lives.
  struct Wakeup {
    Mutex mu;
    std::condition_variable cv;
    bool changed REFT_GUARDED_BY(mu) = true;  // plan every job at the next pass
    bool stop REFT_GUARDED_BY(mu) = false;
    /// When this node heard each node's departure (unix ms): a loss's `declared_at`.
    std::map<std::string, int64_t> declared_ms REFT_GUARDED_BY(mu);
    void Depart(const std::string& node, int64_t at_ms) {
      MutexLock lock(mu);
      declared_ms[node] = at_ms;
      changed = true;
      cv.notify_all();
    }
    void Notify() {
      MutexLock lock(mu);
      changed = true;
      cv.notify_all();
    }
  };
  const std::shared_ptr<Wakeup> wakeup_ = std::make_shared<Wakeup>();
  reft::Thread thread_;
};

}  // namespace reft::replan
