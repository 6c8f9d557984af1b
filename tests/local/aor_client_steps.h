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
  return o;
}

}  // namespace reft::testing
