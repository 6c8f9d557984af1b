#include "reft/planner/pipeline_sim.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace reft::planner {
namespace {

Status Validate(const PipelineSpec& s) {
  const size_t n = s.forward.size();
  if (n == 0) return Status::InvalidArgument("pipeline.forward: at least one stage is required");
  if (s.backward.size() != n)
    return Status::InvalidArgument("pipeline.backward: has " + std::to_string(s.backward.size()) +
                                   " stages, forward has " + std::to_string(n));
  if (!s.edge_latency.empty() && s.edge_latency.size() != n - 1)
    return Status::InvalidArgument("pipeline.edge_latency: needs " + std::to_string(n - 1) +
                                   " entries (one per edge)");
  if (!s.rerouted.empty() && s.rerouted.size() != n)
    return Status::InvalidArgument("pipeline.rerouted: needs one count per stage");
  if (s.micro_batches < 1) return Status::InvalidArgument("pipeline.micro_batches: must be >= 1");
  for (size_t i = 0; i < n; ++i) {
    if (!(s.forward[i] >= 0) || !(s.backward[i] >= 0))
      return Status::InvalidArgument("pipeline.forward/backward: stage " + std::to_string(i) +
                                     " has a negative or NaN time");
    if (!s.rerouted.empty() && s.rerouted[i] < 0)
      return Status::InvalidArgument("pipeline.rerouted: stage " + std::to_string(i) + " is negative");
  }
  for (double l : s.edge_latency)
    if (!(l >= 0)) return Status::InvalidArgument("pipeline.edge_latency: negative or NaN latency");
  return Status::OK();
}

}  // namespace

std::vector<int> OneFOneBOrder(const std::vector<int>& src, const std::vector<bool>& rerouted, int S, int i) {
  const int M = static_cast<int>(src.size());
  int own = 0;
  for (int k = 0; k < M; ++k) own += !rerouted[k];
  std::vector<int> own_index(std::max(own, 1), 0);
  for (int k = 0; k < M; ++k)
    if (!rerouted[k]) own_index[src[k]] = k;
  std::vector<int> order;
  int f = 0, b = 0;
  bool last_was_backward = true;
  while (b < M) {
    const int need = own_index[std::min(own - 1, src[b] + S - i - 1)];
    const bool b_ready = f > need && f > b;
    if (b_ready && (!last_was_backward || f == M)) {
      order.push_back(-(b++ + 1));
      last_was_backward = true;
    } else if (f < M) {
      order.push_back(f++ + 1);
      last_was_backward = false;
    } else {
      order.push_back(-(b++ + 1));
      last_was_backward = true;
    }
  }
  return order;
}

Result<std::vector<double>> SimulateSchedule(const Schedule& sc) {
  constexpr double kNotYet = -1;
  std::vector<double> end(sc.ops.size(), kNotYet);
  std::vector<size_t> pc(sc.procs, 0);
  std::vector<double> free_at(sc.procs, 0);
  size_t remaining = 0;
  for (const auto& o : sc.order) remaining += o.size();
  if (static_cast<int>(sc.order.size()) != sc.procs) return Status::InvalidArgument("schedule.order: one list per process");
  while (remaining > 0) {
    bool progress = false;
    for (int p = 0; p < sc.procs; ++p) {
      while (pc[p] < sc.order[p].size()) {
        const int k = sc.order[p][pc[p]];
        const ScheduledOp& op = sc.ops[k];
        double ready = free_at[p];
        if (op.dep >= 0) {
          if (end[op.dep] == kNotYet) break;
          ready = std::max(ready, end[op.dep] + op.latency);
        }
        end[k] = ready + op.duration;  // eq. 11: max(previous op of the stage, the dependency)
        free_at[p] = end[k];
        ++pc[p];
        --remaining;
        progress = true;
      }
    }
    if (!progress) return Status::Internal("schedule deadlocks: an op waits for one that never runs before it");
  }
  return end;
}

