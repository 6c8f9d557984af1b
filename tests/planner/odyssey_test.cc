#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "reft/planner/odyssey.h"
#include "policy_sim.h"
#include "uniform_model.h"

using namespace reft::planner;
using namespace reft::planner::odyssey;

namespace {
ModelProfile Uniform(int L, double f = 10) { return testing::UniformModel(L, f); }
double Rel(double a, double b) { return std::fabs(a - b) / b; }
}  // namespace

TEST_CASE("A12: estimator within 8.02% of the simulator", "[odyssey]") {
  // Llama-like uniform layers with jitter, small p2p latency; (PP,DP) = (4,2), (4,4), (2,2) and
  // their post-failure plans: asymmetric (one pipeline one node shorter, e.g. [2,2,3]) and
  // rerouted (one failure in stage 0).
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> jit(0.95, 1.05);
  ModelProfile m = Uniform(32);
  for (auto& l : m.layers) { l.forward *= jit(rng); l.backward = 2 * l.forward; }
  const double lat = 0.3;
  SearchOptions so;
  so.edge_latency = lat;
  for (auto [pp, dp] : {std::pair{4, 2}, {4, 4}, {2, 2}}) {
    INFO("pp=" << pp << " dp=" << dp);
    const int nm = 8 * dp;  // global micro-batches
    // Before the failure: symmetric plan.
    std::vector<int> lens(dp, pp);
    auto mb = DistributeBatch(nm, lens);
    double sim = 0, est = 0;
    for (int p = 0; p < dp; ++p) {
      auto split = SplitLayers(m, pp, mb[p], so);
      REQUIRE(split.ok());
      auto sp = StageSpec(m, *split, mb[p], lat);
      sim = std::max(sim, SimulatePipeline(sp)->makespan);
      est = std::max(est, AnalyticStepTime(sp));
    }
    CHECK(Rel(est, sim) <= 0.0802);
    // After losing one node: asymmetric pipelines (eq. 10 = max over pipelines).
    lens.back() -= 1;
    if (lens.back() == 0) lens.pop_back();
    mb = DistributeBatch(nm, lens);
    double sim10 = 0, est10 = 0;
    for (size_t p = 0; p < lens.size(); ++p) {
      auto split = SplitLayers(m, lens[p], mb[p], so);
      REQUIRE(split.ok());
      auto sp = StageSpec(m, *split, mb[p], lat);
      sim10 = std::max(sim10, SimulatePipeline(sp)->makespan);
      est10 = std::max(est10, AnalyticStepTime(sp));
    }
    CHECK(Rel(est10, sim10) <= 0.0802);
    // Rerouted: the simulator (used for decisions) vs eq. 12/13 (reported, pessimistic).
    std::vector<int> counts(pp, 32 / pp);
    auto spec = StageSpec(Uniform(32), counts, 8, lat);
    const double base = SimulatePipeline(spec)->makespan;
    std::vector<int> failed(pp, 0);
    failed[0] = 1;
    auto rs = ReroutedStepTimeSim(Uniform(32), counts, dp, 8, failed, lat);
    INFO(rs.status().ToString());
    REQUIRE(rs.ok());
    auto e13 = ReroutedStepTimeEq13(pp, dp, 8, spec.forward[0], spec.backward[0], failed);
    REQUIRE(e13.ok());
    CHECK(*rs > base);
    CHECK(*e13 >= *rs * 0.95);
  }
}

TEST_CASE("analytic step time equals eq. 9 for equal stages", "[odyssey]") {
  PipelineSpec p;
  p.forward.assign(4, 2.0);
  p.backward.assign(4, 4.0);
  p.micro_batches = 8;
  CHECK(AnalyticStepTime(p) == Approx(SymmetricStepTime(4, 8, 2.0, 4.0)));
  CHECK(AnalyticStepTime(p) == Approx(SimulatePipeline(p)->makespan));
}

TEST_CASE("eq. 13 boundary: F_i >= N_dp is infeasible", "[odyssey]") {
  CHECK_FALSE(ReroutedStepTimeEq13(2, 2, 4, 1, 2, {2, 0}).ok());
  CHECK(ReroutedStepTimeEq13(2, 2, 4, 1, 2, {1, 0}).ok());
  CHECK(*ReroutedStepTimeEq13(2, 3, 4, 1, 2, {1, 0}) == Approx((2 + 4 - 1 + 4.0 / 2) * 3));
}

