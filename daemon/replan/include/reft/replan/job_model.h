#pragma once
/// \file job_model.h
/// \brief reftd's model of one job for the planner (docs/planner.md "The online path"): the
/// layout of its newest committed step with the node of every rank, the state bytes of each
/// layer from the buffers registered with a `layer`, and the measured step time.

#include <functional>
#include <optional>
#include <string>

#include "reft/replan/step_cadence.h"
#include "reft/coord/roles.h"
#include "reft/planner/online.h"
#include "reft/recovery/reft_load.h"
#include "reft/recovery/reshape.h"
#include "reft/store/snapshot_store.h"

namespace reft::replan {

/// \brief Where a rank runs, as far as this node knows ("" = unknown).
using RankNodeLookup = std::function<std::string(const store::RankKey&)>;

/// \brief The planner's view of `catalog`'s job. Per layer, each global buffer name counts once
/// per tensor-parallel index that saved it: a replicated buffer as parameters, a unique one as
/// optimizer state (the ZeRO-partitioned part of a layer) — a sharded buffer with its global
/// size, an unsharded unique one once per data-parallel rank. A layer belongs to the first
/// pipeline stage that saved one of its buffers, not counting buffers several stages save
/// (tied weights). Buffers without a layer are not part of any layer.
planner::online::JobModelView BuildJobModel(const recovery::StepCatalog& catalog,
                                            const RankNodeLookup& node_of,
                                            std::optional<StepCadence::Estimate> step_time);

/// \brief The planner's view of `job` from its newest committed step as this node reads it:
/// every rank on the node its trainer is connected to now, else where its slot of the step
/// was recorded (`slots`, may be null), else a node holding it. NotFound when the job
/// has no committed step; Unavailable without `restore`.
Result<planner::online::JobModelView> ReadJobModel(recovery::ReftLoad* restore,
                                                   coord::SlotDirectory* slots,
                                                   const StepCadence* cadence, const std::string& job);

}  // namespace reft::replan
