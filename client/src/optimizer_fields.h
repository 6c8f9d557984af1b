// The AdamW hyper-parameter fields shared by reft_optimizer_step (C), reft::OptimizerStep (C++)
// and aor::StepHyper (the wire record): one copy routine, so a new field cannot be forgotten in
// one of the two conversions.
#pragma once

namespace reft::client_internal {

template <typename From, typename To>
void CopyOptimizerFields(const From& from, To* to) {
  to->step = from.step;
  to->lr = from.lr;
  to->beta1 = from.beta1;
  to->beta2 = from.beta2;
  to->eps = from.eps;
  to->weight_decay = from.weight_decay;
  to->clip_coef = from.clip_coef;
  to->grad_scale = from.grad_scale;
  to->skipped = from.skipped != 0;
  to->lerp_first_moment = from.lerp_first_moment != 0;
  to->fma = from.fma != 0;
  to->l2_weight_decay = from.l2_weight_decay != 0;
  // Out-of-range values stay out of range (255), so that validation names them.
  to->fused_width = static_cast<decltype(to->fused_width)>(
      from.fused_width > 255u ? 255u : static_cast<unsigned>(from.fused_width));
  to->not_replayable =
      static_cast<decltype(to->not_replayable)>(static_cast<unsigned>(from.not_replayable) > 255u
                                                    ? 255u
                                                    : static_cast<unsigned>(from.not_replayable));
}

}  // namespace reft::client_internal
