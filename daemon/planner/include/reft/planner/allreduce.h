#pragma once
/// \file allreduce.h
/// \brief The data-parallel gradient synchronisation term of a step (Odyssey's estimator counts
/// it; eqs. 9–11 cover only the pipeline compute): after the last backward, every layer's
/// gradients are all-reduced among the devices that hold that layer (one per pipeline, or fewer
/// while a failed peer's work is rerouted). Layers that share a device serialise; Odyssey's
/// greedy colouring puts layers in rounds, the layers of one round all-reduce in parallel.
///
/// Cost model (documented inputs, no profiling): a ring all-reduce of `n` bytes over `p`
/// participants takes 2(p−1)·α + 2(p−1)/p · n/β, with β the per-device link bandwidth and α the
/// per-hop latency. A stage on g GPUs shards its layers' gradients g ways (g parallel rings of
/// n/g bytes); when pipelines shard a layer differently the largest shard bounds the layer. A
/// round lasts as long as its slowest layer; the step pays the sum of the rounds, with no overlap
/// with the backward drain (conservative, as eqs. 9–11 have no overlap either).
///
/// Pure functions; thread-safe.

#include <vector>

#include "reft/planner/profile.h"

namespace reft::planner {

/// \brief Ring all-reduce time (ms) of `bytes` among `participants`; 0 for fewer than 2.
double RingAllReduceMs(double bytes, int participants, const NetworkSpec& net);

/// \brief Colouring of per-layer all-reduces: device_layers[d] = layers on device d (any
/// pipeline). Greedy in gradient-ready order (last layer first); never below the clique bound.
struct Colouring {
  std::vector<int> round_of_layer;  ///< -1 for layers on no device
  int rounds = 0;
  int lower_bound = 0;              ///< max layers on one device (a clique)
};
Colouring ColourAllReduces(int num_layers, const std::vector<std::vector<int>>& device_layers);

/// \brief One device (a stage of one pipeline) as the synchronisation sees it.
struct SyncDevice {
  std::vector<int> layers;
  int gpus = 1;  ///< GPUs the stage's layers are sharded over
};

/// \brief The synchronisation term of one step.
struct SyncEstimate {
  double ms = 0;
  int rounds = 0;
  int lower_bound = 0;
};
/// \brief Per-layer all-reduce among the devices that hold each layer, in colour rounds.
SyncEstimate GradientSync(const ModelProfile& m, const std::vector<SyncDevice>& devices,
                          const NetworkSpec& net);
/// \brief Devices of pipelines given as layer counts per stage (one GPU per stage).
std::vector<SyncDevice> DevicesOfPipelines(const std::vector<std::vector<int>>& layers_per_stage);

}  // namespace reft::planner
