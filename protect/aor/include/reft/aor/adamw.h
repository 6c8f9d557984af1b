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
/// ## Exact operation order (fp32, round-to-nearest-even after every line, no FMA)
///
/// Once per step, from the StepHyper (double arithmetic, each result rounded to fp32 once):
///
///     decay      = float(1 − lr·weight_decay)
///     beta1_f    = float(beta1)          one_minus_beta1 = float(1 − beta1)
///     beta2_f    = float(beta2)          one_minus_beta2 = float(1 − beta2)
///     neg_step   = float(−(lr / (1 − beta1^step)))          (std::pow)
///     bc2_sqrt   = float(sqrt(1 − beta2^step))
///     eps_f      = float(eps)   scale_f = float(grad_scale)   clip_f = float(clip_coef)
///
/// Per element i (g converted exactly from fp32/fp16/bf16):
///
///     g = g · scale_f              unscale (1/loss_scale)
///     g = g · clip_f               global gradient clipping
///     p = p · decay                decoupled weight decay
///     m = m · beta1_f                 lerp_first_moment (torch.optim >= 2.0, ATen's lerp):
///     m = m + one_minus_beta1 · g      m = m + one_minus_beta1 · (g − m)  when it is < 0.5,
///                                      m = g − (g − m) · (1 − one_minus_beta1)  otherwise
///     v = v · beta2_f
///     v = v + (one_minus_beta2 · g) · g
///     d = sqrt(v)
///     d = d / bc2_sqrt
///     d = d + eps_f
///     p = p + (neg_step · m) / d
///
/// This mirrors torch.optim.AdamW's single-tensor CPU path line by line (mul_, add_ with alpha,
/// addcmul_, sqrt, div, add_(eps), addcdiv_) with the scalars rounded to fp32 the way ATen
/// rounds a Python scalar for a float tensor. It is not bit-identical to torch: ATen's
/// vectorised `add(alpha)` uses a fused multiply-add, its scalar tail does not, and the kernel
/// chosen depends on the CPU. With ATen's portable kernels (ATEN_CPU_CAPABILITY=default on
/// x86-64) torch and this kernel agree bit for bit; with its AVX2 kernels they differ by a few
/// ulps (docs/protection.md "AOR" gives the measured difference).
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

/// \brief Non-owning views of one optimizer shard's fp32 state: master weights, first and
/// second moments, `size` elements each. The arrays must not overlap.
struct AdamWState {
  float* param = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  size_t size = 0;
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
  bool lerp_first_moment = false;  ///< StepHyper::lerp_first_moment
};

/// \brief The coefficients of a valid, non-skipped `hyper` (caller validated it).
AdamWCoefficients ComputeAdamWCoefficients(const StepHyper& hyper);

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
