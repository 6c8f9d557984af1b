// The AdamW kernel: the only translation unit that does the update's floating-point math.
//
// Compiled with -ffp-contract=off (see ../CMakeLists.txt). Why: `m + (1-β1)·g` and
// `p + (−step·m)/d` are textbook candidates for fused multiply-add. Whether a compiler fuses
// them depends on the compiler (clang contracts within a statement by default, GCC in GNU mode
// across statements), the target (-mfma, -march=native, aarch64 always has FMA) and the
// surrounding code after inlining. If the owner's and the replica's updates were compiled in
// two places (an inline header used from two TUs, or two binaries with different flags),
// one could be fused and the other not, and they would differ in the last bit. Keeping the
// math in this one TU, out of line, with contraction off and without -ffast-math, pins every
// rounding to the order documented in adamw.h for every caller and every split of the range.
// -fno-math-errno is also set here: it only lets std::sqrt compile to the sqrt instruction
// (which is IEEE correctly rounded) instead of a call that may set errno; results are equal.
// -fvect-cost-model=dynamic lets -O2 vectorise the loops; SIMD lanes round exactly like scalar
// code, so vector body and scalar tail agree and the split of [0, n) does not matter.

#include "reft/aor/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "reft/aor/half.h"

namespace reft::aor {

AdamWCoefficients ComputeAdamWCoefficients(const StepHyper& h) {
  // Double arithmetic, each coefficient rounded to fp32 once: what torch does with Python-float
  // hyper-parameters (computed in double by the interpreter, then cast by ATen to the float
  // tensor's compute type).
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  AdamWCoefficients c;
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.beta1 = static_cast<float>(h.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(h.eps);
  c.grad_scale = static_cast<float>(h.grad_scale);
  c.clip_coef = static_cast<float>(h.clip_coef);
  c.lerp_first_moment = h.lerp_first_moment;
  return c;
}

namespace {

// The first-moment update, one template instance per form so that the loop stays branch-free.
enum class FirstMoment { kMulAdd, kLerpSmallWeight, kLerpLargeWeight };

// The elementwise update on fp32 gradients. One statement per rounding, in the order of
// adamw.h; the compiler may vectorise it (IEEE +, ·, /, sqrt are correctly rounded in every
// lane, so vector and scalar iterations agree) but may not reassociate or fuse.
template <FirstMoment kForm>
void UpdateFp32Form(const AdamWCoefficients& c, float* __restrict param,
                    float* __restrict exp_avg, float* __restrict exp_avg_sq,
                    const float* __restrict grad, size_t n) {
  const float decay = c.decay;
  const float beta1 = c.beta1;
  const float one_minus_beta1 = c.one_minus_beta1;
  const float beta2 = c.beta2;
  const float one_minus_beta2 = c.one_minus_beta2;
  const float neg_step_size = c.neg_step_size;
  const float bc2_sqrt = c.bias_correction2_sqrt;
  const float eps = c.eps;
  const float grad_scale = c.grad_scale;
  const float clip_coef = c.clip_coef;
  const float lerp_complement = 1.0f - one_minus_beta1;  // ATen: opmath_t(1) - weight
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    g = g * grad_scale;
    g = g * clip_coef;
    float p = param[i];
    p = p * decay;
    float m = exp_avg[i];
    if constexpr (kForm == FirstMoment::kMulAdd) {
      m = m * beta1;
      m = m + one_minus_beta1 * g;
    } else if constexpr (kForm == FirstMoment::kLerpSmallWeight) {
      const float diff = g - m;
      m = m + one_minus_beta1 * diff;
    } else {
      const float diff = g - m;
      m = g - diff * lerp_complement;
    }
    float v = exp_avg_sq[i];
    v = v * beta2;
    v = v + (one_minus_beta2 * g) * g;
    float d = std::sqrt(v);
    d = d / bc2_sqrt;
    d = d + eps;
    p = p + (neg_step_size * m) / d;
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

void UpdateFp32(const AdamWCoefficients& c, float* param, float* exp_avg, float* exp_avg_sq,
                const float* grad, size_t n) {
  if (!c.lerp_first_moment) {
    UpdateFp32Form<FirstMoment::kMulAdd>(c, param, exp_avg, exp_avg_sq, grad, n);
  } else if (std::fabs(c.one_minus_beta1) < 0.5f) {  // ATen's is_lerp_weight_small
    UpdateFp32Form<FirstMoment::kLerpSmallWeight>(c, param, exp_avg, exp_avg_sq, grad, n);
  } else {
    UpdateFp32Form<FirstMoment::kLerpLargeWeight>(c, param, exp_avg, exp_avg_sq, grad, n);
  }
}

// 16-bit gradients are widened (exactly) block by block into a stack buffer and then go
// through the same fp32 loop, so there is one copy of the arithmetic for all dtypes.
constexpr size_t kBlock = 2048;

template <float (*Widen)(uint16_t)>
void Update16(const AdamWCoefficients& c, const AdamWState& s, const uint16_t* grad, size_t begin,
              size_t end) {
  float g[kBlock];
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t len = std::min(kBlock, end - b);
    for (size_t i = 0; i < len; ++i) g[i] = Widen(grad[b + i]);
    UpdateFp32(c, s.param + b, s.exp_avg + b, s.exp_avg_sq + b, g, len);
  }
}

}  // namespace

void AdamWStepRange(const AdamWCoefficients& c, const AdamWState& s, const void* grad,
                    GradDtype dtype, size_t begin, size_t end) {
  if (begin >= end) return;
  switch (dtype) {
    case GradDtype::kFloat32:
      UpdateFp32(c, s.param + begin, s.exp_avg + begin, s.exp_avg_sq + begin,
                 static_cast<const float*>(grad) + begin, end - begin);
      break;
    case GradDtype::kFloat16:
      Update16<HalfToFloat>(c, s, static_cast<const uint16_t*>(grad), begin, end);
      break;
    case GradDtype::kBFloat16:
      Update16<BFloat16ToFloat>(c, s, static_cast<const uint16_t*>(grad), begin, end);
      break;
  }
}

namespace {

Status CheckArgs(const StepHyper& hyper, GradDtype dtype, size_t n, size_t size, int threads) {
  REFT_RETURN_NOT_OK(ValidateStepHyper(hyper));
  if (dtype != GradDtype::kFloat32 && dtype != GradDtype::kFloat16 &&
      dtype != GradDtype::kBFloat16) {
    return Status::InvalidArgument("adamw: unknown gradient dtype " +
                                   std::to_string(static_cast<int>(dtype)));
  }
  if (n != size) {
    return Status::InvalidArgument("adamw: " + std::to_string(n) + " gradients for a state of " +
                                   std::to_string(size) + " elements");
  }
  if (threads < 1) {
    return Status::InvalidArgument("adamw: threads = " + std::to_string(threads) +
                                   " (must be >= 1)");
  }
  return Status::OK();
}

bool HasNull(const AdamWState& s) {
  return s.param == nullptr || s.exp_avg == nullptr || s.exp_avg_sq == nullptr;
}

// Runs fn(begin, end) over [0, n) split into `threads` contiguous ranges of whole 64-byte lines
// (16 floats), so workers never write the same cache line; the caller's thread takes the last.
template <typename Fn>
void ParallelRanges(size_t n, int threads, const Fn& fn) {
  constexpr size_t kAlign = 16;
  const size_t workers = std::min<size_t>(static_cast<size_t>(threads), (n + kAlign - 1) / kAlign);
  const size_t per = ((n + workers - 1) / workers + kAlign - 1) / kAlign * kAlign;
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  size_t begin = 0;
  for (size_t w = 0; w + 1 < workers && begin < n; ++w, begin += per) {
    const size_t end = std::min(n, begin + per);
    try {
      pool.emplace_back([&fn, begin, end] { fn(begin, end); });
    } catch (const std::system_error&) {
      fn(begin, end);  // no thread available: do it here
    }
  }
  fn(std::min(begin, n), n);
  for (auto& t : pool) t.join();
}

// Elements copied and then updated while they are still in cache: 3 arrays x 8192 floats =
// 96 KiB, well inside a core's L2, so the update re-reads the copy from cache, not DRAM.
constexpr size_t kIntoBlock = 8192;

// [a, a+n) and [b, b+n) floats are either the same array or disjoint.
bool SameOrDisjoint(const float* a, const float* b, size_t n) {
  return a == b || a + n <= b || b + n <= a;
}

}  // namespace

Status AdamWUpdate(const AdamWState& state, const StepHyper& hyper, const void* grad,
                   GradDtype dtype, size_t n, int threads) {
  REFT_RETURN_NOT_OK(CheckArgs(hyper, dtype, n, state.size, threads));
  if (hyper.skipped || n == 0) return Status::OK();
  if (grad == nullptr || HasNull(state)) {
    return Status::InvalidArgument("adamw: null gradient or state array");
  }
  const AdamWCoefficients c = ComputeAdamWCoefficients(hyper);
  ParallelRanges(n, threads, [&](size_t begin, size_t end) {
    AdamWStepRange(c, state, grad, dtype, begin, end);
  });
  return Status::OK();
}

Status AdamWUpdateInto(const AdamWState& current, const AdamWState& next,
                       const StepHyper& hyper, const void* grad, GradDtype dtype, size_t n,
                       int threads) {
  REFT_RETURN_NOT_OK(CheckArgs(hyper, dtype, n, current.size, threads));
  if (next.size != current.size) {
    return Status::InvalidArgument("adamw: destination state of " + std::to_string(next.size) +
                                   " elements for a source of " + std::to_string(current.size));
  }
  if (n == 0) return Status::OK();
  if (HasNull(current) || HasNull(next) || (!hyper.skipped && grad == nullptr)) {
    return Status::InvalidArgument("adamw: null gradient or state array");
  }
  const float* src[3] = {current.param, current.exp_avg, current.exp_avg_sq};
  float* dst[3] = {next.param, next.exp_avg, next.exp_avg_sq};
  for (const float* s : src) {
    for (const float* d : dst) {
      if (!SameOrDisjoint(s, d, n)) {
        return Status::InvalidArgument("adamw: source and destination state arrays overlap");
      }
    }
  }
  const bool in_place = src[0] == dst[0] && src[1] == dst[1] && src[2] == dst[2];
  if (!in_place && (src[0] == dst[0] || src[1] == dst[1] || src[2] == dst[2])) {
    return Status::InvalidArgument("adamw: source and destination share only some arrays");
  }
  AdamWCoefficients c;
  if (!hyper.skipped) c = ComputeAdamWCoefficients(hyper);
  ParallelRanges(n, threads, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kIntoBlock) {
      const size_t e = std::min(end, b + kIntoBlock);
      if (!in_place) {
        for (int a = 0; a < 3; ++a) std::memcpy(dst[a] + b, src[a] + b, (e - b) * sizeof(float));
      }
      if (!hyper.skipped) AdamWStepRange(c, next, grad, dtype, b, e);
    }
  });
  return Status::OK();
}

}  // namespace reft::aor
