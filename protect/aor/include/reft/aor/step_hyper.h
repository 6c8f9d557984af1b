#pragma once
/// \file step_hyper.h
/// \brief The per-step inputs of one AdamW update besides the gradient: what a trainer sends
/// to reftd every iteration so that a host replica can replay the update (docs/protection.md "AOR").

#include <cstddef>
#include <cstdint>
#include <string>

#include "reft/status.h"

namespace reft::aor {

/// \brief Element type of a gradient buffer. Numeric values are part of the trace and wire
/// formats (hyper_codec.h, the replay tool); never renumber, only append.
enum class GradDtype : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,   ///< IEEE 754 binary16
  kBFloat16 = 2,  ///< the upper 16 bits of a binary32
};

/// \brief Why a trainer declares its optimizer update not replayable (StepHyper::not_replayable).
/// Numeric values are part of the wire format (hyper_codec.h); never renumber, only append.
enum class NotReplayable : uint8_t {
  kReplayable = 0,
  /// The owner's sqrt is not correctly rounded (torch's CPU sqrt goes through MKL VML, whose
  /// result depends on the CPU) while the replay's is IEEE.
  kSqrtNotCorrectlyRounded = 1,
  /// The trainer tried every replay form on its optimizer and none matched it bit for bit.
  kNoMatchingForm = 2,
  /// An optimizer or an option the replay does not implement (amsgrad, maximize, SGD, ...).
  kUnsupportedOptimizer = 3,
  /// The owner's optimizer runs on a GPU (its state is staged by the trainer, so reftd cannot
  /// see it is device memory): its kernels are not what the host replays.
  kDeviceOptimizer = 4,
};
inline constexpr uint8_t kMaxNotReplayable = 4;

/// \brief What a reason code means, e.g. "the owner's sqrt is not correctly rounded (...)";
/// "unknown reason N" for a code this build does not know.
std::string NotReplayableText(NotReplayable reason);

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
  /// The owner's kernels fuse multiply-adds (one rounding for `a·b + c`): torch >= 2.0's ATen
  /// CPU kernels built for AVX2 / AVX-512 do in lerp_, addcmul_ and add_(alpha), in vector body
  /// and tail alike (adamw.h lists where). false: every product is rounded before its sum
  /// (ATen's portable kernels, ATEN_CPU_CAPABILITY=default; reft's own owners).
  bool fma = false;
  /// torch's fused CPU kernel (`torch.optim.AdamW(fused=True)`, `_fused_adamw_`): 0 = not;
  /// otherwise its vector width in elements. The kernel's scalar tail (the last n mod width
  /// elements of the owner's tensor, which must be the whole shard) rounds the second moment in
  /// another order than its vector body. Requires lerp_first_moment. At most 64.
  uint8_t fused_width = 0;
  /// Adam's L2 weight decay (`torch.optim.Adam(weight_decay=wd)`: g += wd·param before the
  /// moments, no decoupled decay) instead of AdamW's decoupled decay (param ·= 1 − lr·wd).
  bool l2_weight_decay = false;
  /// Not kReplayable: the owner's update is known not to be reproducible bit for bit (the
  /// trainer found out, e.g. its sqrt is not correctly rounded). A replica must not be kept:
  /// reftd copies the state instead (docs/protection.md "What is exact"). The other fields are
  /// still validated, and the step counts still follow the owner.
  NotReplayable not_replayable = NotReplayable::kReplayable;
};

/// \brief Checks the ranges above; InvalidArgument naming the first bad field, e.g.
/// "step hyper-parameters: lr is NaN". Nothing else in this library accepts an invalid one.
Status ValidateStepHyper(const StepHyper& hyper);

}  // namespace reft::aor
