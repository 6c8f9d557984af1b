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

std::string NotReplayableText(NotReplayable reason) {
  switch (reason) {
    case NotReplayable::kReplayable:
      return "replayable";
    case NotReplayable::kSqrtNotCorrectlyRounded:
      return "the owner's sqrt is not correctly rounded (torch's CPU sqrt through MKL VML on "
             "this CPU)";
    case NotReplayable::kNoMatchingForm:
      return "no replay form matches the owner's optimizer step bit for bit";
    case NotReplayable::kUnsupportedOptimizer:
      return "the owner's optimizer or one of its options is not replayed";
    case NotReplayable::kDeviceOptimizer:
      return "optimizer on a GPU (staged by the trainer)";
  }
  return "unknown reason " + std::to_string(static_cast<unsigned>(reason));
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
  if (h.fused_width > 64) {
    return Status::InvalidArgument("step hyper-parameters: fused_width = " +
                                   std::to_string(h.fused_width) + " (must be at most 64)");
  }
  if (h.fused_width > 0 && !h.lerp_first_moment) {
    return Status::InvalidArgument(
        "step hyper-parameters: fused_width = " + std::to_string(h.fused_width) +
        " without lerp_first_moment (torch's fused kernel always lerps the first moment)");
  }
  if (static_cast<uint8_t>(h.not_replayable) > kMaxNotReplayable) {
    return Status::InvalidArgument("step hyper-parameters: not_replayable = " +
                                   std::to_string(static_cast<unsigned>(h.not_replayable)) +
                                   " (unknown reason)");
  }
  return Status::OK();
}

}  // namespace reft::aor