Result<SimResult> SimulatePipeline(const PipelineSpec& spec, bool keep_ops) {
  REFT_RETURN_NOT_OK(Validate(spec));
  const int S = static_cast<int>(spec.forward.size());
  const int N = spec.micro_batches;
  auto lat = [&](int edge) { return spec.edge_latency.empty() ? 0.0 : spec.edge_latency[edge]; };
  // Items of each stage: own micro-batches with rerouted ones inserted right after their source,
  // so a rerouted backward never precedes the forward it transitively waits for. A rerouted item
  // is timed against its source on the neighbouring stages.
  std::vector<std::vector<int>> src(S);
  std::vector<std::vector<bool>> rer(S);
  std::vector<std::vector<int>> own_index(S, std::vector<int>(N));
  for (int i = 0; i < S; ++i) {
    const int R = spec.rerouted.empty() ? 0 : spec.rerouted[i];
    int next_r = 0;
    for (int m = 0; m < N; ++m) {
      own_index[i][m] = static_cast<int>(src[i].size());
      src[i].push_back(m);
      rer[i].push_back(false);
      while (next_r < R && static_cast<long>(next_r) * N / R == m) {
        src[i].push_back(m);
        rer[i].push_back(true);
        ++next_r;
      }
    }
  }
  // Ops: forward of item k of stage i at fwd[i][k], backward at bwd[i][k].
  Schedule sc;
  sc.procs = S;
  sc.order.resize(S);
  std::vector<std::vector<int>> fwd(S), bwd(S);
  for (int i = 0; i < S; ++i)
    for (size_t k = 0; k < src[i].size(); ++k) {
      fwd[i].push_back(static_cast<int>(sc.ops.size()));
      sc.ops.push_back({i, spec.forward[i], -1, 0, 0, i, static_cast<int>(k), true, rer[i][k]});
      bwd[i].push_back(static_cast<int>(sc.ops.size()));
      sc.ops.push_back({i, spec.backward[i], -1, 0, 0, i, static_cast<int>(k), false, rer[i][k]});
    }
  for (int i = 0; i < S; ++i)
    for (size_t k = 0; k < src[i].size(); ++k) {
      ScheduledOp& f = sc.ops[fwd[i][k]];
      if (i > 0) { f.dep = fwd[i - 1][own_index[i - 1][src[i][k]]]; f.latency = lat(i - 1); }
      ScheduledOp& b = sc.ops[bwd[i][k]];
      if (i == S - 1) { b.dep = fwd[i][k]; }
      else { b.dep = bwd[i + 1][own_index[i + 1][src[i][k]]]; b.latency = lat(i); }
    }
  for (int i = 0; i < S; ++i)
    for (int code : OneFOneBOrder(src[i], rer[i], S, i))
      sc.order[i].push_back(code > 0 ? fwd[i][code - 1] : bwd[i][-code - 1]);
  REFT_ASSIGN_OR_RETURN(auto end, SimulateSchedule(sc));
  SimResult res;
  res.busy.assign(S, 0);
  res.idle.assign(S, {});
  if (keep_ops) res.ops.assign(S, {});
  for (int i = 0; i < S; ++i) {
    double last_end = -1;
    for (int k : sc.order[i]) {
      const ScheduledOp& op = sc.ops[k];
      const double start = end[k] - op.duration;
      if (last_end >= 0 && start > last_end + 1e-12) res.idle[i].push_back({last_end, start});
      last_end = end[k];
      res.busy[i] += op.duration;
      res.makespan = std::max(res.makespan, end[k]);
      if (keep_ops) res.ops[i].push_back({i, op.micro_batch, op.forward, op.rerouted, start, end[k]});
    }
  }
  return res;
}

Result<double> SimulateStep(const std::vector<PipelineSpec>& pipelines) {
  if (pipelines.empty()) return Status::InvalidArgument("pipelines: at least one is required");
  double worst = 0;
  for (size_t p = 0; p < pipelines.size(); ++p) {
    auto r = SimulatePipeline(pipelines[p]);
    if (!r.ok()) return r.status().WithContext("pipelines[" + std::to_string(p) + "]");
    worst = std::max(worst, r->makespan);
  }
  return worst;
}

}  // namespace reft::planner
