#pragma once
/// \file plan_finality.h
/// \brief When a published decision may still be taken back.
///
/// A node the control plane declared dead may come back with nothing lost: a reftd restarted
/// for a configuration change or an upgrade re-registers under the same node id and adopts its
/// slots. The decision its coordinator published for that "loss" must not outlive its reason —
/// trainers restarted through reft.elastic would wait on a `waiting_for_spare` that can never
/// end well, or shrink a job whose nodes all live. Yet once anyone acted on a decision it must
/// stand: taking it back then would leave part of the job in one layout and part in another.
/// This header is that rule; the planner loop (job_planner.h) applies it.

#include <cstdint>
#include <string>

#include "reft/coord/agreement.h"

namespace reft::replan {

/// The state of a publication that withdrew a loss: the node came back before any decision
/// for it was acted on, and the job goes on as it runs.
inline constexpr const char* kNoLossState = "no_loss";

/// \brief Why `published` is final, or empty when it is not: `reftctl plan confirm` approved
/// it, a layer moved for it (its transfer plan staged bytes on some node), or a trainer restored
/// under it (`restored_under_it`: a restore decision is recorded for its generation and step).
std::string FinalBecause(const coord::PublishedPlan& published, bool restored_under_it);

/// \brief Whether `published` decides on a loss (not a growth, not a withdrawal) of the job's
/// current `generation` and `committed_step`: the publication a loss that ends would leave. The
/// planner withdraws it, once no node of the job is lost, unless it is final (FinalBecause).
bool DecidesLossOf(const coord::PublishedPlan& published, uint64_t generation, int64_t committed_step);

}  // namespace reft::replan