TEST_CASE("A16: eq. 14 memory", "[odyssey]") {
  auto m = Uniform(8);
  // stage 0 of 4 with 2 layers: 2*(1+2+1) MiB + 4*2*0.25 MiB
  CHECK(StagePeakMemory(m, 0, 2, 4, 0) == Approx(2 * 4.0 * (1 << 20) + 4 * 2 * (1 << 18)));
  CHECK(StagePeakMemory(m, 6, 2, 4, 3) < StagePeakMemory(m, 0, 2, 4, 0));
}

TEST_CASE("batch distribution: proportional floor, round robin, none empty", "[odyssey]") {
  CHECK(DistributeBatch(16, {2, 2, 3}) == std::vector<int>{5, 5, 6});
  CHECK(DistributeBatch(7, {2, 2, 3}) == std::vector<int>{2, 2, 3});
  CHECK(DistributeBatch(8, {2, 2, 3}) == std::vector<int>{3, 2, 3});
  auto v = DistributeBatch(3, {1, 1, 10});
  CHECK(std::count(v.begin(), v.end(), 0) == 0);
}

TEST_CASE("A13: the 9-layer example costs 3 layers against 10 positional", "[odyssey]") {
  std::vector<std::vector<int>> held = {{1, 2, 3}, {1, 2, 3}, {4, 5, 6}, {4, 5, 6}, {4, 5, 6},
                                        {7, 8, 9}, {7, 8, 9}, {7, 8, 9}};
  std::vector<std::vector<int>> roles = {{1, 2}, {3, 4}, {5, 6}, {7, 8, 9}, {1, 2}, {3, 4}, {5, 6}, {7, 8, 9}};
  auto km = PlanTransfer(held, roles, {});
  REQUIRE(km.ok());
  CHECK(km->total_layers == 3);
  auto pos = PositionalTransfer(held, roles, {});
  REQUIRE(pos.ok());
  CHECK(pos->total_layers == 10);
  // Every position is taken exactly once and every move's source holds the layer.
  std::set<int> used(km->position_of_node.begin(), km->position_of_node.end());
  CHECK(used.size() == 8u);
  for (const auto& mv : km->moves) {
    CHECK(std::count(held[mv.from].begin(), held[mv.from].end(), mv.layer) == 1);
    CHECK(std::count(roles[km->position_of_node[mv.to]].begin(), roles[km->position_of_node[mv.to]].end(), mv.layer) == 1);
  }
}

TEST_CASE("KM equals brute force on random small cases, bytes and balance", "[odyssey]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + trial % 4, L = 8;
    std::vector<std::vector<int>> held(n), roles(n);
    for (int i = 0; i < n; ++i) {
      for (int l = 0; l < L; ++l) if (rng() % 3 == 0) held[i].push_back(l);
      held[i].push_back(i % L);
      roles[i].push_back(static_cast<int>(rng() % n) % L);
      roles[i].push_back(static_cast<int>(rng() % L));
    }
    std::set<int> avail;
    for (auto& h : held) avail.insert(h.begin(), h.end());
    for (auto& r : roles) r.erase(std::remove_if(r.begin(), r.end(), [&](int l) { return !avail.count(l); }), r.end());
    std::vector<uint64_t> bytes(L);
    for (auto& b : bytes) b = 1 + rng() % 100;
    auto km = PlanTransfer(held, roles, bytes);
    REQUIRE(km.ok());
    std::vector<int> perm(n);
    for (int i = 0; i < n; ++i) perm[i] = i;
    uint64_t best = UINT64_MAX;
    do {
      uint64_t c = 0;
      for (int i = 0; i < n; ++i)
        for (int l : roles[perm[i]])
          if (!std::count(held[i].begin(), held[i].end(), l)) c += bytes[l];
      best = std::min(best, c);
    } while (std::next_permutation(perm.begin(), perm.end()));
    CHECK(km->total_bytes == best);
  }
  // Balance: two holders of the same layers share the sending.
  auto t = PlanTransfer({{0, 1}, {0, 1}, {}, {}}, {{0, 1}, {0, 1}, {0}, {1}}, {10, 10});
  REQUIRE(t.ok());
  CHECK(t->max_sender_bytes == 10);
}

