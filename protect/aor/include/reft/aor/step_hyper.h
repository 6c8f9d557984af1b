#pragma once
/// \file step_hyper.h
/// \brief The per-step inputs of one AdamW update besides the gradient: what a trainer sends
/// to reftd every iteration so that a host replica can replay the update (docs/protection.md "AOR").

#include <cstddef>
#include <cstdint>

#include "reft/status.h"

namespace reft::aor {

/// \brief Element type of a gradient buffer. Numeric values are part of the trace and wire
/// formats (hyper_codec.h, the replay tool); never renumber, only append.
enum class GradDtype : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,   ///< IEEE 754 binary16
  kBFloat16 = 2,  ///< the upper 16 bits of a binary32
};

/// \brief Bytes per element of `dtype`.
size_t GradDtypeSize(GradDtype dtype);
/// \brief "fp32", "fp16" or "bf16".
const char* GradDtypeName(GradDtype dtype);

/// \brief Everything one AdamW step needs besides the gradient and the state.
///
/// Semantics follow torch.optim.AdamW (amsgrad=False, maximize=False) driven by a mixed
/// precision training loop:
///   g ← grad · grad_scale · clip_coef, then the decoupled-weight-decay Adam update with bias
///   correction for optimizer step `step` (adamw.h documents the exact operation order).
/// Scalars are doubles because trainers hold them as Python floats (IEEE double); the kernel
/// derives its fp32 coefficients from them once per step.
struct StepHyper {
  /// Training iteration this update belongs to. Advances by one every iteration, skipped or
  /// not; a replica uses it to detect lost messages (AorReplica).
  uint64_t iteration = 0;
  /// Optimizer step count *after* this update (torch's state['step'] after `step_t += 1`),
  /// used for bias correction; >= 1. It does not advance on skipped iterations, so a skipped
  /// message carries the count of the last applied update.
  uint64_t step = 0;
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// Global gradient-clipping coefficient computed by the trainer from the global norm:
  /// min(1, max_norm / (total_norm + 1e-6)); 1 when clipping is off. In [0, 1].
  double clip_coef = 1.0;
  /// Gradient unscale factor, 1/loss_scale under fp16 loss scaling, else 1. Finite, > 0.
  double grad_scale = 1.0;
  /// fp16 overflow: the trainer skipped optimizer.step(); nothing changes, `step` does not
  /// advance. A skipped step's clip_coef is not validated (NaN or 0 when the global norm
  /// overflowed) and its step may be 0; the other scalars still are.
  bool skipped = false;
  /// How the owner updates the first moment. false: `m = m·β1 + (1−β1)·g`
  /// (`exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)`: torch 1.x, libtorch's C++ Adam);
  /// true: `m = m + (1−β1)·(g − m)` (`exp_avg.lerp_(grad, 1-beta1)`: torch.optim since 2.0).
  /// The two differ in the last bit from the second update on; a replica is bit-identical only
  /// with the owner's form.
  bool lerp_first_moment = false;
};

/// \brief Checks the ranges above; InvalidArgument naming the first bad field, e.g.
/// "step hyper-parameters: lr is NaN". Nothing else in this library accepts an invalid one.
Status ValidateStepHyper(const StepHyper& hyper);

}  // namespace reft::aor
