// Odyssey policy choice (§3.1 with the D̂ score of D-G2) and the event-driven policy simulator
// used to compare Odyssey-like, Oobleck-like and ReCycle-like recovery on one failure trace (A15).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "reft/planner/odyssey.h"

namespace reft::planner::odyssey {

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kReroute: return "reroute";
    case Policy::kReconfigure: return "reconfigure";
    case Policy::kRestart: return "restart";
  }
  return "?";
}

double Score(int global_batch, double step_time, double transition, double expected_interval) {
  if (!(step_time > 0) || !(expected_interval > 0)) return 0;
  return (global_batch / step_time) * std::max(0.0, expected_interval - transition) / expected_interval;
}

int ChooseCandidate(const std::vector<Candidate>& c) {
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].feasible && (best < 0 || c[i].score > c[best].score)) best = static_cast<int>(i);
  return best;
}

namespace {

constexpr double kMsPerHour = 3.6e6;

std::vector<std::vector<int>> StageLayers(const std::vector<int>& counts) {
  std::vector<std::vector<int>> out;
  int l = 0;
  for (int c : counts) {
    std::vector<int> v;
    for (int k = 0; k < c; ++k) v.push_back(l++);
    out.push_back(v);
  }
  return out;
}

}  // namespace

bool Layout::symmetric() const {
  for (const auto& x : plan.layers_per_stage)
    if (x != plan.layers_per_stage[0]) return false;
  for (int mb : plan.micro_batches)
    if (mb != plan.micro_batches[0]) return false;
  return true;
}

Layout Layout::Of(const ExecutionPlan& np, const std::vector<int>& units) {
  Layout nl;
  nl.plan = np;
  size_t k = 0;
  for (const auto& pipe : np.layers_per_stage) {
    std::vector<int> ids;
    for (size_t s = 0; s < pipe.size(); ++s) ids.push_back(k < units.size() ? units[k++] : -1);
    nl.node.push_back(ids);
  }
  nl.failed_per_stage.assign(np.layers_per_stage.empty() ? 0 : np.layers_per_stage[0].size(), 0);
  nl.step = np.step_time;
  return nl;
}

