// Oobleck instantiation (§2.3, eq. 5 with the index base corrected) and batch distribution
// (§2.4, min-max instead of eq. 6's variance, N_b >= 1, global batch kept).
#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "reft/planner/oobleck.h"

namespace reft::planner::oobleck {

std::vector<std::vector<int>> EnumerateInstantiations(const std::vector<int>& sizes, int N,
                                                      int min_pipelines, size_t limit) {
  const int p = static_cast<int>(sizes.size());
  if (N < 0 || p == 0) return {};
  // X(j, v): combinations over the first j templates; X(0,0) = [0-vector]. Row j is built from
  // row j-1 (copy) and row j itself at v − n_{j−1} with x_{j−1} incremented (θ).
  using List = std::vector<std::vector<int>>;
  std::vector<List> prev(N + 1), cur(N + 1);
  prev[0].push_back(std::vector<int>(p, 0));
  for (int j = 1; j <= p; ++j) {
    const int nj = sizes[j - 1];
    for (int v = 0; v <= N; ++v) {
      cur[v] = prev[v];
      if (v - nj >= 0) {
        for (auto x : cur[v - nj]) {
          if (cur[v].size() >= limit) break;
          ++x[j - 1];
          cur[v].push_back(std::move(x));
        }
      }
    }
    std::swap(prev, cur);
  }
  List out;
  for (auto& x : prev[N]) {
    int count = 0;
    for (int c : x) count += c;
    if (count >= min_pipelines) out.push_back(x);
  }
  return out;
}

int RecommendGlobalBatch(int global_batch, int micro_batch, int pipelines) {
  const int mb = std::max({1, (global_batch + micro_batch - 1) / micro_batch, pipelines});
  return mb * micro_batch;
}

Result<BatchPlan> DistributeBatch(const std::vector<const PipelineTemplate*>& pipes,
                                  int global_batch, int micro_batch) {
  if (pipes.empty()) return Status::InvalidArgument("pipelines: none to distribute the batch over");
  if (micro_batch < 1) return Status::InvalidArgument("job.micro_batch: must be >= 1");
  const int x = static_cast<int>(pipes.size());
  if (global_batch <= 0 || global_batch % micro_batch != 0 || global_batch / micro_batch < x)
    return Status::InvalidArgument(
        "job.global_batch: " + std::to_string(global_batch) + " cannot be split into micro-batches of " +
        std::to_string(micro_batch) + " over " + std::to_string(x) +
        " pipelines; recommended global batch " +
        std::to_string(RecommendGlobalBatch(global_batch, micro_batch, x)));
  const int total = global_batch / micro_batch;
  BatchPlan plan;
  plan.micro_batches.assign(x, 1);
  // Greedy: each further micro-batch goes where it raises that pipeline's time least; costs are
  // increasing in N, so the running maximum is minimal at every step (exchange argument).
  for (int m = x; m < total; ++m) {
    int best = 0;
    double bt = std::numeric_limits<double>::infinity();
    for (int i = 0; i < x; ++i) {
      const double t = pipes[i]->TimeFor(plan.micro_batches[i] + 1);
      if (t < bt - 1e-12) { bt = t; best = i; }
    }
    ++plan.micro_batches[best];
  }
  for (int i = 0; i < x; ++i)
    plan.step_time = std::max(plan.step_time, pipes[i]->TimeFor(plan.micro_batches[i]));
  plan.throughput = global_batch / plan.step_time;
  return plan;
}

BatchPlan BruteForceBatch(const std::vector<const PipelineTemplate*>& pipes, int total,
                          int micro_batch) {
  const int x = static_cast<int>(pipes.size());
  BatchPlan best;
  best.step_time = std::numeric_limits<double>::infinity();
  std::vector<int> n(x, 1);
  std::function<void(int, int)> rec = [&](int i, int left) {
    if (i == x - 1) {
      n[i] = left;
      double t = 0;
      for (int k = 0; k < x; ++k) t = std::max(t, pipes[k]->TimeFor(n[k]));
      if (t < best.step_time) { best.step_time = t; best.micro_batches = n; }
      return;
    }
    for (int c = 1; c <= left - (x - 1 - i); ++c) {
      n[i] = c;
      rec(i + 1, left - c);
    }
  };
  if (x > 0 && total >= x) rec(0, total);
  best.throughput = total * micro_batch / best.step_time;
  return best;
}

}  // namespace reft::planner::oobleck
