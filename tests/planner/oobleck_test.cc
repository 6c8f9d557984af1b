#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "reft/planner/odyssey.h"
#include "oobleck.h"

using namespace reft::planner;
using namespace reft::planner::oobleck;

TEST_CASE("A7: X(3,7) and X(3,13) match the paper's vectors", "[oobleck]") {
  const std::vector<int> sizes = {2, 3, 4};
  using V = std::vector<std::vector<int>>;
  auto x7 = EnumerateInstantiations(sizes, 7, 0);
  const V want7 = {{2, 1, 0}, {0, 1, 1}};
  CHECK(std::set<std::vector<int>>(x7.begin(), x7.end()) == std::set<std::vector<int>>(want7.begin(), want7.end()));
  CHECK(x7.size() == 2);
  const V want13 = {{5, 1, 0}, {2, 3, 0}, {3, 1, 1}, {0, 3, 1}, {1, 1, 2}};
  auto x13 = EnumerateInstantiations(sizes, 13, 0);
  CHECK(std::set<std::vector<int>>(x13.begin(), x13.end()) == std::set<std::vector<int>>(want13.begin(), want13.end()));
  CHECK(x13.size() == want13.size());
  // Requirement (2) filters: at least 5 pipelines.
  for (const auto& x : EnumerateInstantiations(sizes, 13, 5)) CHECK(x[0] + x[1] + x[2] >= 5);
  CHECK(EnumerateInstantiations(sizes, 13, 5).size() == 3);
}

TEST_CASE("A7: templates n0..N-f*n0 cover every N' with f+1 pipelines", "[oobleck]") {
  int cases = 0;
  for (int n0 = 1; n0 <= 8; ++n0)
    for (int f = 0; f <= 4; ++f)
      for (int N = (f + 1) * n0; N <= 64; N += 3) {
        auto spec = SpecifyNodes(N, f, n0);
        REQUIRE(spec.ok());
        CHECK(spec->sizes.front() == n0);
        CHECK(spec->sizes.back() == N - f * n0);
        for (int np = (f + 1) * n0; np <= N; ++np) {
          INFO("n0=" << n0 << " f=" << f << " N=" << N << " N'=" << np);
          CHECK(CountInstantiations(spec->sizes, np, f + 1) > 0);
          ++cases;
        }
      }
  CHECK(cases > 1000);
}

TEST_CASE("node specification rejects impossible clusters", "[oobleck]") {
  auto r = SpecifyNodes(5, 2, 2);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("cluster.nodes") != std::string::npos);
  CHECK(SpecifyNodes(20, 1, 4, 5).status().message().find("job.template_cap") != std::string::npos);
  auto capped = SpecifyNodes(40, 1, 3, 6);
  REQUIRE(capped.ok());
  CHECK(capped->n_max == 6);
}

TEST_CASE("stage mapping respects nodes, GPUs and layer order", "[oobleck]") {
  auto m = SyntheticModel(24, 3);
  ClusterSpec c;
  c.nodes = 6;
  c.gpus_per_node = 4;
  TemplatePlanner tp(m, c);
  for (int n = 6; n >= 2; --n) {
    auto t = tp.Plan(n);
    REQUIRE(t.ok());
    int layer = 0;
    std::vector<int> gpus_used(n, 0);
    for (const auto& s : t->stages) {
      CHECK(s.first_layer == layer);
      CHECK(s.last_layer > s.first_layer);
      layer = s.last_layer;
      REQUIRE(s.node < n);
      CHECK(s.first_gpu + s.gpus <= c.gpus_per_node);
      gpus_used[s.node] += s.gpus;
    }
    CHECK(layer == 24);
    for (int g : gpus_used) CHECK(g == c.gpus_per_node);  // every GPU of every node is used
    CHECK(static_cast<int>(t->stages.size()) >= n);
  }
}

TEST_CASE("stage mapping honours device memory (eq. 14)", "[oobleck]") {
  auto m = SyntheticModel(16, 5);
  ClusterSpec c;
  c.nodes = 4;
  c.gpus_per_node = 1;
  // Whole model static state ~ 16 layers * (2*64 + 128) MiB ≈ 4.3 GiB; allow ~1.6 GiB per device.
  c.device_memory_bytes = 1800ull << 20;
  TemplatePlanner tp(m, c);
  CHECK_FALSE(tp.Plan(1).ok());
  CHECK(tp.Plan(1).status().message().find("device_memory") != std::string::npos);
  auto t = tp.Plan(4);
  REQUIRE(t.ok());
  CHECK(MinNodesForMemory(m, c) >= 3);
}

