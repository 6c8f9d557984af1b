// The AdamW kernel: (1) it computes exactly the operation order adamw.h documents (an
// independent scalar transcription in this file, compiled without FMA contraction, must match
// bit for bit); (2) it is AdamW (close to a textbook float64 AdamW over 300 steps); (3) results
// do not depend on threads or range splits; (4) bad arguments change nothing.

#include "reft/aor/adamw.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "aor_sim.h"
#include "reft/aor/half.h"
#include "test_support.h"

namespace reft::aor {
namespace {

using testing::GradMode;
using testing::StepInput;
using testing::TrainingLoop;

float Widen(const StepInput& in, size_t i) {
  uint16_t b;
  switch (in.dtype) {
    case GradDtype::kFloat32: {
      float f;
      std::memcpy(&f, &in.grad[4 * i], 4);
      return f;
    }
    case GradDtype::kFloat16:
      std::memcpy(&b, &in.grad[2 * i], 2);
      return HalfToFloat(b);
    case GradDtype::kBFloat16:
      std::memcpy(&b, &in.grad[2 * i], 2);
      return BFloat16ToFloat(b);
  }
  return 0;
}

/// a·b + c rounded once (`fused`) or twice: this TU is built with -ffp-contract=off too.
float MulAdd(bool fused, float a, float b, float c) {
  return fused ? std::fma(a, b, c) : a * b + c;
}

/// adamw.h's table, transcribed independently.
void DocumentedStep(const StepHyper& h, const StepInput& in, std::vector<float>& P,
                    std::vector<float>& M, std::vector<float>& V) {
  if (h.skipped) return;
  const double step = static_cast<double>(h.step);
  const float decay = h.l2_weight_decay ? 1.0f : static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float wd = static_cast<float>(h.weight_decay);
  const float b1 = static_cast<float>(h.beta1), omb1 = static_cast<float>(1.0 - h.beta1);
  const float b2 = static_cast<float>(h.beta2), omb2 = static_cast<float>(1.0 - h.beta2);
  const float neg_step = static_cast<float>(-(h.lr / (1.0 - std::pow(h.beta1, step))));
  const double bc2d = 1.0 - std::pow(h.beta2, step);
  const bool python_pow = h.lerp_first_moment && h.fused_width == 0;
  const float bc2 = static_cast<float>(python_pow ? std::pow(bc2d, 0.5) : std::sqrt(bc2d));
  const float eps = static_cast<float>(h.eps);
  const size_t n = P.size();
  const size_t tail = h.fused_width > 0 ? n - n % h.fused_width : n;
  for (size_t i = 0; i < n; ++i) {
    float g = Widen(in, i);
    g = g * static_cast<float>(h.grad_scale);
    g = g * static_cast<float>(h.clip_coef);
    if (h.l2_weight_decay) g = MulAdd(h.fma, P[i], wd, g);
    float p = P[i] * decay;
    float m = M[i];
    if (!h.lerp_first_moment) {
      m = MulAdd(h.fma, omb1, g, m * b1);
    } else if (omb1 < 0.5f) {  // ATen's lerp: start + weight * (end - start)
      m = MulAdd(h.fma, omb1, g - m, m);
    } else if (h.fma) {  // its fused form: end + (weight - 1) * (end - start)
      m = std::fma(omb1 - 1.0f, g - m, g);
    } else {  // end - (end - start) * (1 - weight)
      m = g - (g - m) * (1.0f - omb1);
    }
    float v;
    if (h.fma && i >= tail) {  // the fused kernel's scalar tail
      v = std::fma(V[i], b2, (omb2 * g) * g);
    } else {
      v = MulAdd(h.fma, omb2 * g, g, V[i] * b2);
    }
    float d = std::sqrt(v) / bc2 + eps;
    P[i] = p + (neg_step * m) / d;
    M[i] = m;
    V[i] = v;
  }
}

TEST_CASE("AdamW kernel follows the documented operation order bit for bit", "[aor][adamw]") {
  const GradMode mode = GENERATE(GradMode::kFp32, GradMode::kFp16, GradMode::kBf16);
  // First moment: mul-add (torch 1.x), lerp with a small weight (beta1 0.9, torch.optim >= 2.0)
  // and lerp with a large one (beta1 0.3: ATen's other lerp branch).
  const int form = GENERATE(0, 1, 2);
  // The owner fuses multiply-adds (torch >= 2 on AVX2/AVX-512), runs torch's fused kernel
  // (width 8: a tail of n mod 8 = 5 elements), and Adam's L2 decay instead of AdamW's.
  const bool fma = GENERATE(false, true);
  const int width = GENERATE(0, 8);
  const int fused_width = form == 0 ? 0 : width;  // the fused kernel always lerps
  const bool l2 = GENERATE(false, true);
  const uint64_t seed = reft::testing::TestSeed(5);
  INFO("mode " << GradModeName(mode) << " form " << form << " fma " << fma << " fused_width "
               << fused_width << " l2 " << l2 << " seed " << seed);
  const size_t n = 4133;
  TrainingLoop loop(mode, n, 200, seed);
  std::vector<float> p, m, v;
  loop.InitialState(&p, &m, &v);
  std::vector<float> rp = p, rm = m, rv = v;
  for (int it = 0; it < 200; ++it) {
    StepInput in = loop.Next();
    in.hyper.lerp_first_moment = form > 0;
    if (form == 2) in.hyper.beta1 = 0.3;
    in.hyper.fma = fma;
    in.hyper.fused_width = static_cast<uint8_t>(fused_width);
    in.hyper.l2_weight_decay = l2;
    REQUIRE(AdamWUpdate({p.data(), m.data(), v.data(), n}, in.hyper, in.grad.data(), in.dtype, n, 3)
                .ok());
    DocumentedStep(in.hyper, in, rp, rm, rv);
  }
  REQUIRE(std::memcmp(p.data(), rp.data(), 4 * n) == 0);
  REQUIRE(std::memcmp(m.data(), rm.data(), 4 * n) == 0);
  REQUIRE(std::memcmp(v.data(), rv.data(), 4 * n) == 0);
}

/// bf16 state (adamw.h): widened, the documented order in fp32 with a bf16 rounding after every
/// line (torch's per-op kernels, `fused_width` 0) or only at the stores (its fused kernel).
void DocumentedStepBf16(const StepHyper& h, const StepInput& in, std::vector<uint16_t>& P,
                        std::vector<uint16_t>& M, std::vector<uint16_t>& V) {
  if (h.skipped) return;
  const bool each_op = h.fused_width == 0;
  auto R = [each_op](float x) { return each_op ? BFloat16ToFloat(FloatToBFloat16(x)) : x; };
  auto R16 = [](float x) { return BFloat16ToFloat(FloatToBFloat16(x)); };
  const double step = static_cast<double>(h.step);
  const float decay = h.l2_weight_decay ? 1.0f : static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float wd = static_cast<float>(h.weight_decay);
  const float b1 = static_cast<float>(h.beta1), omb1 = static_cast<float>(1.0 - h.beta1);
  const float b2 = static_cast<float>(h.beta2), omb2 = static_cast<float>(1.0 - h.beta2);
  const float neg_step = static_cast<float>(-(h.lr / (1.0 - std::pow(h.beta1, step))));
  const double bc2d = 1.0 - std::pow(h.beta2, step);
  const float bc2 =
      static_cast<float>(each_op && h.lerp_first_moment ? std::pow(bc2d, 0.5) : std::sqrt(bc2d));
  const float eps = static_cast<float>(h.eps);
  const size_t n = P.size();
  const size_t tail = h.fused_width > 0 ? n - n % h.fused_width : n;
  for (size_t i = 0; i < n; ++i) {
    float g =
        R16(R16(Widen(in, i) * static_cast<float>(h.grad_scale)) * static_cast<float>(h.clip_coef));
    float p = BFloat16ToFloat(P[i]);
    if (h.l2_weight_decay) g = R(MulAdd(h.fma, p, wd, g));
    p = R(p * decay);
    float m = BFloat16ToFloat(M[i]);
    if (!h.lerp_first_moment) {
      m = MulAdd(h.fma, omb1, g, R(m * b1));
    } else if (omb1 < 0.5f) {
      m = MulAdd(h.fma, omb1, g - m, m);
    } else if (h.fma) {
      m = std::fma(omb1 - 1.0f, g - m, g);
    } else {
      m = g - (g - m) * (1.0f - omb1);
    }
    m = R(m);
    const float v0 = BFloat16ToFloat(V[i]);
    float v = h.fma && i >= tail ? std::fma(v0, b2, (omb2 * g) * g)
                                 : MulAdd(h.fma, omb2 * g, g, R(v0 * b2));
    v = R(v);
    const float d = R(R(R(std::sqrt(v)) / bc2) + eps);
    P[i] = FloatToBFloat16(R(p + (neg_step * m) / d));
    M[i] = FloatToBFloat16(m);
    V[i] = FloatToBFloat16(v);
  }
}

TEST_CASE("AdamW kernel on bf16 state follows the documented rounding bit for bit",
          "[aor][adamw]") {
  const bool fma = GENERATE(false, true);
  const int fused_width = GENERATE(0, 16);
  const bool l2 = GENERATE(false, true);
  const uint64_t seed = reft::testing::TestSeed(15);
  INFO("fma " << fma << " fused_width " << fused_width << " l2 " << l2 << " seed " << seed);
  const size_t n = 4133;
  TrainingLoop loop(GradMode::kBf16, n, 60, seed);
  std::vector<float> p0, m0, v0;
  loop.InitialState(&p0, &m0, &v0);
  std::vector<uint16_t> p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = FloatToBFloat16(p0[i]);
    m[i] = FloatToBFloat16(m0[i]);
    v[i] = FloatToBFloat16(v0[i]);
  }
  std::vector<uint16_t> rp = p, rm = m, rv = v;
  std::vector<uint16_t> ip = p, im = m, iv = v;  // AdamWUpdateInto, slot to slot
  for (int it = 0; it < 60; ++it) {
    StepInput in = loop.Next();
    in.hyper.lerp_first_moment = true;
    in.hyper.fma = fma;
    in.hyper.fused_width = static_cast<uint8_t>(fused_width);
    in.hyper.l2_weight_decay = l2;
    const AdamWState st{p.data(), m.data(), v.data(), n, StateDtype::kBFloat16};
    REQUIRE(AdamWUpdate(st, in.hyper, in.grad.data(), in.dtype, n, 3).ok());
    std::vector<uint16_t> np(n), nm(n), nv(n);
    const AdamWState from{ip.data(), im.data(), iv.data(), n, StateDtype::kBFloat16};
    const AdamWState into{np.data(), nm.data(), nv.data(), n, StateDtype::kBFloat16};
    REQUIRE(AdamWUpdateInto(from, into, in.hyper, in.grad.data(), in.dtype, n, 2).ok());
    ip.swap(np);
    im.swap(nm);
    iv.swap(nv);
    DocumentedStepBf16(in.hyper, in, rp, rm, rv);
  }
  CHECK(p == rp);
  CHECK(m == rm);
  CHECK(v == rv);
  CHECK(ip == rp);
  CHECK(im == rm);
  CHECK(iv == rv);
  const std::vector<uint16_t> start(n, FloatToBFloat16(0.0f));
  CHECK(m != start);  // the run moved the state
}

TEST_CASE("AdamW kernel: each form of the owner's kernels rounds differently", "[aor][adamw]") {
  // The form fields are not decoration: replaying an owner in any other form drifts from it
  // within a few steps (so a wrong declaration shows at the first comparison).
  const size_t n = 4133;
  struct F {
    bool lerp, fma, l2;
    uint8_t width;
  };
  const F forms[] = {{false, false, false, 0},
                     {true, false, false, 0},
                     {true, true, false, 0},
                     {true, true, false, 8},
                     {true, true, true, 0}};
  constexpr size_t kForms = sizeof forms / sizeof forms[0];
  TrainingLoop loop(GradMode::kFp32, n, 10, reft::testing::TestSeed(13));
  std::vector<float> p0, m0, v0;
  loop.InitialState(&p0, &m0, &v0);
  std::vector<std::vector<float>> st(kForms, std::vector<float>(3 * n));
  for (auto& s : st) {
    std::copy(p0.begin(), p0.end(), s.begin());
    std::copy(m0.begin(), m0.end(), s.begin() + n);
    std::copy(v0.begin(), v0.end(), s.begin() + 2 * n);
  }
  for (int it = 0; it < 10; ++it) {
    StepInput in = loop.Next();
    for (size_t k = 0; k < kForms; ++k) {
      StepHyper h = in.hyper;
      h.lerp_first_moment = forms[k].lerp;
      h.fma = forms[k].fma;
      h.l2_weight_decay = forms[k].l2;
      h.fused_width = forms[k].width;
      float* s = st[k].data();
      REQUIRE(AdamWUpdate({s, s + n, s + 2 * n, n}, h, in.grad.data(), in.dtype, n).ok());
    }
  }
  for (size_t a = 0; a < kForms; ++a) {
    for (size_t b = a + 1; b < kForms; ++b) {
      INFO("forms " << a << " and " << b);
      CHECK(std::memcmp(st[a].data(), st[b].data(), 12 * n) != 0);
    }
  }
}

TEST_CASE("AdamW kernel agrees with a textbook float64 AdamW", "[aor][adamw]") {
  // Independent formulation: bias-corrected moments m̂ = m/(1−β1^t), v̂ = v/(1−β2^t) and
  // θ ← θ(1 − lr·wd) − lr·m̂/(√v̂ + ε), all in double. Float32 state differs by rounding only;
  // a wrong bias correction, decay or clip order would be off by orders of magnitude more.
  const uint64_t seed = reft::testing::TestSeed(3);
  INFO("seed " << seed);
  const size_t n = 2000;
  const int iterations = 300;
  TrainingLoop loop(GradMode::kFp32, n, iterations, seed);
  std::vector<float> p, m, v;
  loop.InitialState(&p, &m, &v);
  std::vector<double> dp(p.begin(), p.end()), dm(n, 0.0), dv(n, 0.0);
  double lr_sum = 0;
  for (int it = 0; it < iterations; ++it) {
    const StepInput in = loop.Next();
    REQUIRE(
        AdamWUpdate({p.data(), m.data(), v.data(), n}, in.hyper, in.grad.data(), in.dtype, n).ok());
    const StepHyper& h = in.hyper;
    if (h.skipped) continue;
    lr_sum += h.lr;
    const double t = static_cast<double>(h.step);
    for (size_t i = 0; i < n; ++i) {
      float gf;
      std::memcpy(&gf, &in.grad[4 * i], 4);
      const double g = static_cast<double>(gf) * h.grad_scale * h.clip_coef;
      dm[i] = h.beta1 * dm[i] + (1 - h.beta1) * g;
      dv[i] = h.beta2 * dv[i] + (1 - h.beta2) * g * g;
      const double mhat = dm[i] / (1 - std::pow(h.beta1, t));
      const double vhat = dv[i] / (1 - std::pow(h.beta2, t));
      dp[i] = dp[i] * (1 - h.lr * h.weight_decay) - h.lr * mhat / (std::sqrt(vhat) + h.eps);
    }
  }
  // Errors relative to each array's scale (elementwise relative error is meaningless where a
  // moment crosses zero).
  std::vector<float> p0, m0, v0;
  TrainingLoop(GradMode::kFp32, n, iterations, seed).InitialState(&p0, &m0, &v0);
  double err_p = 0, moved = 0, err_m = 0, scale_m = 0, err_v = 0, scale_v = 0;
  for (size_t i = 0; i < n; ++i) {
    err_p = std::max(err_p, std::abs(p[i] - dp[i]));
    moved = std::max(moved, std::abs(dp[i] - p0[i]));
    err_m = std::max(err_m, std::abs(m[i] - dm[i]));
    scale_m = std::max(scale_m, std::abs(dm[i]));
    err_v = std::max(err_v, std::abs(v[i] - dv[i]));
    scale_v = std::max(scale_v, dv[i]);
  }
  INFO("max |p - p64| " << err_p << " (parameters moved up to " << moved << ", sum of lr " << lr_sum
                        << "); max |m - m64| " << err_m << " of " << scale_m << "; max |v - v64| "
                        << err_v << " of " << scale_v);
  // The parameters (|p| ~ 1, fp32 ulp ~ 1e-7) random-walk by ~ lr·sqrt(steps); a wrong bias
  // correction, decay or clipping would put p off by ~ lr per step, i.e. 1e-4 .. 1e-2 here.
  REQUIRE(moved > 0.01);  // the run did something
  REQUIRE(err_p < 1e-5);
  REQUIRE(err_p < 1e-3 * moved);
  REQUIRE(err_m < 1e-5 * scale_m);
  REQUIRE(err_v < 1e-5 * scale_v);
}

TEST_CASE("AdamW kernel result does not depend on threads or range splits", "[aor][adamw]") {
  const uint64_t seed = reft::testing::TestSeed(8);
  INFO("seed " << seed);
  const size_t n = 10007;
  TrainingLoop loop(GradMode::kMixed, n, 50, seed);
  std::vector<float> p, m, v;
  loop.InitialState(&p, &m, &v);
  std::vector<std::vector<float>> ps(10, p), ms(10, m), vs(10, v);
  std::mt19937_64 rng(seed);
  for (int it = 0; it < 50; ++it) {
    const StepInput in = loop.Next();
    for (int k = 0; k < 9; ++k) {  // threads 1..9
      REQUIRE(AdamWUpdate({ps[k].data(), ms[k].data(), vs[k].data(), n}, in.hyper, in.grad.data(),
                          in.dtype, n, k + 1)
                  .ok());
    }
    // Random ranges straight through AdamWStepRange, in a random order.
    if (in.hyper.skipped) continue;
    const AdamWCoefficients c = ComputeAdamWCoefficients(in.hyper, n);
    const AdamWState st{ps[9].data(), ms[9].data(), vs[9].data(), n};
    std::vector<size_t> cuts{0, n};
    for (int i = 0; i < 7; ++i) cuts.push_back(rng() % n);
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::pair<size_t, size_t>> ranges;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) ranges.emplace_back(cuts[i], cuts[i + 1]);
    std::shuffle(ranges.begin(), ranges.end(), rng);
    for (const auto& [b, e] : ranges) AdamWStepRange(c, st, in.grad.data(), in.dtype, b, e);
  }
  for (int k = 1; k < 10; ++k) {
    INFO("variant " << k);
    REQUIRE(std::memcmp(ps[0].data(), ps[k].data(), 4 * n) == 0);
    REQUIRE(std::memcmp(ms[0].data(), ms[k].data(), 4 * n) == 0);
    REQUIRE(std::memcmp(vs[0].data(), vs[k].data(), 4 * n) == 0);
  }
}

