// What the AOR tests of reftd hand the client: the simulated loop's hyper-parameters as the
// client's OptimizerStep (the client turns it back into an aor::StepHyper record).
#pragma once

#include "reft/aor/step_hyper.h"
#include "reft/client.h"

namespace reft::testing {

inline OptimizerStep ToOptimizerStep(const aor::StepHyper& h) {
  OptimizerStep o;
  o.step = h.step;
  o.lr = h.lr;
  o.beta1 = h.beta1;
  o.beta2 = h.beta2;
  o.eps = h.eps;
  o.weight_decay = h.weight_decay;
  o.clip_coef = h.clip_coef;
  o.grad_scale = h.grad_scale;
  o.skipped = h.skipped;
  o.lerp_first_moment = h.lerp_first_moment;
  o.fma = h.fma;
  o.fused_width = h.fused_width;
  o.l2_weight_decay = h.l2_weight_decay;
  o.not_replayable = static_cast<uint8_t>(h.not_replayable);
  return o;
}

}  // namespace reft::testing