TEST_CASE("A9: greedy batch distribution equals brute force", "[oobleck]") {
  std::mt19937_64 rng(21);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    auto m = SyntheticModel(12, trial, 0.4);
    ClusterSpec c;
    c.nodes = 6;
    TemplatePlanner tp(m, c);
    std::vector<PipelineTemplate> ts;
    for (int n = 2; n <= 5; ++n) ts.push_back(*tp.Plan(n));
    const int x = 1 + trial % 4;
    std::vector<const PipelineTemplate*> ps;
    for (int i = 0; i < x; ++i) ps.push_back(&ts[rng() % ts.size()]);
    const int total = x + static_cast<int>(rng() % (64 - x + 1));
    const int b = 2;
    auto g = DistributeBatch(ps, total * b, b);
    REQUIRE(g.ok());
    int sum = 0;
    for (int n : g->micro_batches) { sum += n; CHECK(n >= 1); }
    CHECK(sum == total);  // global batch preserved
    if (x <= 3 || total <= 40) {
      auto bf = BruteForceBatch(ps, total, b);
      CHECK(g->step_time == Approx(bf.step_time));
      ++checked;
    }
  }
  CHECK(checked > 30);
}

TEST_CASE("batch that cannot be split gets a recommended global batch", "[oobleck]") {
  auto m = SyntheticModel(8, 1);
  ClusterSpec c;
  c.nodes = 4;
  TemplatePlanner tp(m, c);
  auto t = *tp.Plan(2);
  std::vector<const PipelineTemplate*> ps = {&t, &t, &t};
  auto r = DistributeBatch(ps, 10, 4);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("job.global_batch") != std::string::npos);
  CHECK(r.status().message().find("recommended global batch 12") != std::string::npos);
  CHECK(RecommendGlobalBatch(4, 4, 3) == 12);
}

namespace {
// Templates of every size of `spec` for a synthetic model, ready for the instantiation search.
InstantiationModel Instantiation(const ModelProfile& m, const NodeSpec& spec, int f, int global_batch) {
  ClusterSpec c;
  c.nodes = spec.n_max;
  TemplatePlanner tp(m, c);
  InstantiationModel im;
  im.model = &m;
  im.f = f;
  im.global_batch = global_batch;
  for (int n : spec.sizes) im.templates.push_back(*tp.Plan(n));
  return im;
}
}  // namespace

TEST_CASE("failures: reinstantiate, borrow, merge, joins", "[oobleck]") {
  auto spec = *SpecifyNodes(13, 2, 2);  // templates 2..9
  const auto model = SyntheticModel(12, 4);
  const auto im = Instantiation(model, spec, 2, 64);
  std::vector<Pipeline> cur = {{{0, 1, 2, 3}}, {{4, 5, 6}}, {{7, 8}}, {{9, 10}}, {{11, 12}}};
  SECTION("reinstantiate") {
    auto r = *HandleFailures(spec, im, cur, {2});
    CHECK_FALSE(r.exit_required);
    CHECK(r.pipelines[0].nodes == std::vector<int>{0, 1, 3});
    CHECK(r.actions[0].find("reinstantiate p0") != std::string::npos);
  }
  SECTION("borrow from the largest surplus") {
    auto r = *HandleFailures(spec, im, cur, {7});
    CHECK_FALSE(r.exit_required);
    CHECK(r.pipelines[2].nodes.size() == 2u);
    CHECK(r.pipelines[0].nodes.size() == 3u);  // p0 had the largest surplus
    CHECK(r.actions[0].find("borrow 1 node(s) from p0") != std::string::npos);
  }
  SECTION("merge when nobody can lend") {
    std::vector<Pipeline> small = {{{0, 1}}, {{2, 3}}, {{4, 5}}, {{6, 7}}};
    auto s2 = *SpecifyNodes(8, 2, 2);
    auto r = *HandleFailures(s2, Instantiation(model, s2, 2, 64), small, {0});
    CHECK_FALSE(r.exit_required);
    int total = 0;
    for (const auto& p : r.pipelines) {
      total += static_cast<int>(p.nodes.size());
      CHECK(p.nodes.size() >= 2u);
    }
    CHECK(total == 7);
    CHECK(r.pipelines.size() == 3u);
  }
  SECTION("exit below (f+1)n0") {
    auto r = *HandleFailures(spec, im, cur, {0, 1, 2, 3, 4, 5, 6, 7});
    CHECK(r.exit_required);
  }
  SECTION("joins form pipelines or grow the smallest") {
    auto r = HandleJoins(spec, cur, {20, 21, 22});
    CHECK(r.pipelines.size() == 6u);
    int total = 0;
    for (const auto& p : r.pipelines) total += static_cast<int>(p.nodes.size());
    CHECK(total == 16);
  }
}