TEST_CASE("transfer input errors name the field", "[odyssey]") {
  auto r = PlanTransfer({{0}}, {{1}}, {});
  CHECK(r.status().message().find("transfer.roles[0]") != std::string::npos);
  CHECK(PlanTransfer({{0}}, {{0}, {0}}, {}).status().message().find("transfer.roles") != std::string::npos);
}

TEST_CASE("colouring is valid and never below the clique bound", "[odyssey]") {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int L = 6 + trial % 20;
    std::vector<std::vector<int>> devs;
    // Several pipelines with random contiguous stage splits.
    for (int p = 0; p < 1 + trial % 4; ++p) {
      int l = 0;
      while (l < L) {
        const int len = 1 + static_cast<int>(rng() % 5);
        std::vector<int> d;
        for (int k = l; k < std::min(L, l + len); ++k) d.push_back(k);
        devs.push_back(d);
        l += len;
      }
    }
    auto c = ColourAllReduces(L, devs);
    CHECK(c.rounds >= c.lower_bound);
    for (const auto& d : devs)
      for (int a : d)
        for (int b : d)
          if (a != b) CHECK(c.round_of_layer[a] != c.round_of_layer[b]);
  }
  // Paper's Figure 4 shape: 6 layers, pipelines [0,1,2][3,4,5] and [0,1][2,3][4,5].
  auto c = ColourAllReduces(6, {{0, 1, 2}, {3, 4, 5}, {0, 1}, {2, 3}, {4, 5}});
  CHECK(c.lower_bound == 3);
  CHECK(c.rounds == 3);
}

TEST_CASE("policy score and choice", "[odyssey]") {
  CHECK(Score(32, 100, 0, 1000) == Approx(0.32));
  CHECK(Score(32, 100, 2000, 1000) == 0);
  std::vector<Candidate> c = {{Policy::kReroute, true, 120, 0}, {Policy::kReconfigure, true, 100, 50000}};
  c[0].score = Score(32, 120, 0, 1e5);
  c[1].score = Score(32, 100, 50000, 1e5);
  CHECK(ChooseCandidate(c) == 0);  // failures soon: rerouting wins
  c[0].score = Score(32, 120, 0, 1e7);
  c[1].score = Score(32, 100, 50000, 1e7);
  CHECK(ChooseCandidate(c) == 1);  // failures rare: reconfiguration pays off
}

TEST_CASE("plan search uses every node, table per failure count", "[odyssey]") {
  auto m = Uniform(16);
  SearchOptions so;
  so.micro_batches = 16;
  so.min_pp = 2;
  auto table = PlanTable(m, 8, 2, so);
  REQUIRE(table.size() == 2u);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(table[i].ok());
    CHECK(table[i]->nodes() == 8 - (i + 1));
    int mb = 0;
    for (int x : table[i]->micro_batches) mb += x;
    CHECK(mb == 16);
  }
}

