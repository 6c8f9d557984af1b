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
// Where an owner's kernels fuse a multiply-add (StepHyper::fma), the loops say so with an
// explicit std::fma, which rounds once on every target; nothing else is ever fused.

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

AdamWCoefficients ComputeAdamWCoefficients(const StepHyper& h, size_t n) {
  // Double arithmetic, each coefficient rounded to fp32 once: what torch does with Python-float
  // hyper-parameters (computed in double by the interpreter, then cast by ATen to the float
  // tensor's compute type).
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  // torch >= 2.0's per-op Adam computes `bias_correction2 ** 0.5` in Python (C's pow); torch
  // 1.x (math.sqrt) and the fused kernel (std::sqrt) take the square root.
  const bool python_pow = h.lerp_first_moment && h.fused_width == 0;
  AdamWCoefficients c;
  c.decay = h.l2_weight_decay ? 1.0f : static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.weight_decay = h.l2_weight_decay ? static_cast<float>(h.weight_decay) : 0.0f;
  c.beta1 = static_cast<float>(h.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  c.bias_correction2_sqrt = static_cast<float>(python_pow ? std::pow(bias_correction2, 0.5)
                                                          : std::sqrt(bias_correction2));
  c.eps = static_cast<float>(h.eps);
  c.grad_scale = static_cast<float>(h.grad_scale);
  c.clip_coef = static_cast<float>(h.clip_coef);
  c.lerp_first_moment = h.lerp_first_moment;
  c.fma = h.fma;
  c.l2_weight_decay = h.l2_weight_decay;
  c.fused = h.fused_width > 0;
  if (c.fused) c.fused_tail_begin = n - n % h.fused_width;
  return c;
}

namespace {

// The first-moment update, one template instance per form so that the loop stays branch-free.
enum class FirstMoment { kMulAdd, kLerpSmallWeight, kLerpLargeWeight };
// Where the owner fuses multiply-adds: nowhere; in ATen's per-op kernels and the fused kernel's
// vector body; in the fused kernel's scalar tail (its second moment fuses the other product).
enum class Fused { kNone, kBody, kFusedTail };

// a·b + c, rounded once when the owner fuses it and twice otherwise.
template <bool kFuse>
inline float MulAdd(float a, float b, float c) {
  if constexpr (kFuse) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;  // -ffp-contract=off: two roundings
  }
}

// bf16 state in torch's per-op form: every op stores its result as bf16 (nearest even).
template <bool kRound>
inline float R(float x) {
  if constexpr (kRound) {
    return BFloat16ToFloat(FloatToBFloat16(x));
  } else {
    return x;
  }
}

// The elementwise update on fp32 values. One statement per rounding, in the order of adamw.h;
// the compiler may vectorise it (IEEE +, ·, /, sqrt and fma are correctly rounded in every
// lane, so vector and scalar iterations agree) but may not reassociate or fuse.
template <FirstMoment kFirst, Fused kFused, bool kL2, bool kRound>
inline __attribute__((always_inline)) void UpdateLoop(const AdamWCoefficients& c,
                                                      float* __restrict param,
                                                      float* __restrict exp_avg,
                                                      float* __restrict exp_avg_sq,
                                                      const float* __restrict grad, size_t n) {
  constexpr bool kFma = kFused != Fused::kNone;
  const float decay = c.decay;
  const float weight_decay = c.weight_decay;
  const float beta1 = c.beta1;
  const float one_minus_beta1 = c.one_minus_beta1;
  const float beta2 = c.beta2;
  const float one_minus_beta2 = c.one_minus_beta2;
  const float neg_step_size = c.neg_step_size;
  const float bc2_sqrt = c.bias_correction2_sqrt;
  const float eps = c.eps;
  const float grad_scale = c.grad_scale;
  const float clip_coef = c.clip_coef;
  const float lerp_complement = 1.0f - one_minus_beta1;      // ATen: opmath_t(1) - weight
  const float neg_lerp_complement = one_minus_beta1 - 1.0f;  // its fused kernel: weight - 1
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    g = g * grad_scale;
    g = g * clip_coef;
    float p = param[i];
    if constexpr (kL2) g = R<kRound>(MulAdd<kFma>(p, weight_decay, g));
    p = R<kRound>(p * decay);
    float m = exp_avg[i];
    if constexpr (kFirst == FirstMoment::kMulAdd) {
      m = R<kRound>(m * beta1);  // mul_(beta1) then add_(grad, alpha): two ops
      m = MulAdd<kFma>(one_minus_beta1, g, m);
    } else if constexpr (kFirst == FirstMoment::kLerpSmallWeight) {
      const float diff = g - m;
      m = MulAdd<kFma>(one_minus_beta1, diff, m);
    } else {
      const float diff = g - m;
      if constexpr (kFma) {
        m = std::fma(neg_lerp_complement, diff, g);
      } else {
        m = g - diff * lerp_complement;
      }
    }
    m = R<kRound>(m);
    float v = exp_avg_sq[i];
    if constexpr (kFused == Fused::kFusedTail) {
      v = std::fma(v, beta2, (one_minus_beta2 * g) * g);
    } else {
      v = MulAdd<kFma>(one_minus_beta2 * g, g, R<kRound>(v * beta2));
    }
    v = R<kRound>(v);
    float d = R<kRound>(std::sqrt(v));
    d = R<kRound>(d / bc2_sqrt);
    d = R<kRound>(d + eps);
    p = R<kRound>(p + (neg_step_size * m) / d);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

using LoopFn = void (*)(const AdamWCoefficients&, float*, float*, float*, const float*, size_t);

template <FirstMoment kFirst, Fused kFused, bool kL2, bool kRound>
void LoopPortable(const AdamWCoefficients& c, float* param, float* exp_avg, float* exp_avg_sq,
                  const float* grad, size_t n) {
  UpdateLoop<kFirst, kFused, kL2, kRound>(c, param, exp_avg, exp_avg_sq, grad, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The loops again, built for AVX2 + FMA: 8-lane vectors, and std::fma one instruction (in the
// portable build it is a libm call per element). Same results bit for bit: -ffp-contract=off
// still fuses nothing that is not written std::fma, and every lane rounds like scalar code.
// Picked at run time.
template <FirstMoment kFirst, Fused kFused, bool kL2, bool kRound>
__attribute__((target("avx2,fma"))) void LoopAvx2Fma(const AdamWCoefficients& c, float* param,
                                                     float* exp_avg, float* exp_avg_sq,
                                                     const float* grad, size_t n) {
  UpdateLoop<kFirst, kFused, kL2, kRound>(c, param, exp_avg, exp_avg_sq, grad, n);
}
bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <FirstMoment kFirst, Fused kFused, bool kL2, bool kRound>
LoopFn PickLoop() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (CpuHasAvx2Fma()) return &LoopAvx2Fma<kFirst, kFused, kL2, kRound>;
#endif
  return &LoopPortable<kFirst, kFused, kL2, kRound>;
}

template <FirstMoment kFirst, Fused kFused, bool kL2>
LoopFn PickRound(bool round) {
  return round ? PickLoop<kFirst, kFused, kL2, true>() : PickLoop<kFirst, kFused, kL2, false>();
}

template <FirstMoment kFirst, Fused kFused>
LoopFn PickL2(bool l2, bool round) {
  return l2 ? PickRound<kFirst, kFused, true>(round) : PickRound<kFirst, kFused, false>(round);
}

template <FirstMoment kFirst>
LoopFn PickFused(Fused fused, bool l2, bool round) {
  switch (fused) {
    case Fused::kNone:
      return PickL2<kFirst, Fused::kNone>(l2, round);
    case Fused::kBody:
      return PickL2<kFirst, Fused::kBody>(l2, round);
    case Fused::kFusedTail:
      break;
  }
  return PickL2<kFirst, Fused::kFusedTail>(l2, round);
}

LoopFn Pick(const AdamWCoefficients& c, bool tail, bool round) {
  const Fused fused = !c.fma ? Fused::kNone : tail ? Fused::kFusedTail : Fused::kBody;
  const bool l2 = c.l2_weight_decay;
  if (!c.lerp_first_moment) return PickFused<FirstMoment::kMulAdd>(fused, l2, round);
  if (std::fabs(c.one_minus_beta1) < 0.5f) {  // ATen's is_lerp_weight_small
    return PickFused<FirstMoment::kLerpSmallWeight>(fused, l2, round);
  }
  return PickFused<FirstMoment::kLerpLargeWeight>(fused, l2, round);
}

// Elements [begin, end) of the owner's tensor as fp32 arrays that point at element `begin`:
// the body form up to the fused kernel's tail, the tail form from there.
void RunLoops(const AdamWCoefficients& c, bool round, float* p, float* m, float* v, const float* g,
              size_t begin, size_t end) {
  const size_t split = std::clamp(c.fused_tail_begin, begin, end);
  if (split > begin) Pick(c, false, round)(c, p, m, v, g, split - begin);
  if (end > split) {
    const size_t k = split - begin;
    Pick(c, true, round)(c, p + k, m + k, v + k, g + k, end - split);
  }
}

// 16-bit gradients and bf16 state are widened (exactly) block by block into stack buffers and
// go through the same fp32 loops, so there is one copy of the arithmetic for all dtypes. The
// conversions (integer bit operations, exact) get an AVX2 clone too where the compiler can.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REFT_AOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define REFT_AOR_CLONES
#endif
constexpr size_t kBlock = 2048;

REFT_AOR_CLONES void WidenGrad(const void* grad, GradDtype dtype, size_t at, size_t len,
                               float* out) {
  const auto* g16 = static_cast<const uint16_t*>(grad) + at;
  switch (dtype) {
    case GradDtype::kFloat32:
      std::memcpy(out, static_cast<const float*>(grad) + at, len * sizeof(float));
      break;
    case GradDtype::kFloat16:
      for (size_t i = 0; i < len; ++i) out[i] = HalfToFloat(g16[i]);
      break;
    case GradDtype::kBFloat16:
      for (size_t i = 0; i < len; ++i) out[i] = BFloat16ToFloat(g16[i]);
      break;
  }
}

// bf16 state, elements [b, b + len): widened, updated in fp32 (every op rounded to bf16 in the
// per-op form, only the stores in the fused kernel's), narrowed back.
REFT_AOR_CLONES void UpdateBf16State(const AdamWCoefficients& c, const AdamWState& s, float* g,
                                     size_t b, size_t len) {
  float p[kBlock], m[kBlock], v[kBlock];
  auto* sp = static_cast<uint16_t*>(s.param) + b;
  auto* sm = static_cast<uint16_t*>(s.exp_avg) + b;
  auto* sv = static_cast<uint16_t*>(s.exp_avg_sq) + b;
  for (size_t i = 0; i < len; ++i) {
    p[i] = BFloat16ToFloat(sp[i]);
    m[i] = BFloat16ToFloat(sm[i]);
    v[i] = BFloat16ToFloat(sv[i]);
    // The trainer unscales and clips the bf16 gradient with torch ops: bf16 results.
    g[i] = R<true>(R<true>(g[i] * c.grad_scale) * c.clip_coef);
  }
  AdamWCoefficients unit = c;
  unit.grad_scale = 1.0f;
  unit.clip_coef = 1.0f;
  RunLoops(unit, /*round=*/!c.fused, p, m, v, g, b, b + len);
  for (size_t i = 0; i < len; ++i) {
    sp[i] = FloatToBFloat16(p[i]);
    sm[i] = FloatToBFloat16(m[i]);
    sv[i] = FloatToBFloat16(v[i]);
  }
}

}  // namespace

size_t StateDtypeSize(StateDtype dtype) { return dtype == StateDtype::kFloat32 ? 4 : 2; }

void AdamWStepRange(const AdamWCoefficients& c, const AdamWState& s, const void* grad,
                    GradDtype dtype, size_t begin, size_t end) {
  if (begin >= end) return;
  const bool fp32_state = s.dtype == StateDtype::kFloat32;
  if (fp32_state && dtype == GradDtype::kFloat32) {
    RunLoops(c, false, static_cast<float*>(s.param) + begin, static_cast<float*>(s.exp_avg) + begin,
             static_cast<float*>(s.exp_avg_sq) + begin, static_cast<const float*>(grad) + begin,
             begin, end);
    return;
  }
  float g[kBlock];
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t len = std::min(kBlock, end - b);
    WidenGrad(grad, dtype, b, len, g);
    if (fp32_state) {
      RunLoops(c, false, static_cast<float*>(s.param) + b, static_cast<float*>(s.exp_avg) + b,
               static_cast<float*>(s.exp_avg_sq) + b, g, b, b + len);
    } else {
      UpdateBf16State(c, s, g, b, len);
    }
  }
}

namespace {

Status CheckArgs(const StepHyper& hyper, GradDtype dtype, const AdamWState& state, size_t n,
                 int threads) {
  REFT_RETURN_NOT_OK(ValidateStepHyper(hyper));
  if (state.dtype != StateDtype::kFloat32 && state.dtype != StateDtype::kBFloat16) {
    return Status::InvalidArgument("adamw: unknown state dtype " +
                                   std::to_string(static_cast<int>(state.dtype)));
  }
  const size_t size = state.size;
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
// of `esize`-byte elements, so workers never write the same cache line; the caller's thread
// takes the last.
template <typename Fn>
void ParallelRanges(size_t n, size_t esize, int threads, const Fn& fn) {
  const size_t kAlign = 64 / esize;
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

// [a, a+bytes) and [b, b+bytes) are either the same array or disjoint.
bool SameOrDisjoint(const uint8_t* a, const uint8_t* b, size_t bytes) {
  return a == b || a + bytes <= b || b + bytes <= a;
}

}  // namespace

Status AdamWUpdate(const AdamWState& state, const StepHyper& hyper, const void* grad,
                   GradDtype dtype, size_t n, int threads) {
  REFT_RETURN_NOT_OK(CheckArgs(hyper, dtype, state, n, threads));
  if (hyper.skipped || n == 0) return Status::OK();
  if (grad == nullptr || HasNull(state)) {
    return Status::InvalidArgument("adamw: null gradient or state array");
  }
  const AdamWCoefficients c = ComputeAdamWCoefficients(hyper, n);
  ParallelRanges(n, StateDtypeSize(state.dtype), threads, [&](size_t begin, size_t end) {
    AdamWStepRange(c, state, grad, dtype, begin, end);
  });
  return Status::OK();
}

Status AdamWUpdateInto(const AdamWState& current, const AdamWState& next,
                       const StepHyper& hyper, const void* grad, GradDtype dtype, size_t n,
                       int threads) {
  REFT_RETURN_NOT_OK(CheckArgs(hyper, dtype, current, n, threads));
  if (next.size != current.size || next.dtype != current.dtype) {
    return Status::InvalidArgument("adamw: destination state of " + std::to_string(next.size) +
                                   " elements for a source of " + std::to_string(current.size) +
                                   (next.dtype != current.dtype ? " of another dtype" : ""));
  }
  if (n == 0) return Status::OK();
  if (HasNull(current) || HasNull(next) || (!hyper.skipped && grad == nullptr)) {
    return Status::InvalidArgument("adamw: null gradient or state array");
  }
  const size_t esize = StateDtypeSize(current.dtype);
  const uint8_t* src[3] = {static_cast<const uint8_t*>(current.param),
                           static_cast<const uint8_t*>(current.exp_avg),
                           static_cast<const uint8_t*>(current.exp_avg_sq)};
  uint8_t* dst[3] = {static_cast<uint8_t*>(next.param), static_cast<uint8_t*>(next.exp_avg),
                     static_cast<uint8_t*>(next.exp_avg_sq)};
  for (const uint8_t* s : src) {
    for (const uint8_t* d : dst) {
      if (!SameOrDisjoint(s, d, n * esize)) {
        return Status::InvalidArgument("adamw: source and destination state arrays overlap");
      }
    }
  }
  const bool in_place = src[0] == dst[0] && src[1] == dst[1] && src[2] == dst[2];
  if (!in_place && (src[0] == dst[0] || src[1] == dst[1] || src[2] == dst[2])) {
    return Status::InvalidArgument("adamw: source and destination share only some arrays");
  }
  AdamWCoefficients c;
  if (!hyper.skipped) c = ComputeAdamWCoefficients(hyper, n);
  ParallelRanges(n, esize, threads, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kIntoBlock) {
      const size_t e = std::min(end, b + kIntoBlock);
      if (!in_place) {
        for (int a = 0; a < 3; ++a) {
          std::memcpy(dst[a] + b * esize, src[a] + b * esize, (e - b) * esize);
        }
      }
      if (!hyper.skipped) AdamWStepRange(c, next, grad, dtype, b, e);
    }
  });
  return Status::OK();
}

}  // namespace reft::aor
