// Odyssey estimator (paper §IV-C, plus the data-parallel all-reduce) and planner (Algorithm 1
// corrected: plans per failure count, asymmetric pipeline-length multisets, floor-proportional
// batch with round-robin remainder).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "reft/planner/odyssey.h"
#include "ordering.h"

namespace reft::planner::odyssey {

int ExecutionPlan::nodes() const {
  int n = 0;
  for (const auto& p : layers_per_stage) n += static_cast<int>(p.size());
  return n;
}

double SymmetricStepTime(int n_pp, int n_m, double tf, double tb) { return (n_pp + n_m - 1) * (tf + tb); }

double AnalyticStepTime(const PipelineSpec& p) {
  const int S = static_cast<int>(p.forward.size());
  double t1 = 0, slow = 0, lat = 0;
  int kstar = 0;
  for (int i = 0; i < S; ++i) {
    const double c = p.forward[i] + p.backward[i];
    t1 += c;
    if (!Longer(slow, c)) { slow = c; kstar = i; }  // the latest of tied slowest stages
  }
  double t3 = 0;
  for (int i = kstar; i < S; ++i) t3 += p.forward[i] + p.backward[i];
  for (double l : p.edge_latency) lat += 2 * l;  // activations down, gradients up, once each
  return t1 + (p.micro_batches - S + kstar - 1) * slow + t3 + lat;
}

Result<double> ReroutedStepTimeEq13(int n_pp, int n_dp, int n_m, double tf, double tb,
                                    const std::vector<int>& failed) {
  if (static_cast<int>(failed.size()) != n_pp)
    return Status::InvalidArgument("failure.failed_per_stage: needs one entry per stage");
  double extra = 0;
  for (int i = 0; i < n_pp; ++i) {
    if (failed[i] < 0) return Status::InvalidArgument("failure.failed_per_stage: negative count");
    // Corrected boundary: F_i >= N_dp (not > as printed) leaves no replica of stage i.
    if (failed[i] >= n_dp)
      return Status::InvalidArgument("failure.failed_per_stage[" + std::to_string(i) +
                                     "]: no surviving replica of the stage; rerouting is infeasible");
    if (failed[i] > 0) extra += static_cast<double>(n_m) * failed[i] / (n_dp - failed[i]);
  }
  return (n_pp + n_m - 1 + extra) * (tf + tb);
}

Result<double> ReroutedStepTimeSim(const ModelProfile& m, const std::vector<int>& counts, int n_dp, int n_m,
                                   const std::vector<int>& failed, double edge_latency) {
  const int S = static_cast<int>(counts.size());
  if (static_cast<int>(failed.size()) != S)
    return Status::InvalidArgument("failure.failed_per_stage: needs one entry per stage");
  ExecutionPlan p;
  p.layers_per_stage.assign(n_dp, counts);
  p.micro_batches.assign(n_dp, n_m);
  // The first failed[i] pipelines lost their stage i.
  std::vector<std::vector<bool>> dead(n_dp, std::vector<bool>(S, false));
  for (int i = 0; i < S; ++i) {
    if (failed[i] < 0 || failed[i] > n_dp)
      return Status::InvalidArgument("failure.failed_per_stage[" + std::to_string(i) + "]: out of range");
    for (int q = 0; q < failed[i]; ++q) dead[q][i] = true;
  }
  return ReroutedComputeTime(m, p, dead, edge_latency);
}

PipelineSpec StageSpec(const ModelProfile& m, const std::vector<int>& counts, int nb, double lat) {
  PipelineSpec p;
  int l = 0;
  for (int c : counts) {
    double f = 0, b = 0;
    for (int k = 0; k < c; ++k, ++l) {
      f += m.layers[l].forward;
      b += m.layers[l].backward;
    }
    p.forward.push_back(f);
    p.backward.push_back(b);
  }
  p.edge_latency.assign(counts.empty() ? 0 : counts.size() - 1, lat);
  p.micro_batches = std::max(1, nb);
  return p;
}

Status EstimateStep(const ModelProfile& m, const SearchOptions& o, ExecutionPlan& p) {
  std::vector<PipelineSpec> specs;
  for (size_t i = 0; i < p.layers_per_stage.size(); ++i)
    specs.push_back(StageSpec(m, p.layers_per_stage[i], p.micro_batches.at(i), o.edge_latency));
  REFT_ASSIGN_OR_RETURN(p.compute_time, SimulateStep(specs));
  p.sync = GradientSync(m, DevicesOfPipelines(p.layers_per_stage), o.network);
  p.step_time = p.compute_time + p.sync.ms;
  return Status::OK();
}

Result<Schedule> PlanSchedule(const ModelProfile& m, const ExecutionPlan& p,
                              const std::vector<std::vector<bool>>& dead, double lat) {
  const int P = static_cast<int>(p.layers_per_stage.size());
  if (static_cast<int>(dead.size()) != P || static_cast<int>(p.micro_batches.size()) != P)
    return Status::InvalidArgument("reroute: one dead list and one micro-batch count per pipeline are required");
  Schedule sc;
  std::vector<std::vector<int>> proc(P);  // [pipeline][stage] -> process, -1 dead
  std::vector<PipelineSpec> spec;
  for (int q = 0; q < P; ++q) {
    spec.push_back(StageSpec(m, p.layers_per_stage[q], p.micro_batches[q], lat));
    if (dead[q].size() != p.layers_per_stage[q].size())
      return Status::InvalidArgument("reroute: dead list of pipeline " + std::to_string(q) + " has the wrong size");
    for (size_t s = 0; s < dead[q].size(); ++s) proc[q].push_back(dead[q][s] ? -1 : sc.procs++);
  }
  // Every op's place in time had no node failed: its start in its own pipeline's failure-free
  // 1F1B schedule. Each process runs its ops (own and rerouted) in that order, so a rerouted
  // micro-batch takes the slot the dead stage would have used, and since every dependency
  // points forward in that time the schedule cannot deadlock.
  std::vector<std::vector<std::vector<std::pair<double, double>>>> when(P);  // [q][s][mb] = (F, B) start
  for (int q = 0; q < P; ++q) {
    REFT_ASSIGN_OR_RETURN(auto sim, SimulatePipeline(spec[q], /*keep_ops=*/true));
    when[q].assign(spec[q].forward.size(), std::vector<std::pair<double, double>>(p.micro_batches[q]));
    for (size_t s = 0; s < sim.ops.size(); ++s)
      for (const auto& op : sim.ops[s]) (op.forward ? when[q][s][op.micro_batch].first : when[q][s][op.micro_batch].second) = op.start;
  }
  // Ops: the live stages' own micro-batches, and each dead position's micro-batches round-robin
  // over the live peers holding the same layers (pipelines with identical stage boundaries).
  std::map<std::pair<int, int>, int> turn;  // (first pipeline of the group, stage) -> next peer
  std::map<std::tuple<int, int, int>, std::pair<int, int>> op_of;  // (pipeline, stage, mb) -> (fwd, bwd)
  auto add = [&](int me, int q, int s, int mb, bool rerouted) {
    const int f = static_cast<int>(sc.ops.size());
    sc.ops.push_back({me, spec[q].forward[s], -1, 0, q, s, mb, true, rerouted});
    sc.ops.push_back({me, spec[q].backward[s], -1, 0, q, s, mb, false, rerouted});
    op_of[{q, s, mb}] = {f, f + 1};
  };
  for (int q = 0; q < P; ++q)
    for (size_t s = 0; s < proc[q].size(); ++s) {
      const int S = static_cast<int>(s);
      if (proc[q][s] >= 0) {
        for (int mb = 0; mb < p.micro_batches[q]; ++mb) add(proc[q][s], q, S, mb, false);
        continue;
      }
      std::vector<int> peers;
      int group = q;
      for (int r = 0; r < P; ++r)
        if (p.layers_per_stage[r] == p.layers_per_stage[q]) {
          group = std::min(group, r);
          if (proc[r][s] >= 0) peers.push_back(proc[r][s]);
        }
      if (peers.empty())
        return Status::InvalidArgument("failure: stage " + std::to_string(s) + " of pipeline " + std::to_string(q) +
                                       " has no live peer holding the same layers; rerouting is infeasible");
      int& t = turn[{group, S}];
      for (int mb = 0; mb < p.micro_batches[q]; ++mb) add(peers[t++ % peers.size()], q, S, mb, true);
    }
  // Dependencies: forward after the upstream stage's forward of the same micro-batch, backward
  // after the downstream stage's backward (the last stage: after its own forward), whichever
  // process runs them.
  for (auto& op : sc.ops) {
    const int depth = static_cast<int>(proc[op.pipeline].size());
    if (op.forward && op.stage > 0) {
      op.dep = op_of.at({op.pipeline, op.stage - 1, op.micro_batch}).first;
      op.latency = lat;
    } else if (!op.forward && op.stage == depth - 1) {
      op.dep = op_of.at({op.pipeline, op.stage, op.micro_batch}).first;
    } else if (!op.forward) {
      op.dep = op_of.at({op.pipeline, op.stage + 1, op.micro_batch}).second;
      op.latency = lat;
    }
  }
  sc.order.assign(sc.procs, {});
  for (size_t k = 0; k < sc.ops.size(); ++k) sc.order[sc.ops[k].proc].push_back(static_cast<int>(k));
  auto key = [&](int k) {
    const auto& op = sc.ops[k];
    const auto& w = when[op.pipeline][op.stage][op.micro_batch];
    // Ties: own before rerouted, then by pipeline, forward before backward.
    return std::make_tuple(op.forward ? w.first : w.second, op.rerouted, op.pipeline, !op.forward);
  };
  for (auto& order : sc.order)
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return sc;
}

Result<double> ReroutedComputeTime(const ModelProfile& m, const ExecutionPlan& p,
                                   const std::vector<std::vector<bool>>& dead, double edge_latency) {
  REFT_ASSIGN_OR_RETURN(auto sc, PlanSchedule(m, p, dead, edge_latency));
  REFT_ASSIGN_OR_RETURN(auto end, SimulateSchedule(sc));
  double worst = 0;
  for (double e : end) worst = std::max(worst, e);
  return worst;
}

Result<ModelProfile> ProfileFromStepTime(const std::vector<LayerState>& layers, const ExecutionPlan& running,
                                         double measured_step_ms, const SearchOptions& o) {
  if (layers.empty()) return Status::InvalidArgument("job.layers: no layer state to spread the step time over");
  if (!(measured_step_ms > 0)) return Status::InvalidArgument("job.step_ms: the measured step time must be > 0");
  ModelProfile m;
  double total_params = 0;
  for (const auto& l : layers) total_params += static_cast<double>(l.param_bytes);
  for (const auto& l : layers) {
    LayerProfile lp;
    // Unit F+B of 1 spread over the layers; scaled below.
    const double share = total_params > 0 ? l.param_bytes / total_params : 1.0 / layers.size();
    lp.forward = share / 3;
    lp.backward = 2 * share / 3;
    lp.param_bytes = l.param_bytes;
    lp.optimizer_bytes = l.optimizer_bytes;
    lp.activation_bytes = l.activation_bytes;
    m.layers.push_back(lp);
  }
  // The makespan is linear in the compute times (no edge latency), the all-reduce does not
  // depend on them: solve k · compute(1) + sync = measured.
  SearchOptions unit = o;
  unit.edge_latency = 0;
  ExecutionPlan p = running;
  REFT_RETURN_NOT_OK(EstimateStep(m, unit, p));
  const double compute = measured_step_ms - p.sync.ms;
  if (!(compute > 0) || !(p.compute_time > 0))
    return Status::InvalidArgument("job.step_ms: " + std::to_string(measured_step_ms) +
                                   " ms does not cover the estimated all-reduce of " + std::to_string(p.sync.ms) + " ms");
  const double k = compute / p.compute_time;
  for (auto& l : m.layers) {
    l.forward *= k;
    l.backward *= k;
  }
  return m;
}

double StagePeakMemory(const ModelProfile& m, int first, int count, int n_pp, int i) {
  double st = 0, act = 0;
  for (int l = first; l < first + count; ++l) {
    st += 2.0 * m.layers[l].param_bytes + m.layers[l].optimizer_bytes;
    act += m.layers[l].activation_bytes;
  }
  return st + (n_pp - i) * act;
}

std::vector<int> DistributeBatch(int n_m, const std::vector<int>& nodes) {
  const int x = static_cast<int>(nodes.size());
  std::vector<int> out(x, 0);
  if (x == 0) return out;
  int total = 0;
  for (int n : nodes) total += n;
  int used = 0;
  for (int i = 0; i < x; ++i) {
    out[i] = static_cast<int>(static_cast<long>(n_m) * nodes[i] / total);
    used += out[i];
  }
  for (int i = 0; used < n_m; i = (i + 1) % x, ++used) ++out[i];
  // No idle partition: move one micro-batch from the largest (lowest id on ties).
  for (int guard = 0; guard < n_m * x; ++guard) {
    auto empty = std::find(out.begin(), out.end(), 0);
    if (empty == out.end()) break;
    auto largest = std::max_element(out.begin(), out.end());
    if (*largest <= 1) break;
    --*largest;
    ++*empty;
  }
  return out;
}

Result<std::vector<int>> SplitLayers(const ModelProfile& m, int S, int nb, const SearchOptions& o) {
  const int L = static_cast<int>(m.layers.size());
  if (S < 1 || S > L) return Status::InvalidArgument("pipeline length " + std::to_string(S) + " outside [1, layers]");
  const int base = L / S, rem = L % S;
  std::vector<int> best;
  double bt = std::numeric_limits<double>::infinity();
  auto consider = [&](const std::vector<int>& counts) {
    if (o.device_memory) {
      int first = 0;
      for (int i = 0; i < S; ++i) {
        if (StagePeakMemory(m, first, counts[i], S, i) > o.device_memory * (1 - o.memory_margin)) return;
        first += counts[i];
      }
    }
    auto r = SimulatePipeline(StageSpec(m, counts, nb, o.edge_latency));
    if (r.ok() && Shorter(r->makespan, bt)) { bt = r->makespan; best = counts; }
  };
  // Enumerate the placements of the remainder layers (capped; beyond the cap, the evenly spaced
  // placements starting at each offset).
  std::vector<int> counts(S, base);
  long combos = 1;
  for (int k = 0; k < rem; ++k) combos = combos * (S - k) / (k + 1);
  if (combos <= 256) {
    std::function<void(int, int)> rec = [&](int from, int left) {
      if (left == 0) { consider(counts); return; }
      for (int i = from; i <= S - left; ++i) {
        ++counts[i];
        rec(i + 1, left - 1);
        --counts[i];
      }
    };
    rec(0, rem);
  } else {
    for (int off = 0; off < S; ++off) {
      std::fill(counts.begin(), counts.end(), base);
      for (int k = 0; k < rem; ++k) ++counts[(off + static_cast<long>(k) * S / rem) % S];
      consider(counts);
    }
  }
  if (best.empty())
    return Status::OutOfMemory("no layer split of " + std::to_string(L) + " layers over " +
                               std::to_string(S) + " stages fits device memory");
  return best;
}

namespace {

// BestPlan restricted to dp identical pipelines of pp stages. Pipelines may get different
// micro-batch counts (DistributeBatch); the layer split is chosen for the busiest one, which
// bounds the step, and every pipeline uses it.
Result<ExecutionPlan> BestUniformPlan(const ModelProfile& m, int nodes, const SearchOptions& o) {
  const int L = static_cast<int>(m.layers.size());
  const int max_pp = std::min({o.max_pp ? o.max_pp : nodes, nodes, L});
  ExecutionPlan best;
  best.step_time = std::numeric_limits<double>::infinity();
  for (int pp = std::max(1, o.min_pp); pp <= max_pp; ++pp) {
    const int dp = std::min(nodes / pp, o.max_dp ? o.max_dp : nodes);
    if (dp < std::max(1, o.min_dp)) continue;
    const std::vector<int> lens(dp, pp);
    const auto mb = DistributeBatch(o.micro_batches, lens);
    if (std::find(mb.begin(), mb.end(), 0) != mb.end()) continue;
    auto split = SplitLayers(m, pp, *std::max_element(mb.begin(), mb.end()), o);
    if (!split.ok()) continue;
    ExecutionPlan p;
    p.layers_per_stage.assign(dp, *split);
    p.micro_batches = mb;
    double step = 0;
    for (int b : std::set<int>(mb.begin(), mb.end()))
      step = std::max(step, SimulatePipeline(StageSpec(m, *split, b, o.edge_latency))->makespan);
    p.compute_time = step;
    p.sync = GradientSync(m, DevicesOfPipelines(p.layers_per_stage), o.network);
    p.step_time = step + p.sync.ms;
    if (Shorter(p.step_time, best.step_time)) best = p;  // ties: fewer stages
  }
  if (best.layers_per_stage.empty())
    return Status::InvalidArgument("cluster.nodes: no uniform dp x pp plan for " + std::to_string(nodes) +
                                   " nodes within the DP/PP ranges and device memory");
  return best;
}

}  // namespace

Result<ExecutionPlan> BestPlan(const ModelProfile& m, int nodes, const SearchOptions& o) {
  const int L = static_cast<int>(m.layers.size());
  if (nodes < 1) return Status::InvalidArgument("cluster.nodes: no live node to plan for");
  if (o.uniform) return BestUniformPlan(m, nodes, o);
  const int max_pp = std::min({o.max_pp ? o.max_pp : nodes, nodes, L});
  const int min_pp = std::max(1, o.min_pp);
  const int max_dp = o.max_dp ? o.max_dp : nodes;
  std::map<std::pair<int, int>, std::pair<std::vector<int>, double>> cache;  // (len, nb)
  // Multisets in a fixed order (longest pipelines first, then lexicographically decreasing); a
  // later plan replaces the incumbent only when shorter beyond the tie tolerance.
  ExecutionPlan best;
  best.step_time = std::numeric_limits<double>::infinity();
  std::vector<int> lens;
  std::function<void(int, int)> rec = [&](int left, int maxlen) {
    if (left == 0) {
      const int dp = static_cast<int>(lens.size());
      if (dp < o.min_dp || dp > max_dp) return;
      auto mb = DistributeBatch(o.micro_batches, lens);
      if (std::find(mb.begin(), mb.end(), 0) != mb.end()) return;
      ExecutionPlan p;
      double step = 0;
      for (int i = 0; i < dp; ++i) {
        auto key = std::make_pair(lens[i], mb[i]);
        auto it = cache.find(key);
        if (it == cache.end()) {
          auto s = SplitLayers(m, lens[i], mb[i], o);
          std::pair<std::vector<int>, double> v{{}, std::numeric_limits<double>::infinity()};
          if (s.ok()) {
            v.first = *s;
            v.second = SimulatePipeline(StageSpec(m, *s, mb[i], o.edge_latency))->makespan;
          }
          it = cache.emplace(key, v).first;
        }
        if (it->second.first.empty()) return;
        step = std::max(step, it->second.second);
        p.layers_per_stage.push_back(it->second.first);
      }
      p.micro_batches = mb;
      p.compute_time = step;
      p.sync = GradientSync(m, DevicesOfPipelines(p.layers_per_stage), o.network);
      p.step_time = step + p.sync.ms;
      if (Shorter(p.step_time, best.step_time)) best = p;
      return;
    }
    if (static_cast<int>(lens.size()) >= max_dp) return;
    for (int len = std::min(left, maxlen); len >= min_pp; --len) {
      lens.push_back(len);
      rec(left - len, len);
      lens.pop_back();
    }
  };
  rec(nodes, max_pp);
  if (best.layers_per_stage.empty())
    return Status::InvalidArgument("cluster.nodes: no execution plan for " + std::to_string(nodes) +
                                   " nodes within the DP/PP ranges and device memory");
  return best;
}

std::vector<Result<ExecutionPlan>> PlanTable(const ModelProfile& m, int nodes, int max_faults,
                                             const SearchOptions& o) {
  std::vector<Result<ExecutionPlan>> out;
  for (int i = 1; i <= max_faults; ++i) out.push_back(BestPlan(m, nodes - i, o));
  return out;
}

}  // namespace reft::planner::odyssey