TEST_CASE("rerouting needs a live peer with the same layers, symmetric plan or not", "[odyssey]") {
  // Pipelines [4,4,4,4] x2 and [6,5,5]: the two 4-stage pipelines are peers of each other.
  auto m = Uniform(16);
  ExecutionPlan p;
  p.layers_per_stage = {{4, 4, 4, 4}, {4, 4, 4, 4}, {6, 5, 5}};
  p.micro_batches = {4, 4, 4};
  std::vector<std::vector<bool>> dead = {{false, true, false, false}, {false, false, false, false}, {false, false, false}};
  auto r = ReroutedComputeTime(m, p, dead, 0);
  REQUIRE(r.ok());
  // Slower than without the failure, at most as slow as the live peer running both pipelines'
  // stage-1 work back to back after a full pipeline fill.
  std::vector<std::vector<bool>> none = {{false, false, false, false}, {false, false, false, false}, {false, false, false}};
  const double before = *ReroutedComputeTime(m, p, none, 0);
  CHECK(before == Approx(*SimulateStep({StageSpec(m, {4, 4, 4, 4}, 4), StageSpec(m, {4, 4, 4, 4}, 4),
                                        StageSpec(m, {6, 5, 5}, 4)})));
  CHECK(*r > before);
  CHECK(*r <= before + 4 * (40 + 80) + 1e-9);
  // The schedule: the peer's stage 1 runs 8 micro-batches, 4 of them rerouted from pipeline 0,
  // whose activations come from pipeline 0's stage 0 and go on to pipeline 0's stage 2.
  auto sc = PlanSchedule(m, p, dead, 0);
  REQUIRE(sc.ok());
  int rerouted = 0;
  for (const auto& op : sc->ops)
    if (op.rerouted) {
      ++rerouted;
      CHECK(op.pipeline == 0);
      CHECK(op.stage == 1);
      if (op.forward) {
        CHECK(sc->ops[op.dep].pipeline == 0);
        CHECK(sc->ops[op.dep].stage == 0);
      } else {
        CHECK(sc->ops[op.dep].pipeline == 0);
        CHECK(sc->ops[op.dep].stage == 2);
      }
    }
  CHECK(rerouted == 8);  // forward and backward of 4 micro-batches
  // A stage of the 3-stage pipeline has no peer: infeasible, naming the stage.
  dead[2][0] = true;
  auto bad = ReroutedComputeTime(m, p, dead, 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("stage 0 of pipeline 2") != std::string::npos);
  // Through the policy evaluation: the failure of unit 1 (pipeline 0, stage 1) can be rerouted.
  Layout cur = Layout::Of(p, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  SearchOptions so;
  so.micro_batches = 12;
  std::vector<bool> alive(11, true);
  RecoveryCosts costs;
  auto ev = EvaluateFailure(m, cur, {1}, alive, 12, so, costs);
  CHECK(ev.candidates[0].feasible);
  CHECK(ev.candidates[0].step_time > p.step_time);
  auto ev2 = EvaluateFailure(m, cur, {8}, alive, 12, so, costs);
  CHECK_FALSE(ev2.candidates[0].feasible);
}

TEST_CASE("the copy time is bounded by the busiest sender or receiver", "[odyssey]") {
  // One node receives two layers from two different holders: each sender sends 10, the
  // receiver takes 20.
  auto t = PlanTransfer({{0}, {1}, {}}, {{0}, {1}, {0, 1}}, {10, 10});
  REQUIRE(t.ok());
  CHECK(t->max_sender_bytes == 10);
  CHECK(t->max_receiver_bytes == 20);
  CHECK(t->max_link_bytes() == 20);
}

TEST_CASE("a profile from the measured step time reproduces the step and extrapolates", "[odyssey]") {
  // A job with a heavier last layer, measured on DP2 × PP4: spreading its step time over the
  // layers by their parameters gives back the true profile (times proportional to parameters)
  // and so the true step time of another plan.
  ModelProfile truth;
  std::vector<LayerState> state;
  for (int l = 0; l < 16; ++l) {
    LayerProfile lp;
    lp.param_bytes = (l == 15 ? 3 : 1) * (8u << 20);
    lp.optimizer_bytes = 2 * lp.param_bytes;
    lp.forward = 0.5 * (lp.param_bytes >> 20);  // proportional to parameters
    lp.backward = 2 * lp.forward;
    truth.layers.push_back(lp);
    state.push_back({lp.param_bytes, lp.optimizer_bytes, 0});
  }
  SearchOptions so;
  so.micro_batches = 16;
  so.network = NetworkSpec{1e6, 0.01};
  ExecutionPlan running;
  running.layers_per_stage = {{4, 4, 4, 4}, {4, 4, 4, 4}};
  running.micro_batches = {8, 8};
  ExecutionPlan measured = running;
  REQUIRE(EstimateStep(truth, so, measured).ok());
  auto derived = ProfileFromStepTime(state, running, measured.step_time, so);
  REQUIRE(derived.ok());
  for (int l = 0; l < 16; ++l) CHECK(derived->layers[l].forward == Approx(truth.layers[l].forward));
  ExecutionPlan other;
  other.layers_per_stage = {{6, 5, 5}, {6, 5, 5}, {8, 8}};
  other.micro_batches = {5, 5, 6};
  ExecutionPlan a = other, b = other;
  REQUIRE(EstimateStep(truth, so, a).ok());
  REQUIRE(EstimateStep(*derived, so, b).ok());
  CHECK(b.step_time == Approx(a.step_time));
  // A step shorter than its own all-reduce is rejected with the field named.
  auto bad = ProfileFromStepTime(state, running, 1e-3, so);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("job.step_ms") != std::string::npos);
}

