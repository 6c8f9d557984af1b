#include "reft/aor/replica.h"

#include <utility>

#include "reft/aor/hyper_codec.h"

namespace reft::aor {

AorReplica::AorReplica(AdamWState state, uint64_t iteration, uint64_t step, int threads)
    : state_(state), iteration_(iteration), step_(step), threads_(threads < 1 ? 1 : threads) {}

Status AorReplica::Stale() const {
  return Status::Lost("aor replica stale at iteration " + std::to_string(iteration_) + " (" +
                      stale_reason_ + "): resynchronise from the owner");
}

void AorReplica::MarkStale(std::string reason) {
  if (stale_) return;
  stale_ = true;
  stale_reason_ = std::move(reason);
}

void AorReplica::Resynchronized(uint64_t iteration, uint64_t step) {
  iteration_ = iteration;
  step_ = step;
  stale_ = false;
  stale_reason_.clear();
}

Status AorReplica::Check(const StepHyper& hyper, const void* grad, size_t n) {
  if (stale_) return Stale();
  REFT_RETURN_NOT_OK(ValidateStepHyper(hyper));
  if (n != state_.size) {
    return Status::InvalidArgument("aor replica: " + std::to_string(n) +
                                   " gradients for a replica of " + std::to_string(state_.size) +
                                   " elements");
  }
  if (hyper.iteration <= iteration_) {
    return Status::InvalidArgument("aor replica: iteration " + std::to_string(hyper.iteration) +
                                   " already applied (replica is at " + std::to_string(iteration_) +
                                   ")");
  }
  if (hyper.iteration != iteration_ + 1) {
    MarkStale("missed iterations " + std::to_string(iteration_ + 1) + ".." +
              std::to_string(hyper.iteration - 1));
    return Stale();
  }
  // The owner's step count must follow ours: +1 for an applied update, unchanged for a skipped
  // one. Anything else means the two states have diverged (e.g. the replica was seeded from a
  // different step), and replaying further would only hide it.
  const uint64_t expected_step = hyper.skipped ? step_ : step_ + 1;
  if (hyper.step != expected_step) {
    MarkStale("iteration " + std::to_string(hyper.iteration) + " carries optimizer step " +
              std::to_string(hyper.step) + ", replica expected " + std::to_string(expected_step));
    return Stale();
  }
  if (!hyper.skipped && n > 0 && grad == nullptr) {
    return Status::InvalidArgument("aor replica: null gradient");
  }
  return Status::OK();
}

Status AorReplica::Apply(const StepHyper& hyper, const void* grad, GradDtype dtype, size_t n) {
  REFT_RETURN_NOT_OK(Check(hyper, grad, n));
  REFT_RETURN_NOT_OK(AdamWUpdate(state_, hyper, grad, dtype, n, threads_));
  iteration_ = hyper.iteration;
  step_ = hyper.step;
  return Status::OK();
}

Status AorReplica::ApplyInto(const AdamWState& next, const StepHyper& hyper, const void* grad,
                             GradDtype dtype, size_t n) {
  REFT_RETURN_NOT_OK(Check(hyper, grad, n));
  REFT_RETURN_NOT_OK(AdamWUpdateInto(state_, next, hyper, grad, dtype, n, threads_));
  state_ = next;
  iteration_ = hyper.iteration;
  step_ = hyper.step;
  return Status::OK();
}

Status AorReplica::ApplyEncoded(const uint8_t* hyper, size_t hyper_size, const void* grad,
                                GradDtype dtype, size_t n) {
  REFT_ASSIGN_OR_RETURN(StepHyper h, DecodeStepHyper(hyper, hyper_size));
  return Apply(h, grad, dtype, n);
}

}  // namespace reft::aor
