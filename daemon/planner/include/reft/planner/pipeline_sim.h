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

/// \brief One operation of a schedule over several processes (stages of any pipelines).
struct ScheduledOp {
  int proc = 0;           ///< process (device) that runs it
  double duration = 0;
  int dep = -1;           ///< op it waits for besides its process's previous op (-1 = none)
  double latency = 0;     ///< added to the dependency's end (p2p transfer)
  int pipeline = 0, stage = 0, micro_batch = 0;  ///< what it computes (for executors, reports)
  bool forward = true;
  bool rerouted = false;  ///< a failed peer's micro-batch
};
/// \brief Ops and, per process, the order it runs them in.
struct Schedule {
  int procs = 0;
  std::vector<ScheduledOp> ops;
  std::vector<std::vector<int>> order;  ///< per process: op indexes in execution order
};
/// \brief Odyssey's eq. 11 on a schedule: t_start = max(end of the process's previous op, end
/// of the dependency + latency); returns every op's end. Error when the schedule deadlocks.
Result<std::vector<double>> SimulateSchedule(const Schedule& s);

/// \brief The 1F1B order of one stage (index `i` of `stages`) over its items: `src[k]` is the
/// own micro-batch item k is timed against (own items: their own index; rerouted items: the
/// own micro-batch they follow). A backward timed against own micro-batch s waits until the
/// forwards up to own micro-batch s + S − i − 1 have run (the classic warm-up of S − i − 1
/// forwards when nothing is rerouted), then forwards and backwards alternate. Returns +k+1 for
/// the forward of item k, −(k+1) for its backward.
std::vector<int> OneFOneBOrder(const std::vector<int>& src, const std::vector<bool>& rerouted, int stages, int i);

}  // namespace reft::planner
