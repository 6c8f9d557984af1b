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

struct Item {
  bool rerouted;
  int src;  // own micro-batch this item is timed against
};

}  // namespace

Result<SimResult> SimulatePipeline(const PipelineSpec& spec, bool keep_ops) {
  REFT_RETURN_NOT_OK(Validate(spec));
  const int S = static_cast<int>(spec.forward.size());
  const int N = spec.micro_batches;
  auto lat = [&](int edge) { return spec.edge_latency.empty() ? 0.0 : spec.edge_latency[edge]; };

  // Items of each stage: own micro-batches with rerouted ones inserted right after their source,
  // so a rerouted backward never precedes the forward it transitively waits for.
  std::vector<std::vector<Item>> items(S);
  std::vector<std::vector<int>> own_index(S, std::vector<int>(N));
  for (int i = 0; i < S; ++i) {
    const int R = spec.rerouted.empty() ? 0 : spec.rerouted[i];
    int next_r = 0;
    for (int m = 0; m < N; ++m) {
      own_index[i][m] = static_cast<int>(items[i].size());
      items[i].push_back({false, m});
      while (next_r < R && static_cast<long>(next_r) * N / R == m) {
        items[i].push_back({true, m});
        ++next_r;
      }
    }
  }
  // Per-stage op order (1F1B), encoded as +item+1 for a forward and -(item+1) for a backward.
  // The backward of an item timed against own micro-batch s waits until the stage has run the
  // forwards up to own micro-batch s + S − i − 1: that is the classic warm-up of S − i − 1
  // forwards when nothing is rerouted, and it keeps the schedule deadlock-free when rerouted
  // items lengthen a stage's list. After the warm-up, forwards and backwards alternate.
  std::vector<std::vector<int>> order(S);
  for (int i = 0; i < S; ++i) {
    const int M = static_cast<int>(items[i].size());
    int f = 0, b = 0;
    bool last_was_backward = true;
    while (b < M) {
      const int need = own_index[i][std::min(N - 1, items[i][b].src + S - i - 1)];
      const bool b_ready = f > need && f > b;
      if (b_ready && (!last_was_backward || f == M)) {
        order[i].push_back(-(b++ + 1));
        last_was_backward = true;
      } else if (f < M) {
        order[i].push_back(f++ + 1);
        last_was_backward = false;
      } else {
        order[i].push_back(-(b++ + 1));
        last_was_backward = true;
      }
    }
  }
  const double kNotYet = -1;
  std::vector<std::vector<double>> fend(S), bend(S);
  for (int i = 0; i < S; ++i) {
    fend[i].assign(items[i].size(), kNotYet);
    bend[i].assign(items[i].size(), kNotYet);
  }
  SimResult res;
  res.busy.assign(S, 0);
  res.idle.assign(S, {});
  if (keep_ops) res.ops.assign(S, {});
  std::vector<size_t> pc(S, 0);
  std::vector<double> free_at(S, 0);
  std::vector<double> last_end(S, -1);
  size_t remaining = 0;
  for (int i = 0; i < S; ++i) remaining += order[i].size();
  while (remaining > 0) {
    bool progress = false;
    for (int i = 0; i < S; ++i) {
      while (pc[i] < order[i].size()) {
        const int code = order[i][pc[i]];
        const bool fwd = code > 0;
        const int it = std::abs(code) - 1;
        const Item& item = items[i][it];
        double dep = 0;
        if (fwd) {
          if (i > 0) {
            const double e = fend[i - 1][own_index[i - 1][item.src]];
            if (e == kNotYet) break;
            dep = e + lat(i - 1);
          }
        } else if (i == S - 1) {
          dep = fend[i][it];  // always set: the stage order puts F before B
        } else {
          const double e = bend[i + 1][own_index[i + 1][item.src]];
          if (e == kNotYet) break;
          dep = e + lat(i);
        }
        const double start = std::max(free_at[i], dep);
        const double dur = fwd ? spec.forward[i] : spec.backward[i];
        const double end = start + dur;
        if (last_end[i] >= 0 && start > last_end[i] + 1e-12) res.idle[i].push_back({last_end[i], start});
        last_end[i] = end;
        free_at[i] = end;
        (fwd ? fend : bend)[i][it] = end;
        res.busy[i] += dur;
        res.makespan = std::max(res.makespan, end);
        if (keep_ops) res.ops[i].push_back({i, it, fwd, item.rerouted, start, end});
        ++pc[i];
        --remaining;
        progress = true;
      }
    }
    if (!progress) return Status::Internal("1F1B simulation deadlocked (schedule bug)");
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
