#pragma once
/// \file adamw.h
/// \brief The project's reference AdamW step: the one implementation that both an owner (a
/// trainer, or a test standing in for one) and a host replica (AorReplica) run, so that the
/// two are bit-identical by construction (docs/protection.md "AOR").
///
/// Deviation from the paper: REFT's eq. 4 replays plain SGD (θ ← θ − η·∇θ). Training uses
/// Adam-type optimizers, whose state (exp_avg, exp_avg_sq) an SGD replay would never
/// reproduce, so the replica replays the exact AdamW update including gradient unscaling,
/// global clipping, the LR schedule, weight decay and skipped steps (docs/protection.md "AOR").
///
/// ## Exact operation order (fp32, round-to-nearest-even after every line)
///
/// Once per step, from the StepHyper (double arithmetic, each result rounded to fp32 once):
///
///     decay      = float(1 − lr·weight_decay)       (1 with l2_weight_decay)
///     wd_f       = float(weight_decay)               (used with l2_weight_decay only)
///     beta1_f    = float(beta1)          one_minus_beta1 = float(1 − beta1)
///     beta2_f    = float(beta2)          one_minus_beta2 = float(1 − beta2)
///     neg_step   = float(−(lr / (1 − beta1^step)))          (std::pow)
///     bc2_sqrt   = float(sqrt(1 − beta2^step))   pow(1 − beta2^step, 0.5) in the torch >= 2.0
///                                                per-op form (lerp, not fused: Python's `** 0.5`)
///     eps_f      = float(eps)   scale_f = float(grad_scale)   clip_f = float(clip_coef)
///
/// Per element i (g converted exactly from fp32/fp16/bf16); fma(a, b, c) is a·b + c rounded
/// once, used only where StepHyper::fma says the owner fuses, written `a·b + c` otherwise:
///
///     g = g · scale_f                    unscale (1/loss_scale)
///     g = g · clip_f                     global gradient clipping
///     g = fma(p, wd_f, g)                Adam's L2 decay (l2_weight_decay only), p before update
///     p = p · decay                      decoupled weight decay
///     first moment, w = one_minus_beta1:
///       mul-add (torch 1.x):   m = fma(w, g, m · beta1_f)
///       lerp (torch >= 2.0, ATen's lerp): m = fma(w, g − m, m)         when |w| < 0.5,
///                                         m = fma(w − 1, g − m, g)     otherwise
///     second moment:
///       m2 = fma(one_minus_beta2 · g, g, v · beta2_f)     (addcmul_; the fused kernel's body)
///       m2 = fma(v, beta2_f, (one_minus_beta2 · g) · g)   (the fused kernel's scalar tail)
///       v = m2
///     d = sqrt(v)
///     d = d / bc2_sqrt
///     d = d + eps_f
///     p = p + (neg_step · m) / d
///
/// bf16 state (StateDtype::kBFloat16) is widened exactly, computed in fp32 as above and rounded
/// to bf16 (nearest even): after every line, the way torch's per-op kernels store each op's
/// bf16 result (the scaled gradient too: the trainer scales the bf16 gradient in torch), or,
/// with fused_width, only when the three arrays are stored, the way torch's fused kernel keeps
/// everything in fp32 registers (the parameter update reading the fp32 moments).
///
/// This mirrors torch.optim.AdamW / Adam on the CPU: the single-tensor and foreach paths
/// (mul_, lerp_ or mul_+add_, addcmul_, sqrt, div, add_(eps), addcdiv_; foreach runs the same
/// per-tensor kernels on the CPU) and, with fused_width, the fused kernel (`fused=True`), whose
/// vector body and scalar tail round the second moment differently: elements
/// [n − n mod fused_width, n) of the owner's tensor take the tail line. The scalars are rounded
/// to fp32 the way ATen rounds a Python scalar for a float tensor. Which of these the owner
/// runs is its trainer's to say (StepHyper), found by the Python client by running its own
/// optimizer on a probe (docs/protection.md "What is exact"); torch's per-op sqrt must be
/// correctly rounded, which ATen's MKL VML sqrt is not on every CPU (then the trainer declares
/// the update not replayable).
///
/// Compilation: adamw.cc is built with -ffp-contract=off, so the compiler fuses nothing on its
/// own; the fma above are explicit (std::fma, correctly rounded everywhere; on x86-64 a clone of
/// the loops built for AVX2+FMA runs when the CPU has it: the same results, faster).
///
/// Floating-point environment: bit-identity between owner and replica assumes both run with
/// the default environment (round to nearest, no flush-to-zero / denormals-are-zero). A process
/// that sets FTZ/DAZ (e.g. torch.set_flush_denormal(True)) computes subnormal intermediates
/// differently from one that does not.