FailureEvaluation EvaluateFailure(const ModelProfile& m, const Layout& cur, const std::vector<int>& failed,
                                  const std::vector<bool>& alive, int B, const SearchOptions& so,
                                  const RecoveryCosts& costs) {
  FailureEvaluation ev;
  const int L = static_cast<int>(m.layers.size());
  std::set<int> dead(failed.begin(), failed.end());
  std::vector<std::vector<int>> held;
  ev.failed_per_stage = cur.failed_per_stage;
  bool all_in_plan = true;
  for (int u : failed) {
    bool found = false;
    for (size_t p = 0; p < cur.node.size(); ++p)
      for (size_t s = 0; s < cur.node[p].size(); ++s)
        if (cur.node[p][s] == u) {
          found = true;
          if (s < ev.failed_per_stage.size()) ++ev.failed_per_stage[s];
        }
    all_in_plan = all_in_plan && found;
  }
  for (size_t p = 0; p < cur.node.size(); ++p) {
    auto sl = StageLayers(cur.plan.layers_per_stage[p]);
    for (size_t s = 0; s < cur.node[p].size(); ++s) {
      const int id = cur.node[p][s];
      if (id >= 0 && static_cast<size_t>(id) < alive.size() && alive[id] && !dead.count(id)) {
        ev.live_ids.push_back(id);
        held.push_back(sl[s]);
      }
    }
  }
  const int live = static_cast<int>(ev.live_ids.size());
  // 1. Data rerouting (symmetric plans): every stage must keep a live replica.
  Candidate rr{Policy::kReroute};
  if (!all_in_plan) {
    rr.why = "a failed unit is not in the current plan";
  } else if (cur.symmetric() && !cur.plan.layers_per_stage.empty()) {
    const auto sl = StageSpec(m, cur.plan.layers_per_stage[0], cur.plan.micro_batches[0], so.edge_latency);
    const int dp = static_cast<int>(cur.node.size());
    auto st = ReroutedStepTimeSim(sl.forward, sl.backward, dp, cur.plan.micro_batches[0],
                                  ev.failed_per_stage, so.edge_latency);
    if (st.ok()) {
      rr.feasible = true;
      rr.step_time = *st;
      double tf = 0, tb = 0;
      for (size_t i = 0; i < sl.forward.size(); ++i) {
        tf = std::max(tf, sl.forward[i]);
        tb = std::max(tb, sl.backward[i]);
      }
      auto e13 = ReroutedStepTimeEq13(static_cast<int>(sl.forward.size()), dp, cur.plan.micro_batches[0],
                                      tf, tb, ev.failed_per_stage);
      if (e13.ok()) ev.eq13_ms = *e13;
    } else {
      rr.why = st.status().message();
    }
  } else {
    rr.why = "plan is asymmetric";
  }
  ev.candidates.push_back(rr);
  // 2. Reconfiguration: copy weights from live replicas (every layer needs a live copy).
  ev.new_plan = BestPlan(m, live, so);
  Candidate rc{Policy::kReconfigure};
  if (ev.new_plan.ok()) {
    std::vector<std::vector<int>> roles;
    for (const auto& pipe : ev.new_plan->layers_per_stage)
      for (auto& v : StageLayers(pipe)) roles.push_back(v);
    std::vector<uint64_t> bytes;
    for (int l = 0; l < L; ++l) bytes.push_back(m.StateBytes(l));
    auto tr = costs.positional_transfer ? PositionalTransfer(held, roles, bytes)
                                        : PlanTransfer(held, roles, bytes);
    if (tr.ok()) {
      ev.transfer = *tr;
      rc.feasible = true;
      rc.step_time = ev.new_plan->step_time;
      // Senders work in parallel: the busiest sender bounds the copy.
      rc.transition = costs.restart_ms + ev.transfer.max_sender_bytes / costs.transfer_bytes_per_ms;
    } else {
      rc.why = tr.status().message();
    }
  } else {
    rc.why = ev.new_plan.status().message();
  }
  ev.candidates.push_back(rc);
  // 3. Restart on the new plan from REFT in-memory snapshots (needs no live replica).
  Candidate rs{Policy::kRestart};
  if (ev.new_plan.ok()) {
    rs.feasible = true;
    rs.step_time = ev.new_plan->step_time;
    rs.transition = costs.restart_ms + costs.snapshot_load_ms;
  } else {
    rs.why = ev.new_plan.status().message();
  }
  ev.candidates.push_back(rs);
  for (auto& x : ev.candidates)
    if (x.feasible) x.score = Score(B, x.step_time, x.transition, costs.expected_interval_ms);
  return ev;
}

