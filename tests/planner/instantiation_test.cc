// The Oobleck instantiation search: equal to ranking every vector of X(p, N), past the size at
// which listing stopped, and used by the re-plan after a failure that breaks the layout rules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <random>

#include "reft/planner/api.h"
#include "oobleck.h"
#include "ordering.h"

using namespace reft::planner;
using namespace reft::planner::oobleck;

namespace {

InstantiationModel Model(const ModelProfile& m, int n_min, int n_max, int f, int batch, NetworkSpec net) {
  ClusterSpec c;
  c.nodes = n_max;
  TemplatePlanner tp(m, c);
  InstantiationModel im;
  im.model = &m;
  im.f = f;
  im.global_batch = batch;
  im.network = net;
  for (int n = n_max; n >= n_min; --n) im.templates.insert(im.templates.begin(), *tp.Plan(n));
  return im;
}

// Every x with Σ x_j·n_j = N and Σ x_j >= min_pipelines, by a plain depth-first walk (the
// reference for the search; independent of eq. 5's listing).
void ForEachVector(const std::vector<int>& sizes, int N, int min_pipelines,
                   const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> x(sizes.size(), 0);
  std::function<void(size_t, int, int)> rec = [&](size_t j, int left, int count) {
    if (j == sizes.size()) {
      if (left == 0 && count >= min_pipelines) visit(x);
      return;
    }
    for (int k = 0; k * sizes[j] <= left; ++k) {
      x[j] = k;
      rec(j + 1, left - k * sizes[j], count + k);
    }
    x[j] = 0;
  };
  rec(0, N, 0);
}

// Reference: every vector, each timed by the greedy distribution and the all-reduce.
std::vector<double> AllSteps(const InstantiationModel& im, int N) {
  std::vector<int> sizes;
  for (const auto& t : im.templates) sizes.push_back(t.nodes);
  std::vector<double> steps;
  ForEachVector(sizes, N, im.f + 1, [&](const std::vector<int>& x) {
    std::vector<const PipelineTemplate*> ps;
    std::vector<SyncDevice> devs;
    for (size_t j = 0; j < x.size(); ++j)
      for (int c = 0; c < x[j]; ++c) {
        ps.push_back(&im.templates[j]);
        if (im.network.free()) continue;
        for (const auto& s : im.templates[j].stages) {
          SyncDevice d;
          for (int l = s.first_layer; l < s.last_layer; ++l) d.layers.push_back(l);
          devs.push_back(d);
        }
      }
    auto b = DistributeBatch(ps, im.global_batch, im.micro_batch);
    if (!b.ok()) return;
    steps.push_back(b->step_time + (im.network.free() ? 0 : GradientSync(*im.model, devs, im.network).ms));
  });
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

TEST_CASE("instantiation count equals the listed X(p, N)", "[instantiation]") {
  for (int N = 4; N <= 20; ++N)
    for (int f = 0; f <= 2; ++f) {
      const std::vector<int> sizes = {2, 3, 4, 5};
      CHECK(CountInstantiations(sizes, N, f + 1) == EnumerateInstantiations(sizes, N, f + 1).size());
    }
}

TEST_CASE("the search ranks like timing every vector", "[instantiation]") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 12; ++trial) {
    const auto m = SyntheticModel(12 + trial % 5, trial, 0.3);
    const int n0 = 1 + trial % 2, N = 9 + trial % 6, f = trial % 3;
    if (N < (f + 1) * n0) continue;
    const NetworkSpec net = trial % 2 ? NetworkSpec{5e4, 0.01} : NetworkSpec::Free();
    const auto im = Model(m, n0, std::min(N - f * n0, 10), f, 4 * N, net);
    const auto ref = AllSteps(im, N);
    REQUIRE_FALSE(ref.empty());
    auto s = SearchInstantiations(im, N, 5);
    REQUIRE(s.ok());
    CHECK(s->complete);
    REQUIRE(s->best.size() == std::min<size_t>(5, ref.size()));
    for (size_t i = 0; i < s->best.size(); ++i) {
      INFO("trial " << trial << " rank " << i);
      CHECK(s->best[i].step_ms == Approx(ref[i]).epsilon(1e-9));
      CHECK(s->best[i].throughput == Approx(im.global_batch / ref[i]).epsilon(1e-9));
    }
  }
}