TEST_CASE("AdamW kernel refuses bad arguments and changes nothing", "[aor][adamw]") {
  const size_t n = 64;
  std::vector<float> p(n, 1.0f), m(n, 0.5f), v(n, 0.25f), g(n, 0.1f);
  const auto p0 = p, m0 = m, v0 = v;
  const AdamWState st{p.data(), m.data(), v.data(), n};
  StepHyper h;
  h.iteration = 1;
  h.step = 1;
  h.lr = 1e-3;
  REQUIRE(AdamWUpdate(st, h, g.data(), GradDtype::kFloat32, n - 1).code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(AdamWUpdate(st, h, g.data(), GradDtype::kFloat32, n, 0).code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(AdamWUpdate(st, h, nullptr, GradDtype::kFloat32, n).code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(AdamWUpdate(st, h, g.data(), static_cast<GradDtype>(7), n).code() ==
          StatusCode::kInvalidArgument);
  StepHyper bad = h;
  bad.beta2 = 1.0;
  const Status s = AdamWUpdate(st, bad, g.data(), GradDtype::kFloat32, n);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("beta2 = 1") != std::string::npos);
  // Skipped: nothing read (the gradient is poison), nothing written.
  std::vector<float> poison(n, std::numeric_limits<float>::quiet_NaN());
  StepHyper skipped = h;
  skipped.skipped = true;
  REQUIRE(AdamWUpdate(st, skipped, poison.data(), GradDtype::kFloat32, n, 4).ok());
  REQUIRE(p == p0);
  REQUIRE(m == m0);
  REQUIRE(v == v0);
  // And a real step does change all three.
  REQUIRE(AdamWUpdate(st, h, g.data(), GradDtype::kFloat32, n, 4).ok());
  REQUIRE(p != p0);
  REQUIRE(m != m0);
  REQUIRE(v != v0);
}

TEST_CASE("AdamWUpdateInto equals memcpy + AdamWUpdate bit for bit and leaves the source",
          "[aor][adamw]") {
  const GradMode mode = GENERATE(GradMode::kFp32, GradMode::kFp16, GradMode::kBf16);
  const uint64_t seed = reft::testing::TestSeed(11);
  INFO("mode " << GradModeName(mode) << " seed " << seed);
  // Not a multiple of the copy block (8192) nor of a cache line, so every split has a tail.
  const size_t n = 3 * 8192 + 4133;
  TrainingLoop loop(mode, n, 60, seed);
  std::vector<float> p, m, v;
  loop.InitialState(&p, &m, &v);
  // Reference: in place. Candidate: ping-pong between two "slots", as reftd does.
  std::vector<float> rp = p, rm = m, rv = v;
  std::vector<std::vector<float>> sp(2, p), sm(2, m), sv(2, v);
  int cur = 0;
  bool saw_skip = false;
  for (int it = 0; it < 60; ++it) {
    StepInput in = loop.Next();
    if (it == 30) in.hyper.skipped = true;  // a skipped step among them, whatever the seed
    saw_skip |= in.hyper.skipped;
    REQUIRE(AdamWUpdate({rp.data(), rm.data(), rv.data(), n}, in.hyper, in.grad.data(), in.dtype,
                        n)
                .ok());
    const int nxt = 1 - cur;
    std::fill(sp[nxt].begin(), sp[nxt].end(), -7.0f);  // stale bytes of an old slot
    const std::vector<float> before = sp[cur];
    const int threads = 1 + it % 5;
    REQUIRE(AdamWUpdateInto({sp[cur].data(), sm[cur].data(), sv[cur].data(), n},
                            {sp[nxt].data(), sm[nxt].data(), sv[nxt].data(), n}, in.hyper,
                            in.grad.data(), in.dtype, n, threads)
                .ok());
    REQUIRE(sp[cur] == before);  // the previous slot is only read
    cur = nxt;
    INFO("iteration " << it + 1 << " threads " << threads);
    REQUIRE(std::memcmp(rp.data(), sp[cur].data(), 4 * n) == 0);
    REQUIRE(std::memcmp(rm.data(), sm[cur].data(), 4 * n) == 0);
    REQUIRE(std::memcmp(rv.data(), sv[cur].data(), 4 * n) == 0);
  }
  // In place through the same entry point.
  const StepInput in = loop.Next();
  const AdamWState same{sp[cur].data(), sm[cur].data(), sv[cur].data(), n};
  REQUIRE(AdamWUpdateInto(same, same, in.hyper, in.grad.data(), in.dtype, n, 3).ok());
  REQUIRE(AdamWUpdate({rp.data(), rm.data(), rv.data(), n}, in.hyper, in.grad.data(), in.dtype, n)
              .ok());
  REQUIRE(std::memcmp(rp.data(), sp[cur].data(), 4 * n) == 0);
  CHECK(saw_skip);
}

TEST_CASE("AdamWUpdateInto refuses bad arguments and writes nothing", "[aor][adamw]") {
  const size_t n = 64;
  std::vector<float> a(3 * n + 8, 1.0f), b(3 * n, 0.0f), g(n, 0.1f);
  const AdamWState src{a.data(), a.data() + n, a.data() + 2 * n, n};
  const AdamWState dst{b.data(), b.data() + n, b.data() + 2 * n, n};
  StepHyper h;
  h.iteration = 1;
  h.step = 1;
  h.lr = 1e-3;
  const auto b0 = b;
  // Overlapping arrays (destination shifted by 8 floats into the source).
  const AdamWState shifted{a.data() + 8, a.data() + n + 8, a.data() + 2 * n + 8, n};
  Status st = AdamWUpdateInto(src, shifted, h, g.data(), GradDtype::kFloat32, n);
  REQUIRE(st.code() == StatusCode::kInvalidArgument);
  REQUIRE(st.message().find("overlap") != std::string::npos);
  // Only some arrays shared.
  const AdamWState half{a.data(), b.data() + n, b.data() + 2 * n, n};
  REQUIRE(AdamWUpdateInto(src, half, h, g.data(), GradDtype::kFloat32, n).code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(AdamWUpdateInto(src, {b.data(), b.data() + n, b.data() + 2 * n, n - 1}, h, g.data(),
                          GradDtype::kFloat32, n)
              .code() == StatusCode::kInvalidArgument);
  REQUIRE(AdamWUpdateInto(src, dst, h, nullptr, GradDtype::kFloat32, n).code() ==
          StatusCode::kInvalidArgument);
  StepHyper bad = h;
  bad.eps = -1;
  REQUIRE(AdamWUpdateInto(src, dst, bad, g.data(), GradDtype::kFloat32, n).code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(b == b0);
  // Skipped: a copy, the (poisoned) gradient is not read.
  std::vector<float> poison(n, std::numeric_limits<float>::quiet_NaN());
  StepHyper skipped = h;
  skipped.skipped = true;
  REQUIRE(AdamWUpdateInto(src, dst, skipped, poison.data(), GradDtype::kFloat32, n, 2).ok());
  REQUIRE(std::equal(b.begin(), b.end(), a.begin()));
}

TEST_CASE("AdamW kernel: the two first-moment forms drift apart, so the form must match the owner's",
          "[aor][adamw]") {
  const size_t n = 4133;
  TrainingLoop loop(GradMode::kFp32, n, 20, reft::testing::TestSeed(11));
  std::vector<float> p, m, v;
  loop.InitialState(&p, &m, &v);
  std::vector<float> lp = p, lm = m, lv = v;
  for (int it = 0; it < 20; ++it) {
    StepInput in = loop.Next();
    REQUIRE(AdamWUpdate({p.data(), m.data(), v.data(), n}, in.hyper, in.grad.data(), in.dtype, n)
                .ok());
    in.hyper.lerp_first_moment = true;
    REQUIRE(AdamWUpdate({lp.data(), lm.data(), lv.data(), n}, in.hyper, in.grad.data(), in.dtype,
                        n)
                .ok());
  }
  CHECK(std::memcmp(m.data(), lm.data(), 4 * n) != 0);
  CHECK(std::memcmp(p.data(), lp.data(), 4 * n) != 0);
}

}  // namespace
}  // namespace reft::aor
