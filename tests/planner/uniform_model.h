// A model of L equal layers for planner tests: forward f ms, backward 2f, `param_bytes` of
// parameters, twice that of optimizer state, 256 KiB of activations per micro-batch.
#pragma once

#include <cstdint>

#include "reft/planner/profile.h"

namespace reft::planner::testing {

inline ModelProfile UniformModel(int L, double f = 10, uint64_t param_bytes = 1 << 20) {
  ModelProfile m;
  for (int i = 0; i < L; ++i) {
    LayerProfile l;
    l.forward = f;
    l.backward = 2 * f;
    l.param_bytes = param_bytes;
    l.optimizer_bytes = 2 * param_bytes;
    l.activation_bytes = 1 << 18;
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace reft::planner::testing