TEST_CASE("no silent cap: more than 100 000 instantiations are searched, not listed", "[instantiation]") {
  // 46 nodes, templates 1..45 (n0 = 1, f = 1): p(46) − 1 = 105 557 vectors, past the 100 000
  // at which listing them used to stop silently.
  const auto m = SyntheticModel(48, 5, 0.2);
  const auto im = Model(m, 1, 45, 1, 64, NetworkSpec::Free());
  auto s = SearchInstantiations(im, 46, 3);
  REQUIRE(s.ok());
  CHECK(s->num_options == 105557u);
  CHECK(s->complete);
  CHECK(s->evaluated < s->num_options);  // the bound prunes
  const auto ref = AllSteps(im, 46);
  REQUIRE(ref.size() == 105557u);  // every vector can run the batch (64 micro-batches >= 46 pipelines)
  for (size_t i = 0; i < 3; ++i) CHECK(s->best[i].step_ms == Approx(ref[i]).epsilon(1e-9));
  // Through the JSON entry point too.
  nlohmann::json in = {{"model", {{"num_layers", 48}, {"layer", {{"forward_ms", 2.0}}}}},
                       {"cluster", {{"nodes", 46}, {"network_gbps", 0}}},
                       {"job", {{"f", 1}, {"n0", 1}, {"global_batch", 64}}},
                       {"top", 2}};
  auto out = PlanInstantiate(in);
  REQUIRE(out.ok());
  CHECK((*out)["num_options"].get<uint64_t>() == 105557u);
  CHECK((*out)["complete"].get<bool>());
}

TEST_CASE("a re-plan that breaks the layout rules chooses by throughput", "[instantiation][oobleck]") {
  // 18 nodes as three 6-node pipelines, f = 1; two whole pipelines fail, one remains: fewer
  // than f+1 pipelines, so all 6 live nodes are re-instantiated. Options: 2+2+2, 2+4, 3+3.
  // Large gradients on a slow link make the all-reduce dominate: 3+3 (a third of the layers per
  // device, two-way rings) beats 2+2+2, which the old rule (smallest largest pipeline) chose.
  ModelProfile m;
  for (int i = 0; i < 12; ++i) {
    LayerProfile l;
    l.forward = 1;
    l.backward = 2;
    l.param_bytes = 256 << 20;
    m.layers.push_back(l);
  }
  const auto spec = *SpecifyNodes(18, 1, 2, 6);  // templates 2..6
  auto im = Model(m, 2, spec.n_max, 1, 12, NetworkSpec{1e5, 0.01});
  std::vector<Pipeline> cur = {{{0, 1, 2, 3, 4, 5}}, {{6, 7, 8, 9, 10, 11}}, {{12, 13, 14, 15, 16, 17}}};
  auto r = HandleFailures(spec, im, cur, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->exit_required);
  std::vector<size_t> sizes;
  for (const auto& p : r->pipelines) sizes.push_back(p.nodes.size());
  CHECK(sizes == std::vector<size_t>{3, 3});
  // The reference: the fastest of the three by the same estimate, computed by listing them.
  const auto ref = AllSteps(im, 6);
  auto s = SearchInstantiations(im, 6, 3);
  REQUIRE(s.ok());
  CHECK(s->best[0].step_ms == Approx(ref[0]));
  CHECK(s->best[0].pipeline_nodes == std::vector<int>{3, 3});
  // The live nodes are the ones used, each once.
  std::vector<int> used;
  for (const auto& p : r->pipelines) used.insert(used.end(), p.nodes.begin(), p.nodes.end());
  std::sort(used.begin(), used.end());
  CHECK(used == std::vector<int>{12, 13, 14, 15, 16, 17});
}

TEST_CASE("instantiation errors name the field", "[instantiation]") {
  const auto m = SyntheticModel(8, 1);
  auto im = Model(m, 2, 4, 1, 10, NetworkSpec::Free());
  im.micro_batch = 4;
  auto s = SearchInstantiations(im, 6, 1);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("job.global_batch") != std::string::npos);
}