Result<PolicyRun> SimulatePolicy(const ModelProfile& m, const PolicySimConfig& c, PolicyKind kind,
                                 uint64_t seed) {
  if (c.dp * c.pp > c.nodes) return Status::InvalidArgument("policy_sim.dp*pp: exceeds nodes");
  if (c.micro_batches < c.dp) return Status::InvalidArgument("policy_sim.micro_batches: fewer than dp");
  if (!(c.failure_rate_per_hour > 0)) return Status::InvalidArgument("policy_sim.failure_rate_per_hour: must be > 0");
  const int B = c.micro_batches * c.micro_batch_size;
  SearchOptions so;
  so.micro_batches = c.micro_batches;
  so.device_memory = c.device_memory;
  so.edge_latency = c.edge_latency;
  so.min_pp = c.min_pp;
  so.max_pp = c.max_pp ? c.max_pp : 2 * c.pp;
  // Failure trace: independent exponential lifetimes per unit; the same seed gives every policy
  // the same trace.
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> life(c.failure_rate_per_hour);
  std::vector<std::pair<double, int>> events;
  for (int u = 0; u < c.nodes; ++u) {
    const double t = life(rng) * kMsPerHour;
    if (t < c.hours * kMsPerHour) events.push_back({t, u});
  }
  std::sort(events.begin(), events.end());

  std::vector<bool> alive(c.nodes, true);
  Layout cur;
  {
    auto counts = SplitLayers(m, c.pp, c.micro_batches / c.dp, so);
    if (!counts.ok()) return counts.status().WithContext("policy_sim initial plan");
    ExecutionPlan p0;
    p0.layers_per_stage.assign(c.dp, *counts);
    p0.micro_batches = DistributeBatch(c.micro_batches, std::vector<int>(c.dp, c.pp));
    std::vector<int> units(c.dp * c.pp);
    for (int i = 0; i < c.dp * c.pp; ++i) units[i] = i;
    std::vector<PipelineSpec> specs;
    for (int i = 0; i < c.dp; ++i) specs.push_back(StageSpec(m, *counts, p0.micro_batches[i], c.edge_latency));
    p0.step_time = *SimulateStep(specs);
    cur = Layout::Of(p0, units);
  }
  PolicyRun run;
  double t = 0, resume = 0, samples = 0;
  auto accumulate = [&](double until) {
    const double from = std::max(t, resume);
    if (until > from && std::isfinite(cur.step)) samples += B / cur.step * (until - from);
    t = until;
  };
  RecoveryCosts costs;
  costs.restart_ms = c.restart_ms;
  costs.snapshot_load_ms = c.snapshot_load_ms;
  costs.transfer_bytes_per_ms = c.transfer_bytes_per_ms;
  costs.positional_transfer = kind == PolicyKind::kOobleck;
  for (const auto& [te, unit] : events) {
    accumulate(te);
    if (!std::isfinite(cur.step)) break;
    ++run.failures;
    bool in_plan = false;
    for (const auto& p : cur.node)
      for (int id : p) in_plan = in_plan || id == unit;
    alive[unit] = false;
    if (!in_plan) continue;  // an idle unit (plans use every live unit, so only after a stop)
    int live = 0;
    for (bool a : alive) live += a;
    costs.expected_interval_ms = kMsPerHour / c.failure_rate_per_hour / std::max(1, live);
    auto ev = EvaluateFailure(m, cur, {unit}, alive, B, so, costs);
    int pick = -1;
    bool checkpoint_fallback = false;
    switch (kind) {
      case PolicyKind::kOdyssey: pick = ChooseCandidate(ev.candidates); break;
      case PolicyKind::kOobleck:
        if (ev.candidates[1].feasible) pick = 1; else checkpoint_fallback = true;
        break;
      case PolicyKind::kRecycle:
        if (ev.candidates[0].feasible) pick = 0; else checkpoint_fallback = true;
        break;
    }
    if (!ev.new_plan.ok() && (checkpoint_fallback || pick != 0)) {
      cur.step = std::numeric_limits<double>::infinity();
      run.decisions.push_back("stop");
      break;
    }
    if (checkpoint_fallback) {
      // Lost work since the last persistent checkpoint, then restart from it.
      const double lost = std::fmod(te, c.checkpoint_interval_ms);
      samples = std::max(0.0, samples - B / cur.step * lost);
      cur = Layout::Of(*ev.new_plan, ev.live_ids);
      resume = te + c.restart_ms + c.checkpoint_load_ms;
      run.decisions.push_back("checkpoint-restart");
      continue;
    }
    if (pick < 0) { cur.step = std::numeric_limits<double>::infinity(); run.decisions.push_back("stop"); break; }
    const Candidate& ch = ev.candidates[pick];
    run.decisions.push_back(PolicyName(ch.policy));
    if (ch.policy == Policy::kReroute) {
      cur.failed_per_stage = ev.failed_per_stage;
      cur.step = ch.step_time;
    } else if (ch.policy == Policy::kReconfigure) {
      // Live unit i takes position position_of_node[i].
      std::vector<int> order(ev.live_ids.size(), -1);
      for (size_t i = 0; i < ev.live_ids.size(); ++i)
        if (ev.transfer.position_of_node[i] >= 0) order[ev.transfer.position_of_node[i]] = ev.live_ids[i];
      cur = Layout::Of(*ev.new_plan, order);
    } else {
      cur = Layout::Of(*ev.new_plan, ev.live_ids);
    }
    resume = te + ch.transition;
  }
  accumulate(c.hours * kMsPerHour);
  run.samples = samples;
  run.throughput = samples / c.hours;
  return run;
}

}  // namespace reft::planner::odyssey
