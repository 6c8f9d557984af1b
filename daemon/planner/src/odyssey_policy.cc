// Odyssey policy choice (paper §III, eq. 8): every candidate is scored with
// (B / t_step) · max(0, D̂ − t_trans) / D̂, D̂ the expected time to the next failure, because the
// paper's inter-fault duration is unknown when the decision is taken and it gives no numeric rule.
#include <algorithm>
#include <cmath>
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

std::vector<std::vector<int>> StageLayerLists(const ExecutionPlan& p) {
  std::vector<std::vector<int>> out;
  for (const auto& pipe : p.layers_per_stage) {
    int l = 0;
    for (int c : pipe) {
      std::vector<int> v;
      for (int k = 0; k < c; ++k) v.push_back(l++);
      out.push_back(v);
    }
  }
  return out;
}

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
  nl.step = np.step_time;
  return nl;
}

namespace {
bool Alive(const std::vector<bool>& alive, int id) {
  return id >= 0 && static_cast<size_t>(id) < alive.size() && alive[id];
}
}  // namespace

void LiveHoldings(const Layout& cur, const std::vector<bool>& alive, std::vector<int>& ids,
                  std::vector<std::vector<int>>& held) {
  const auto layers = StageLayerLists(cur.plan);
  size_t k = 0;
  for (const auto& pipe : cur.node)
    for (int id : pipe) {
      if (Alive(alive, id)) {
        ids.push_back(id);
        held.push_back(layers[k]);
      }
      ++k;
    }
}

Result<double> ReroutedStep(const ModelProfile& m, const Layout& cur, const std::vector<bool>& alive,
                            const SearchOptions& so) {
  const auto layers = StageLayerLists(cur.plan);
  std::vector<std::vector<bool>> dead;
  std::vector<SyncDevice> live_devices;
  size_t k = 0;
  for (const auto& pipe : cur.node) {
    dead.emplace_back();
    for (int id : pipe) {
      dead.back().push_back(!Alive(alive, id));
      if (Alive(alive, id)) live_devices.push_back({layers[k], 1});
      ++k;
    }
  }
  REFT_ASSIGN_OR_RETURN(double compute, ReroutedComputeTime(m, cur.plan, dead, so.edge_latency));
  return compute + GradientSync(m, live_devices, so.network).ms;
}

Result<TransferPlan> AssignTransfer(const RecoveryCosts& costs, const std::vector<std::vector<int>>& held,
                                    const std::vector<std::vector<int>>& roles, const std::vector<uint64_t>& bytes,
                                    const HeldBytes& held_bytes) {
  return costs.positional_transfer ? PositionalTransfer(held, roles, bytes, held_bytes)
                                   : PlanTransfer(held, roles, bytes, held_bytes);
}

double CopyTransition(const RecoveryCosts& costs, const TransferPlan& transfer) {
  // Senders and receivers work in parallel: the busiest node link bounds the copy.
  return costs.restart_ms + transfer.max_link_bytes() / costs.transfer_bytes_per_ms;
}

FailureEvaluation EvaluateFailure(const ModelProfile& m, const Layout& cur, const std::vector<int>& failed,
                                  const std::vector<bool>& alive_before, int B, const SearchOptions& so,
                                  const RecoveryCosts& costs) {
  FailureEvaluation ev;
  const int L = static_cast<int>(m.layers.size());
  std::vector<bool> alive = alive_before;
  for (int u : failed)
    if (u >= 0 && static_cast<size_t>(u) < alive.size()) alive[u] = false;
  std::set<int> in_plan;
  for (const auto& pipe : cur.node) in_plan.insert(pipe.begin(), pipe.end());
  std::vector<std::vector<int>> held;
  LiveHoldings(cur, alive, ev.live_ids, held);
  const int live = static_cast<int>(ev.live_ids.size());
  bool all_in_plan = true;
  for (int u : failed) all_in_plan = all_in_plan && in_plan.count(u);
  // 1. Data rerouting: every dead position's stage keeps a live peer with the same layers.
  Candidate rr{Policy::kReroute};
  if (!all_in_plan) {
    rr.why = "a failed unit is not in the current plan";
  } else {
    auto st = ReroutedStep(m, cur, alive, so);
    if (st.ok()) {
      rr.feasible = true;
      rr.step_time = *st;
    } else {
      rr.why = st.status().message();
    }
    if (cur.symmetric() && !cur.plan.layers_per_stage.empty()) {
      // eq. 13 as printed, logged beside the simulator (slowest stage's F and B).
      const auto sl = StageSpec(m, cur.plan.layers_per_stage[0], cur.plan.micro_batches[0], so.edge_latency);
      std::vector<int> per_stage(sl.forward.size(), 0);
      for (const auto& pipe : cur.node)
        for (size_t s = 0; s < pipe.size() && s < per_stage.size(); ++s) per_stage[s] += !Alive(alive, pipe[s]);
      double tf = 0, tb = 0;
      for (size_t i = 0; i < sl.forward.size(); ++i) {
        tf = std::max(tf, sl.forward[i]);
        tb = std::max(tb, sl.backward[i]);
      }
      auto e13 = ReroutedStepTimeEq13(static_cast<int>(sl.forward.size()), static_cast<int>(cur.node.size()),
                                      cur.plan.micro_batches[0], tf, tb, per_stage);
      if (e13.ok()) ev.eq13_ms = *e13;
    }
  }
  ev.candidates.push_back(rr);
  // 2. Reconfiguration: copy weights from live replicas (every layer needs a live copy).
  ev.new_plan = BestPlan(m, live, so);
  Candidate rc{Policy::kReconfigure};
  if (ev.new_plan.ok()) {
    std::vector<uint64_t> bytes = costs.layer_bytes;
    if (bytes.empty())
      for (int l = 0; l < L; ++l) bytes.push_back(m.StateBytes(l));
    const auto roles = StageLayerLists(*ev.new_plan);
    HeldBytes held_bytes;  // the survivors' rows
    if (!costs.unit_held_bytes.empty())
      for (int id : ev.live_ids)
        held_bytes.push_back(static_cast<size_t>(id) < costs.unit_held_bytes.size() ? costs.unit_held_bytes[id]
                                                                                  : std::vector<uint64_t>{});
    auto tr = AssignTransfer(costs, held, roles, bytes, held_bytes);
    if (tr.ok()) {
      ev.transfer = *tr;
      rc.feasible = true;
      rc.step_time = ev.new_plan->step_time;
      rc.transition = CopyTransition(costs, ev.transfer);
    } else {
      rc.why = tr.status().message();
    }
  } else {
    rc.why = ev.new_plan.status().message();
  }
  ev.candidates.push_back(rc);
  // 3. Restart on the new plan from in-memory snapshots (needs no live replica).
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

}  // namespace reft::planner::odyssey
