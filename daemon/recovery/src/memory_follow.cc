/// \file memory_follow.cc
/// \brief Following a decision to restore the committed step from memory: the rank's state is
/// assembled at the decided step, and handed over only while the generation and the decision
/// still stand.

#include "reft/recovery/reft_load.h"
#include "restore_call.h"

namespace reft::recovery {

Result<ReftLoad::Followed> ReftLoad::FollowMemory(RestoreCall& call, LocatedStep step) {
  const coord::RestoreDecision& decision = step.decision;
  auto r = RestoreImpl(call.meta, call.stats, call.progress, call.request, std::move(step.known));
  // A fallback started elsewhere wins: this state must not be used.
  if (call.Moved(decision.generation)) return Followed{};
  if (r.ok()) {
    if (r->step != decision.step) return Followed{};  // a newer commit: decide again
    // The decision must still stand as the bytes are handed over: a fallback started by a
    // rank that could not rebuild the step replaces it (a linearizable read with etcd). A
    // fallback after this point fences this trainer instead (its epoch is then old).
    auto still = call.agreement.restores->Decision(call.job());
    if (!still.ok()) {
      return still.status().WithContext("re-reading the restore decision of " +
                                        JobName(call.job()));
    }
    if (!*still || (*still)->version != decision.version) return Followed{};
    return Followed{InEpoch(std::move(*r), step.epoch), std::nullopt};
  }
  if (r.status().code() != StatusCode::kLost) return r.status();
  return Followed{std::nullopt, r.status().message()};  // the job falls back
}

}  // namespace reft::recovery
