#pragma once
/// \file agreement.h
/// \brief The records a job's nodes agree on through the control plane: the generation and
/// commit point, a fall-back to the persistent tier, the restore decision, a node's completion
/// report, and the planner's published plan (docs/coordination.md).
///
/// They are values: the control plane (etcd or gossip, daemon/coord and daemon/peer) stores and
/// compares them, the roles in roles.h hand them out, and the layers above read them without
/// knowing which control plane runs. Header-only; depends on base and the store's rank key.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/restore_source.h"
#include "reft/coord/timeline.h"
#include "reft/store/snapshot_store.h"

namespace reft::coord {

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
  TimelineStamp committed_in;
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
  RestoreSource source = RestoreSource::kNone;  ///< etcd: its name (restore_source.h)
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
  /// The reporting node's epoch (its Caller's): a report an aggregator forwards is fenced by it
  /// at the coordinator (0: not known, never fenced).
  uint64_t node_epoch = 0;
};

/// \brief Where a node sends its next completion reports of a job: the aggregator the job's
/// coordinator assigned it (docs/coordination.md "Reports aggregate on the way"); empty: the
/// coordinator itself.
struct ReportRoute {
  std::string node;
  std::string address;
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

}  // namespace reft::coord