TEST_CASE("template times are exact doubles of the emitted stages", "[oobleck]") {
  // Jittered layer times are not representable in float; the T1/T2/T3 tuple kept in the memo
  // must equal the same sums done here in double, to 1e-12.
  for (int M : {1, 2}) {
    auto m = SyntheticModel(14, 77, 0.3);
    ClusterSpec c;
    c.nodes = 4;
    c.gpus_per_node = M;
    TemplatePlanner tp(m, c);
    for (int n = 4; n >= 1; --n) {
      auto t = tp.Plan(n);
      REQUIRE(t.ok());
      double t1 = 0, slow = 0, t3 = 0;
      int kstar = 0;
      std::vector<double> cost;
      for (const auto& s : t->stages) {
        double fb = 0;
        for (int l = s.first_layer; l < s.last_layer; ++l) fb += m.F(l, s.gpus) + m.B(l, s.gpus);
        cost.push_back(fb);
        t1 += fb;
      }
      for (size_t i = 0; i < cost.size(); ++i)
        if (cost[i] >= slow * (1 - 1e-9)) { slow = cost[i]; kstar = static_cast<int>(i); }  // latest tie
      for (size_t i = kstar; i < cost.size(); ++i) t3 += cost[i];
      const int S = static_cast<int>(cost.size());
      INFO("M=" << M << " n=" << n);
      CHECK(t->kstar == kstar);
      CHECK(t->t1 == Approx(t1).epsilon(1e-12));
      CHECK(t->slow == Approx(slow).epsilon(1e-12));
      CHECK(t->t3 == Approx(t3).epsilon(1e-12));
      CHECK(t->iteration_time == Approx(t1 + (3.0 * S + kstar - 1) * slow + t3).epsilon(1e-12));
    }
  }
}

TEST_CASE("tied slowest stages: the latest one is k*, whatever the rounding", "[oobleck]") {
  // Layers of 0.1, 0.2 and 0.3 ms forward (backward 2x): stages {0,1} and {2} cost
  // 0.9000000000000001 and 0.9 — equal stages that rounding orders either way. The tie rule
  // makes the second the slowest: T = 1.8 + (3·2 + 1 − 1)·0.9 + 0.9 = 8.1.
  ModelProfile m;
  for (double f : {0.1, 0.2, 0.3}) {
    LayerProfile l;
    l.forward = f;
    l.backward = 2 * f;
    m.layers.push_back(l);
  }
  ClusterSpec c;
  c.nodes = 2;
  TemplatePlanner tp(m, c);
  auto t = tp.Plan(2);
  REQUIRE(t.ok());
  REQUIRE(t->stages.size() == 2u);
  CHECK(t->stages[0].last_layer == 2);
  CHECK(t->kstar == 1);
  CHECK(t->iteration_time == Approx(8.1).epsilon(1e-12));
  // The same rule in the Odyssey estimator: [3, 1, 3] has its latest slowest stage last, which
  // is the 1F1B makespan exactly ((N + 1)·3 + 1); the earliest would say N·3 + 2.
  PipelineSpec p;
  p.forward = {1, 1.0 / 3, 1};
  p.backward = {2, 2.0 / 3, 2};
  for (int N : {3, 6, 12}) {
    p.micro_batches = N;
    INFO("N=" << N);
    CHECK(odyssey::AnalyticStepTime(p) == Approx(SimulatePipeline(p)->makespan));
    CHECK(odyssey::AnalyticStepTime(p) == Approx((N + 1) * 3.0 + 1));
  }
}

TEST_CASE("templates do not depend on the planner's history", "[oobleck]") {
  // The memo is shared between templates: planning sizes in another order, or in a fresh
  // planner, gives the same stages bit for bit.
  auto m = SyntheticModel(20, 9, 0.25);
  ClusterSpec c;
  c.nodes = 5;
  c.gpus_per_node = 2;
  c.device_memory_bytes = 3ull << 30;
  TemplatePlanner down(m, c);
  std::vector<PipelineTemplate> a;
  for (int n = 5; n >= 2; --n) a.push_back(*down.Plan(n));
  for (int n = 2; n <= 5; ++n) {
    TemplatePlanner single(m, c);
    const auto b = *single.Plan(n);
    const auto& x = a[5 - n];
    REQUIRE(x.stages.size() == b.stages.size());
    for (size_t i = 0; i < b.stages.size(); ++i) {
      CHECK(x.stages[i].first_layer == b.stages[i].first_layer);
      CHECK(x.stages[i].gpus == b.stages[i].gpus);
      CHECK(x.stages[i].node == b.stages[i].node);
    }
    CHECK(x.iteration_time == b.iteration_time);
  }
}
