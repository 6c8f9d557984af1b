#include "reft/has/bubble_estimate.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace reft::has {

Result<std::vector<StageBubbles>> EstimateBubbles(const planner::PipelineSpec& spec,
                                                  double safety) {
  if (!(safety > 0.0 && safety <= 1.0)) {
    return Status::InvalidArgument("bubble safety factor " + std::to_string(safety) +
                                   " must be in (0, 1]");
  }
  REFT_ASSIGN_OR_RETURN(planner::SimResult sim, planner::SimulatePipeline(spec, /*keep_ops=*/true));
  std::vector<StageBubbles> out(sim.ops.size());
  for (size_t s = 0; s < sim.ops.size(); ++s) {
    StageBubbles& b = out[s];
    b.makespan = sim.makespan;
    b.busy = sim.busy[s];
    double cursor = 0;
    // Walk the stage's ops: every gap (including before the first and after the last op) is idle.
    for (const auto& op : sim.ops[s]) {
      if (op.start > cursor) b.windows.emplace_back(cursor, op.start);
      cursor = std::max(cursor, op.end);
    }
    if (sim.makespan > cursor) b.windows.emplace_back(cursor, sim.makespan);
    for (const auto& w : b.windows) b.idle += w.second - w.first;
    b.t_bubble = b.idle * safety;
  }
  return out;
}

double PaperBubbleEstimate(int p, int stages, double c_fb) {
  return (0.8 * p + 2.0 * stages - p - 2.0) * c_fb;
}

double EstimateSnapshotTime(uint64_t bytes, double bytes_per_second) {
  if (bytes_per_second <= 0) return bytes == 0 ? 0.0 : INFINITY;
  return static_cast<double>(bytes) / bytes_per_second;
}

Split SplitParameter(uint64_t bytes, uint64_t chunk_bytes, double t_ss, double t_bubble) {
  Split s;
  if (chunk_bytes == 0) chunk_bytes = bytes == 0 ? 1 : bytes;
  if (t_ss <= t_bubble) {
    s.bubble_bytes = bytes;
    return s;
  }
  const uint64_t n = (bytes + chunk_bytes - 1) / chunk_bytes;
  const double frac = t_bubble <= 0 ? 0.0 : t_bubble / t_ss;
  const auto k = static_cast<uint64_t>(std::floor(static_cast<double>(n) * frac));
  s.bubble_bytes = std::min(bytes, k * chunk_bytes);
  s.compute_bytes = bytes - s.bubble_bytes;
  return s;
}

}  // namespace reft::has