#include <cstddef>
#include <cstdint>

#include "reft/aor/step_hyper.h"
#include "reft/status.h"

namespace reft::aor {

/// \brief Element type of the optimizer state. Numeric values follow GradDtype's.
enum class StateDtype : uint8_t {
  kFloat32 = 0,
  kBFloat16 = 2,  ///< torch's Adam/AdamW over bf16 parameters: bf16 moments too
};

/// \brief Bytes per element of `dtype` (4 or 2).
size_t StateDtypeSize(StateDtype dtype);

/// \brief Non-owning views of one optimizer shard's state: master weights (the parameters),
/// first and second moments, `size` elements each of `dtype` (float* or bf16 bit patterns as
/// uint16_t*). The arrays must not overlap.
struct AdamWState {
  void* param = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  size_t size = 0;
  StateDtype dtype = StateDtype::kFloat32;
};

/// \brief The fp32 per-step coefficients (see the table above).
struct AdamWCoefficients {
  float decay = 1.0f;
  float beta1 = 0.0f;
  float one_minus_beta1 = 1.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 1.0f;
  float neg_step_size = 0.0f;
  float bias_correction2_sqrt = 1.0f;
  float eps = 0.0f;
  float grad_scale = 1.0f;
  float clip_coef = 1.0f;
  float weight_decay = 0.0f;       ///< wd_f: Adam's L2 decay (l2_weight_decay), else 0
  bool lerp_first_moment = false;  ///< StepHyper::lerp_first_moment
  bool fma = false;                ///< StepHyper::fma
  bool l2_weight_decay = false;    ///< StepHyper::l2_weight_decay
  bool fused = false;              ///< StepHyper::fused_width > 0
  /// Elements at and after this index take the fused kernel's scalar-tail form of the second
  /// moment (n − n mod fused_width); SIZE_MAX when the owner does not run the fused kernel.
  size_t fused_tail_begin = static_cast<size_t>(-1);
};

/// \brief The coefficients of a valid, non-skipped `hyper` (caller validated it) for an owner
/// tensor of `n` elements (the whole state: the fused kernel's tail is at its end).
AdamWCoefficients ComputeAdamWCoefficients(const StepHyper& hyper, size_t n);

/// \brief The elementwise kernel over elements [begin, end) of `state`; `grad` points at
/// element 0 of the whole gradient (same indexing as the state). Used by AdamWUpdate; exposed
/// for callers that schedule element ranges themselves. Results do not depend on how [0, n)
/// is split into ranges.
void AdamWStepRange(const AdamWCoefficients& c, const AdamWState& state, const void* grad,
                    GradDtype dtype, size_t begin, size_t end);

/// \brief One AdamW step over the whole shard, with `threads` workers (the caller's thread is
/// one of them) on contiguous element ranges. Deterministic: every element's result is the
/// same for any `threads` and any split.
///
/// \param[in,out] state  the fp32 state, updated in place
/// \param[in] hyper      validated here; if hyper.skipped nothing is read or written
/// \param[in] grad       `n` gradients of type `dtype` (may be nullptr only when n == 0)
/// \param[in] n          must equal state.size
/// \param[in] threads    >= 1; values above n are clamped. Workers are std::threads started
///                       for this call and joined before it returns (~tens of µs, negligible
///                       next to a shard of millions of elements).
/// \return InvalidArgument (nothing changed) for an invalid hyper, a size mismatch, a null
///         array or threads < 1.
Status AdamWUpdate(const AdamWState& state, const StepHyper& hyper, const void* grad,
                   GradDtype dtype, size_t n, int threads = 1);

/// \brief `next` = `current` advanced by one AdamW step; `current` is only read. For a replica
/// that lives in snapshot slots (reftd): the state of step s−1 stays in the previous slot and
/// the updated state is written into the slot of step s. The copy and the update run block by
/// block (a few tens of KiB per array), so each element is updated while its copy is still in
/// cache: the state crosses memory once instead of twice (memcpy, then AdamWUpdate).
///
/// Bit-identical to memcpy(next, current) followed by AdamWUpdate(next, ...) for any `threads`
/// (the same kernel, AdamWStepRange, runs on the same elements). A skipped hyper copies only.
/// `current` and `next` must have the same size, and each pair of arrays must be either the
/// same array (all three: an in-place update) or disjoint.
/// \return InvalidArgument (nothing written) for an invalid hyper, size mismatches, null or
///         overlapping arrays, threads < 1.
Status AdamWUpdateInto(const AdamWState& current, const AdamWState& next,
                       const StepHyper& hyper, const void* grad, GradDtype dtype, size_t n,
                       int threads = 1);

}  // namespace reft::aor
