#pragma once
/// \file bubble_estimate.h
/// \brief Per-stage bubble (idle) estimate of a 1F1B pipeline and the Algorithm 1 split.
///
/// Deviation from the REFT paper (docs/has.md "Deviations from the paper"): the printed
/// EstimateBubbleTime `(0.8p + 2|P| - p - 2) * C` is garbled and about 2x too large for a uniform
/// 1F1B pipeline (whose idle time per stage is exactly (|P|-1)(F+B)). We take the idle windows of
/// every stage from the planner's discrete-event simulator (pipeline_sim.h, Odyssey eq. 11) and
/// multiply their total by a safety factor (default 0.8). Pure functions: thread-safe.

#include <cstdint>
#include <utility>
#include <vector>

#include "reft/planner/pipeline_sim.h"
#include "reft/result.h"

namespace reft::has {

/// \brief Idle structure of one stage during one step, times relative to the step start.
struct StageBubbles {
  std::vector<std::pair<double, double>> windows;  ///< idle {start, end} inside the step
  double idle = 0;      ///< sum of window lengths (unscaled)
  double t_bubble = 0;  ///< idle * safety: the usable bubble time of Algorithm 1
  double busy = 0;      ///< compute time of the stage
  double makespan = 0;  ///< step length (end of the last backward of any stage)
};

/// \brief Bubble estimate of every stage from the 1F1B simulator; `safety` in (0, 1].
/// Idle before a stage's first op (warm-up wait) and after its last op (drain wait) counts too:
/// the device is idle there as well. InvalidArgument for a bad spec or safety.
Result<std::vector<StageBubbles>> EstimateBubbles(const planner::PipelineSpec& spec,
                                                  double safety = 0.8);

/// \brief The paper's printed formula, literal reading `(2|P| - 2 - 0.2p) * C` (p 0-based).
/// Kept only so tests and docs can show how far it is from the simulated idle time.
double PaperBubbleEstimate(int p, int stages, double c_fb);

/// \brief EstimateSnapshotTime of Algorithm 1: bytes / B_io (seconds when B_io is bytes/s).
double EstimateSnapshotTime(uint64_t bytes, double bytes_per_second);

/// \brief Result of SplitParameter: the first `bubble_bytes` go into bubbles, the rest
/// (`compute_bytes`) alongside computation.
struct Split {
  uint64_t bubble_bytes = 0;
  uint64_t compute_bytes = 0;
};

/// \brief Algorithm 1's SplitParameter on copy-chunk boundaries (docs/has.md "Split unit"):
/// when t_ss <= t_bubble everything goes into bubbles; otherwise the first
/// floor(n_chunks * t_bubble / t_ss) chunks do. Deterministic, so every member agrees.
Split SplitParameter(uint64_t bytes, uint64_t chunk_bytes, double t_ss, double t_bubble);

}  // namespace reft::has
