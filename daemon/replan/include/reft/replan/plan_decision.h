#pragma once
/// \file plan_decision.h
/// \brief The planner's decision for a job as a value (docs/planner.md "The online path").
///
/// The planner in the loop reads a job's model, decides how the job goes on and publishes the
/// decision; `plan show` answers with it. The decision used to travel through the loop as a
/// JSON document read field by field, where a misspelt key or a null read as a string is found
/// at run time (a null `policy` once ended reftd). Here it is typed: `PlanDocument` is the
/// planner's document (the job model, the membership, the profile and the `PolicyDecision`),
/// `PlanDecision` what the loop publishes (its state, basis and spare wait with the document).
///
/// JSON is written and read only at the edges: FromJson where a document comes in (the output of
/// planner::online::Decide, the record the coordinator returns from etcd), ToJson / ToRecord
/// where one goes out (PublishPlan to the coordinator, `plan show` over Admin and the local
/// channel). ToJson writes exactly the document planner::online::Decide writes — the same keys,
/// values, number types and nulls — so a published document is byte for byte what it was before
/// it was typed (the schema is docs/reftctl/schemas/plan-show.schema.json).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reft/coord/agreement.h"
#include "reft/replan/planner_mode.h"
#include "reft/result.h"

namespace reft::replan {

/// A decision's policy, and the candidates' ("stay" and "grow" are a growth's candidates).
enum class PlanPolicy { kNone, kRestartOnSpare, kReroute, kReconfigure, kRestart, kGrow, kStay, kExit };
const char* PlanPolicyName(PlanPolicy policy);
std::optional<PlanPolicy> ParsePlanPolicy(const std::string& name);

/// The state of a published decision (coord::PublishedPlan::state).
enum class PlanState { kWaitingForSpare, kAwaitingConfirmation, kDecided, kConfirmed, kUndecided, kNoLoss };
const char* PlanStateName(PlanState state);
std::optional<PlanState> ParsePlanState(const std::string& name);

/// The layers of a pipeline position, first to last inclusive (none: a rerouted position).
struct LayerSpan {
  std::optional<int> first;
  std::optional<int> last;
};

struct RankState {
  int pp = 0, tp = 0, dp = 0;
  std::optional<std::string> node;  ///< none: not known on the node that decided
  bool alive = true;
};

struct LayerState {
  int layer = 0;
  int stage = 0;
  uint64_t param_bytes = 0;
  uint64_t optimizer_bytes = 0;
  uint64_t bytes = 0;
};

struct ModelState {
  std::vector<LayerState> layers;
  uint64_t total_bytes = 0;
  std::optional<double> step_ms;  ///< none: not measured yet
  int step_samples = 0;
};

/// What timed the plans: "attached", "measured_step_time" or "none", and why.
struct ProfileNote {
  std::string source;
  std::string note;
};

/// One policy the decision weighed: its step, transition and score, or why it cannot run.
struct PolicyCandidate {
  PlanPolicy policy = PlanPolicy::kNone;
  bool feasible = false;
  std::optional<double> step_ms, transition_ms, score;  ///< when feasible
  std::optional<std::string> why;                       ///< when not
};

struct StagePlacement {
  std::optional<std::string> node;  ///< none: rerouted (its micro-batches run on live peers)
  LayerSpan layers;
  bool rerouted = false;
};

/// The layout after the decision: each pipeline's stages with their node and layers.
struct NewLayout {
  std::vector<std::vector<StagePlacement>> pipelines;
  std::vector<int> micro_batches;  ///< per pipeline
  double step_ms = 0;
  std::optional<double> unrestricted_step_ms;  ///< none: no plan fits
};

struct LayerMove {
  int layer = 0;
  std::string from_node, to_node;
  uint64_t bytes = 0;
};

struct HostedLayers {
  std::string node;
  std::vector<int> layers;
};

/// What a decision that restarts the job in a new layout moves before it does (plan_transfer.h).
struct TransferPlan {
  std::vector<LayerMove> moves;
  /// Every node of the new layout and the layers it will host. A decision published before
  /// decisions carried them reads without: its moves' receivers host (NewTransferProgress).
  std::vector<HostedLayers> hosts;
  uint64_t fill_bytes = 0, total_bytes = 0, max_sender_bytes = 0, max_receiver_bytes = 0;
  bool executed = false;  ///< every host staged what it lacks (set by `plan show`)
};

/// How long the coordinator waited for a spare before this decision, and why it waited or did
/// not (the spare wait as a decision, reft/planner/spare_wait.h). Set by the planner loop on a
/// loss it publishes, not by planner::online::Decide.
struct SpareWait {
  int64_t waited_ms = 0;  ///< 0: it did not wait; while waiting_for_spare: how long so far
  std::string reason;
};

/// The document's `decision`: whether one is needed, the policy and why; the candidates, the
/// new layout and its transfer where the policy has them.
struct PolicyDecision {
  bool needed = false;
  std::optional<PlanPolicy> policy;  ///< none: the planner cannot decide (no profile, no step time)
  std::string reason;
  std::optional<double> current_step_ms;
  std::optional<int> f, n0, live_units;
  std::optional<std::vector<PolicyCandidate>> candidates;
  std::optional<double> expected_interval_ms;
  std::optional<NewLayout> new_layout;
  std::optional<TransferPlan> transfer;
  std::optional<std::vector<std::string>> joining_nodes;  ///< grow: the nodes it grows onto
  std::optional<uint64_t> restore_fetch_bytes;            ///< grow: what the new positions lack
  std::optional<SpareWait> spare_wait;                    ///< a published loss: the spare wait
};

/// One phase of a recovery: when it happened (wall-clock unix ms) and the node that observed it
/// (docs/recovery.md "Phases of a recovery"). Times of different nodes are subject to clock skew.
struct PhaseMark {
  int64_t at_ms = 0;
  std::string node;
};

/// \brief The phases of one recovery, from the node's loss to the rank's restore; none where a
/// phase did not happen (a restore with no loss, a decision without a transfer, a tier
/// fall-back). The job-wide ones (lost, declared, decided, staged) come from the published
/// decision; the others from the reftd that restored the rank.
struct RecoveryPhases {
  std::optional<PhaseMark> lost_at;             ///< the lost node's last sign of life
  std::optional<PhaseMark> declared_at;         ///< its departure, as the coordinator heard it
  std::optional<PhaseMark> decided_at;          ///< the decision's publication
  std::optional<PhaseMark> staged_at;           ///< every host staged the transfer plan
  std::optional<PhaseMark> reconnected_at;      ///< the rank's trainer said hello again
  std::optional<PhaseMark> restore_started_at;  ///< reftd began the rank's restore
  std::optional<PhaseMark> restore_ended_at;    ///< ... and ended it
};

/// The JSON of `phases`: every phase's key, `{"at_ms", "node"}` or null.
nlohmann::json ToJson(const RecoveryPhases& phases);
/// Reads what ToJson writes; a missing key or null is a phase that did not happen. Corrupted on
/// another shape.
Result<RecoveryPhases> RecoveryPhasesFromJson(const nlohmann::json& j);

/// The planner's document (planner::online::Decide): the job's model and membership as the
/// deciding node saw them, and the decision.
struct PlanDocument {
  std::string job;
  int64_t step = -1;  ///< the committed step the model was read from
  int dp = 1, tp = 1, pp = 1;
  std::vector<RankState> ranks;
  ModelState model;
  std::vector<std::string> live_nodes, lost_nodes, spare_nodes;
  ProfileNote profile;
  std::optional<int> peak_units;  ///< the most pipeline positions the job ran with
  PolicyDecision decision;
  /// A published loss: when the lost node was last known alive and when its departure was
  /// declared (set by the planner loop, never by Decide; the record's publication and transfer
  /// add the decided and staged phases: JobPhasesOf). None in a document of no loss, and in
  /// one published before decisions carried phases.
  std::optional<RecoveryPhases> phases;

