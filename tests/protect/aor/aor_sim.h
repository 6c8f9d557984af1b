#pragma once
/// \file aor_sim.h
/// \brief A simulated mixed-precision training loop for the AOR tests: it produces, per
/// iteration, the StepHyper and the native-dtype gradient a trainer would hand to the
/// optimizer and to reftd (LR warmup + cosine, weight decay and eps changing by phase, global
/// norm clipping, dynamic fp16 loss scaling with real overflow skips, forced skips otherwise).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reft/aor/half.h"
#include "reft/aor/step_hyper.h"

namespace reft::aor::testing {

enum class GradMode { kFp32, kFp16, kBf16, kMixed };

inline const char* GradModeName(GradMode m) {
  switch (m) {
    case GradMode::kFp32:
      return "fp32";
    case GradMode::kFp16:
      return "fp16";
    case GradMode::kBf16:
      return "bf16";
    case GradMode::kMixed:
      return "mixed";
  }
  return "?";
}

struct StepInput {
  StepHyper hyper;
  GradDtype dtype = GradDtype::kFloat32;
  std::vector<uint8_t> grad;  ///< n elements of `dtype`
};

/// \brief The trainer side: LR schedule, loss scaler, clipping and the optimizer step counter.
class TrainingLoop {
 public:
  TrainingLoop(GradMode mode, size_t n, int total_iterations, uint64_t seed)
      : mode_(mode), n_(n), total_(static_cast<uint64_t>(total_iterations)), rng_(seed) {}

  /// \brief Initial fp32 state: random master weights, zero moments (torch's fresh AdamW).
  void InitialState(std::vector<float>* p, std::vector<float>* m, std::vector<float>* v) {
    std::normal_distribution<float> normal(0.0f, 0.5f);
    p->resize(n_);
    for (auto& x : *p) x = normal(rng_);
    m->assign(n_, 0.0f);
    v->assign(n_, 0.0f);
  }

  StepInput Next() {
    StepInput in;
    StepHyper& h = in.hyper;
    h.iteration = ++iteration_;
    h.lr = Lr(iteration_);
    h.beta1 = 0.9;
    h.beta2 = iteration_ <= total_ / 2 ? 0.95 : 0.999;
    h.eps = iteration_ <= 700 ? 1e-8 : 1e-6;
    h.weight_decay = iteration_ <= total_ / 3 ? 0.1 : 0.05;

    in.dtype = Dtype();
    const bool fp16 = in.dtype == GradDtype::kFloat16;
    // True (unscaled) gradient with a per-iteration magnitude over four decades, some exact
    // zeros, and tiny values that land in fp16/bf16 subnormals.
    const float sigma = std::pow(10.0f, std::uniform_real_distribution<float>(-4.0f, 0.0f)(rng_));
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> g(n_);
    for (size_t i = 0; i < n_; ++i) g[i] = (rng_() % 97 == 0) ? 0.0f : normal(rng_);
    for (size_t i = 0; i < n_; i += 101) g[i] *= 1e-6f;

    // What the trainer's backward produces: scaled by the loss scale under fp16.
    const float scale = fp16 ? loss_scale_ : 1.0f;
    bool overflow = false;
    in.grad.resize(n_ * GradDtypeSize(in.dtype));
    for (size_t i = 0; i < n_; ++i) {
      const float raw = g[i] * scale;
      if (in.dtype == GradDtype::kFloat32) {
        std::memcpy(&in.grad[4 * i], &raw, 4);
      } else {
        const uint16_t b = fp16 ? FloatToHalf(raw) : FloatToBFloat16(raw);
        overflow |= fp16 && (b & 0x7c00) == 0x7c00;
        std::memcpy(&in.grad[2 * i], &b, 2);
      }
    }
    // Outside fp16, skip ~2% of iterations anyway (poison the gradient so a replica that read
    // it would be ruined), so every mode exercises skipped steps.
    if (!fp16 && rng_() % 50 == 0) {
      overflow = true;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      const size_t i = rng_() % n_;
      if (in.dtype == GradDtype::kFloat32)
        std::memcpy(&in.grad[4 * i], &nan, 4);
      else
        std::memset(&in.grad[2 * i], 0xff, 2);
    }
    h.grad_scale = 1.0 / static_cast<double>(scale);  // exact: the scale is a power of two

    if (overflow) {  // GradScaler: skip optimizer.step(), halve the scale
      h.skipped = true;
      h.step = step_;
      h.clip_coef = std::numeric_limits<double>::quiet_NaN();  // the norm overflowed
      if (fp16) loss_scale_ = std::max(1.0f, loss_scale_ / 2);
      good_ = 0;
      return in;
    }
    if (fp16 && ++good_ % 50 == 0) loss_scale_ = std::min(65536.0f, loss_scale_ * 2);
    // clip_grad_norm_: global norm of the unscaled gradient (as the trainer sees it after
    // unscaling), coefficient min(1, max_norm / (norm + 1e-6)) as an fp32 value like torch's.
    double sq = 0;
    for (size_t i = 0; i < n_; ++i) sq += static_cast<double>(g[i]) * g[i];
    const double max_norm = 0.05 * std::sqrt(static_cast<double>(n_));
    h.clip_coef = std::min(1.0f, static_cast<float>(max_norm / (std::sqrt(sq) + 1e-6)));
    h.step = ++step_;
    return in;
  }

  uint64_t step() const { return step_; }

 private:
  double Lr(uint64_t it) const {
    const double peak = 1e-3, floor = 1e-4;
    const uint64_t warmup = 100;
    if (it <= warmup) return peak * static_cast<double>(it) / warmup;
    const double t = static_cast<double>(it - warmup) / static_cast<double>(total_ - warmup);
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * std::min(1.0, t)));
  }

  GradDtype Dtype() {
    switch (mode_) {
      case GradMode::kFp32:
        return GradDtype::kFloat32;
      case GradMode::kFp16:
        return GradDtype::kFloat16;
      case GradMode::kBf16:
        return GradDtype::kBFloat16;
      case GradMode::kMixed:
        break;
    }
    return static_cast<GradDtype>(rng_() % 3);
  }

  GradMode mode_;
  size_t n_;
  uint64_t total_;
  std::mt19937_64 rng_;
  uint64_t iteration_ = 0;
  uint64_t step_ = 0;
  float loss_scale_ = 65536.0f;
  int good_ = 0;
};

}  // namespace reft::aor::testing