TEST_CASE("rerouting schedules never deadlock and never beat the failure-free plan", "[odyssey]") {
  // Failed stages in several pipelines at once (e.g. stage 1 of one pipeline and stage 0 of
  // another) used to make two peers wait for each other.
  auto m = Uniform(12);
  std::mt19937_64 rng(17);
  int feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    ExecutionPlan p;
    const int P = 2 + trial % 4;
    for (int q = 0; q < P; ++q) p.layers_per_stage.push_back(q % 3 == 2 ? std::vector<int>{6, 6} : std::vector<int>{4, 4, 4});
    for (int q = 0; q < P; ++q) p.micro_batches.push_back(1 + static_cast<int>(rng() % 6));
    std::vector<std::vector<bool>> dead;
    for (const auto& x : p.layers_per_stage) {
      dead.emplace_back();
      for (size_t s = 0; s < x.size(); ++s) dead.back().push_back(rng() % 5 == 0);
    }
    auto r = ReroutedComputeTime(m, p, dead, 0.1);
    INFO("trial " << trial << ": " << r.status().ToString());
    if (!r.ok()) {
      CHECK(r.status().code() == reft::StatusCode::kInvalidArgument);  // no live peer, never a deadlock
      continue;
    }
    ++feasible;
    std::vector<std::vector<bool>> none;
    for (const auto& x : p.layers_per_stage) none.emplace_back(x.size(), false);
    CHECK(*r >= *ReroutedComputeTime(m, p, none, 0.1) - 1e-9);
  }
  CHECK(feasible > 100);
}

TEST_CASE("odyssey: a uniform search plans identical pipelines and leaves the rest idle") {
  auto m = Uniform(8);
  SearchOptions o;
  o.micro_batches = 12;
  o.max_dp = 3;  // at most 3 pipelines: 7 nodes cannot all be used by identical ones
  o.uniform = true;
  auto p = BestPlan(m, 7, o);
  REQUIRE(p.ok());
  for (const auto& pipe : p->layers_per_stage) CHECK(pipe == p->layers_per_stage[0]);
  int nodes = 0;
  for (const auto& pipe : p->layers_per_stage) nodes += static_cast<int>(pipe.size());
  CHECK(nodes <= 7);
  CHECK(p->layers_per_stage.size() == 3);  // 3 x 2 beats 3 x 1 and 1 x 7 here
  CHECK(p->layers_per_stage[0].size() == 2);
  o.uniform = false;  // Odyssey's search uses every node, in pipelines of different lengths
  auto mixed = BestPlan(m, 7, o);
  REQUIRE(mixed.ok());
  int all = 0;
  for (const auto& pipe : mixed->layers_per_stage) all += static_cast<int>(pipe.size());
  CHECK(all == 7);
}

TEST_CASE("A13: Kuhn-Munkres counts what a holder of sharded layers still pulls", "[odyssey]") {
  // One position hosts layers 0..2 (100 bytes each). n0 kept layers 0 and 1 of a DP4 stage
  // (it holds a quarter of each: its shard and nothing more), n1 holds layer 2 whole.
  const std::vector<std::vector<int>> held = {{0, 1}, {2}};
  const std::vector<std::vector<int>> roles = {{0, 1, 2}};
  const std::vector<uint64_t> bytes = {100, 100, 100};
  // Whole-layer holdings (Odyssey's model): n0 lacks one layer, n1 two: n0 is chosen.
  auto whole = PlanTransfer(held, roles, bytes);
  REQUIRE(whole.ok());
  CHECK(whole->position_of_node == std::vector<int>{0, -1});
  CHECK(whole->total_bytes == 100);
  CHECK(whole->fill_bytes == 0);
  // With what n0 really holds it would pull 75 + 75 + 100: n1 pulling 200 is cheaper.
  const HeldBytes share = {{25, 25, 0}, {0, 0, 100}};
  auto sharded = PlanTransfer(held, roles, bytes, share);
  REQUIRE(sharded.ok());
  CHECK(sharded->position_of_node == std::vector<int>{-1, 0});
  CHECK(sharded->total_bytes == 200);
  CHECK(sharded->fill_bytes == 0);
  CHECK(sharded->max_receiver_bytes == 200);
  // The baseline keeps n0 at position 0 and counts its fills.
  auto positional = PositionalTransfer(held, roles, bytes, share);
  REQUIRE(positional.ok());
  CHECK(positional->total_bytes == 100);
  CHECK(positional->fill_bytes == 150);
  CHECK(positional->max_receiver_bytes == 250);
}