  bool Grows() const { return decision.policy == PlanPolicy::kGrow; }
};

/// The one JSON codec of the document. FromJson is Corrupted on a document of another shape
/// (a missing key, a value of another type, an unknown policy).
nlohmann::json ToJson(const PlanDocument& doc);
Result<PlanDocument> PlanDocumentFromJson(const nlohmann::json& doc);

/// \brief What the planner loop publishes for a job: the document and what the loop made of
/// it — the state, what it decides on (`basis`: the lost nodes, sorted and comma-separated, or
/// `+` and the nodes a growth grows onto) and, while it waits for a spare, until when.
struct PlanDecision {
  PlanState state = PlanState::kUndecided;
  uint64_t generation = 0;  ///< the job generation it is decided in
  int64_t step = -1;        ///< the committed step the model was read from
  std::string basis;
  int64_t wait_until_ms = 0;  ///< kWaitingForSpare: when the wait ends (0: no wait)
  PlanDocument plan;
};

/// \brief The coordinator's record of `decision`, published by `planner` at `decided_at_ms`
/// (the etcd edge: the document is serialised here).
coord::PublishedPlan ToRecord(const PlanDecision& decision, const std::string& planner, int64_t decided_at_ms);

/// \brief The document a published record carries; none when it is unreadable (a record with
/// no document, or one this version cannot read).
std::optional<PlanDocument> DocumentOf(const coord::PublishedPlan& record);

/// \brief The job-wide phases of the recovery `record` decides: lost and declared from its
/// document, decided from its publication (decided or confirmed: `decided_at_ms` by its
/// planner), staged from its transfer (done: `finished_at_ms`). None for a record that decides
/// no loss (no_loss, a growth, a document without phases), a decision not final yet (waiting
/// for a spare, awaiting confirmation) keeps lost and declared only.
std::optional<RecoveryPhases> JobPhasesOf(const coord::PublishedPlan& record);

/// \brief The job's last recovery as `plan show` and `restore-check` show it: its job-wide
/// phases and the first step committed job-wide after it, as the answering node first saw it
/// committed (none until there is one).
struct LastRecovery {
  RecoveryPhases phases;
  std::optional<int64_t> first_commit_step;
  std::optional<PhaseMark> first_commit_at;
};
nlohmann::json ToJson(const LastRecovery& recovery);

/// \brief `plan show`: the document (the published one while it is current, else this node's
/// view), the last publication, and who answered.
struct PlanShow {
  PlanDocument plan;
  std::optional<coord::PublishedPlan> publication;  ///< none: nothing published (or gossip)
  bool current = false;                            ///< the publication is the job's current decision
  PlannerMode mode = PlannerMode::kAutomatic;      ///< the answering node's planner.mode
  std::string node;                                ///< the answering node
  std::optional<LastRecovery> last_recovery;        ///< none: no loss published for the job
};

/// The `plan show` document (the Admin and local-channel edge).
nlohmann::json ToJson(const PlanShow& show);

}  // namespace reft::replan
