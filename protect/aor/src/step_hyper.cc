#include "reft/aor/step_hyper.h"

#include <charconv>
#include <cmath>
#include <string>

namespace reft::aor {

size_t GradDtypeSize(GradDtype dtype) { return dtype == GradDtype::kFloat32 ? 4 : 2; }

const char* GradDtypeName(GradDtype dtype) {
  switch (dtype) {
    case GradDtype::kFloat32:
      return "fp32";
    case GradDtype::kFloat16:
      return "fp16";
    case GradDtype::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

namespace {

/// "step hyper-parameters: lr is NaN (must be ...)" or "... lr = -0.001 (must be ...)", the value
/// in its shortest round-trip form.
Status Bad(const char* field, double value, const char* rule) {
  std::string msg = std::string("step hyper-parameters: ") + field;
  if (std::isnan(value)) {
    msg += " is NaN";
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, value);
    msg += " = " + std::string(buf, r.ptr);
  }
  return Status::InvalidArgument(msg + " (must be " + rule + ")");
}

}  // namespace

// The ranges are torch.optim.AdamW's own argument checks plus what the trainer contract adds
// (clip_coef in [0, 1], grad_scale > 0). Comparisons are written so that NaN fails them.
// A skipped step computes nothing, but its scalars still come from the trainer's schedule and
// scaler and must be sane; only clip_coef is exempt (NaN or 0 when the global norm overflowed,
// which is why the step was skipped), and step may be 0 (no update applied yet).
Status ValidateStepHyper(const StepHyper& h) {
  if (!h.skipped && h.step < 1) {
    return Status::InvalidArgument(
        "step hyper-parameters: step = 0 (must be >= 1: the optimizer step count after this "
        "update)");
  }
  if (!(std::isfinite(h.lr) && h.lr >= 0.0)) return Bad("lr", h.lr, "finite and >= 0");
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0)) return Bad("beta1", h.beta1, "in [0, 1)");
  if (!(h.beta2 >= 0.0 && h.beta2 < 1.0)) return Bad("beta2", h.beta2, "in [0, 1)");
  if (!(std::isfinite(h.eps) && h.eps >= 0.0)) return Bad("eps", h.eps, "finite and >= 0");
  if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0))
    return Bad("weight_decay", h.weight_decay, "finite and >= 0");
  if (!h.skipped && !(h.clip_coef >= 0.0 && h.clip_coef <= 1.0))
    return Bad("clip_coef", h.clip_coef, "in [0, 1]");
  if (!(std::isfinite(h.grad_scale) && h.grad_scale > 0.0))
    return Bad("grad_scale", h.grad_scale, "finite and > 0");
  return Status::OK();
}

}  // namespace reft::aor
