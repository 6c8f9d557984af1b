#include <catch2/catch.hpp>

#include <random>

#include "oobleck.h"
#include "reft/planner/pipeline_sim.h"

using namespace reft::planner;

TEST_CASE("1F1B makespan of uniform stages is (N+S-1)(F+B)", "[sim]") {
  for (int S = 1; S <= 8; ++S)
    for (int N : {S, 4 * S, 1, 3}) {
      PipelineSpec p;
      p.forward.assign(S, 1.0);
      p.backward.assign(S, 2.0);
      p.micro_batches = N;
      auto r = SimulatePipeline(p);
      REQUIRE(r.ok());
      CHECK(r->makespan == Approx((N + S - 1) * 3.0));
      for (double b : r->busy) CHECK(b == Approx(N * 3.0));
    }
}

TEST_CASE("1F1B schedule respects dependencies and stage order", "[sim]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.5, 3.0);
  PipelineSpec p;
  for (int i = 0; i < 5; ++i) { p.forward.push_back(u(rng)); p.backward.push_back(u(rng)); }
  p.edge_latency = {0.1, 0.2, 0.0, 0.3};
  p.micro_batches = 7;
  p.rerouted = {0, 2, 0, 3, 1};
  auto r = SimulatePipeline(p, true);
  REQUIRE(r.ok());
  for (int s = 0; s < 5; ++s) {
    const auto& ops = r->ops[s];
    CHECK(ops.size() == 2u * (7 + p.rerouted[s]));
    for (size_t k = 1; k < ops.size(); ++k) CHECK(ops[k].start >= ops[k - 1].end - 1e-12);
    // Warm-up: stage s runs min(S-s-1, M) forwards before its first backward.
    int lead = 0;
    while (lead < static_cast<int>(ops.size()) && ops[lead].forward) ++lead;
    if (p.rerouted[s] == 0) CHECK(lead == std::min(5 - s - 1, 7) + 1);
    CHECK(lead >= std::min(5 - s - 1, 7) + 1);
  }
  // Rerouted work makes the step longer than without it.
  PipelineSpec q = p;
  q.rerouted.clear();
  CHECK(SimulatePipeline(q)->makespan < r->makespan);
}

TEST_CASE("edge latency adds to the critical path", "[sim]") {
  PipelineSpec p;
  p.forward = {1, 1};
  p.backward = {1, 1};
  p.micro_batches = 1;
  p.edge_latency = {0.5};
  CHECK(SimulatePipeline(p)->makespan == Approx(4 + 2 * 0.5));
}

TEST_CASE("simulator rejects bad input naming the field", "[sim]") {
  PipelineSpec p;
  CHECK(SimulatePipeline(p).status().message().find("pipeline.forward") != std::string::npos);
  p.forward = {1, -1};
  p.backward = {1, 1};
  CHECK(SimulatePipeline(p).status().message().find("negative") != std::string::npos);
  p.forward = {1, 1};
  p.micro_batches = 0;
  CHECK(SimulatePipeline(p).status().message().find("micro_batches") != std::string::npos);
  p.micro_batches = 1;
  p.edge_latency = {1, 2};
  CHECK(SimulatePipeline(p).status().message().find("edge_latency") != std::string::npos);
}

TEST_CASE("T1/T2/T3 model against the simulator", "[sim][oobleck]") {
  // Uniform: exact. Random: never above the simulated makespan, close on average.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  double sum_rel = 0;
  int trials = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int L = 4 + trial % 12;
    ModelProfile m;
    for (int l = 0; l < L; ++l) {
      LayerProfile lp;
      lp.forward = trial < 20 ? 1.0 : u(rng);
      lp.backward = 2 * lp.forward;
      m.layers.push_back(lp);
    }
    ClusterSpec c;
    c.nodes = 1 + trial % 4;
    c.gpus_per_node = 1;
    oobleck::TemplatePlanner tp(m, c);
    auto t = tp.Plan(std::min(c.nodes, L));
    REQUIRE(t.ok());
    const int S = static_cast<int>(t->stages.size());
    auto sim = SimulatePipeline(t->ToSpec(4 * S));
    REQUIRE(sim.ok());
    CHECK(t->iteration_time <= sim->makespan * (1 + 1e-6));
    if (trial < 20 && L % S == 0) CHECK(t->iteration_time == Approx(sim->makespan));
    sum_rel += (sim->makespan - t->iteration_time) / sim->makespan;
    ++trials;
  }
  CHECK(sum_rel / trials < 0.05);
}
