#pragma once
/// \file pipeline_sim.h
/// \brief The one discrete-event 1F1B pipeline simulator (Odyssey eq. 11), shared by the
/// Oobleck template checks, the Odyssey estimator, the policy simulator and (later) HAS.
///
/// Pure functions, no shared state: safe to call from any thread.

#include <cstdint>
#include <vector>

#include "reft/result.h"

namespace reft::planner {

/// \brief One pipeline to simulate. Times are in any unit (the result uses the same unit).
struct PipelineSpec {
  std::vector<double> forward;     ///< T_f of each stage (size S >= 1)
  std::vector<double> backward;    ///< T_b of each stage (size S)
  std::vector<double> edge_latency;  ///< p2p latency stage i -> i+1 (size S-1, or empty = 0);
                                     ///< applied to activations and to gradients (eq. 11 gap)
  int micro_batches = 1;           ///< N_m of this pipeline (>= 1)
  /// Extra micro-batches rerouted to stage i from a failed data-parallel peer (size S or empty).
  /// They run only on stage i (the peer's other stages still exist) and are interleaved evenly
  /// with the pipeline's own micro-batches, so they fill bubbles where the schedule allows.
  std::vector<int> rerouted;
};

/// \brief One executed operation of the schedule.
struct SimOp {
  int stage = 0;
  int micro_batch = 0;   ///< index in the stage's list (own and rerouted mixed)
  bool forward = true;
  bool rerouted = false;
  double start = 0;
  double end = 0;
};

/// \brief What the simulation produced.
struct SimResult {
  double makespan = 0;                ///< end of the last backward = step time without optimizer
  std::vector<double> busy;           ///< compute time of each stage
  std::vector<std::vector<SimOp>> ops;  ///< per stage, in execution order (only when requested)
  /// Idle windows of each stage between its first and last op: {start, end} pairs.
  std::vector<std::vector<std::pair<double, double>>> idle;
};

/// \brief Simulates a synchronous 1F1B step: stage i runs min(S-i-1, M_i) warm-up forwards,
/// then alternates one forward and one backward, then drains. An op starts when the previous op
/// of its stage has ended and its dependency (forward of the previous stage / backward of the
/// next stage, plus the edge latency) has ended: eq. 11.
/// \return InvalidArgument naming the bad field (sizes, negative times, micro_batches < 1).
Result<SimResult> SimulatePipeline(const PipelineSpec& spec, bool keep_ops = false);

/// \brief Step time of several data-parallel pipelines that synchronise each step (eq. 10):
/// the maximum makespan.
Result<double> SimulateStep(const std::vector<PipelineSpec>& pipelines);

}  // namespace reft::planner
