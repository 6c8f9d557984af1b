// The data-parallel all-reduce term: ring cost, colour rounds, and that plan searches count it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "reft/planner/allreduce.h"
#include "reft/planner/odyssey.h"
#include "uniform_model.h"

using namespace reft::planner;

namespace {
ModelProfile Uniform(int L, uint64_t param_bytes) { return testing::UniformModel(L, 10, param_bytes); }
// The ring formula written out here, not taken from the code under test.
double Ring(double bytes, int p, double beta, double alpha) { return 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes / beta; }
}  // namespace

TEST_CASE("ring all-reduce cost", "[allreduce]") {
  NetworkSpec net{1e6, 0.01};
  CHECK(RingAllReduceMs(8e6, 1, net) == 0);
  CHECK(RingAllReduceMs(8e6, 2, net) == Approx(Ring(8e6, 2, 1e6, 0.01)));
  CHECK(RingAllReduceMs(8e6, 8, net) == Approx(2 * 7 * 0.01 + 2 * 7 / 8.0 * 8));
  CHECK(RingAllReduceMs(8e6, 8, NetworkSpec::Free()) == 0);
}

TEST_CASE("symmetric plans all-reduce stage by stage in parallel", "[allreduce]") {
  // DP 3 x PP 4 of 16 layers: 4 layers per device, 4 rounds of one layer from every stage.
  const auto m = Uniform(16, 4 << 20);
  NetworkSpec net{2e6, 0.005};
  auto s = GradientSync(m, DevicesOfPipelines({{4, 4, 4, 4}, {4, 4, 4, 4}, {4, 4, 4, 4}}), net);
  CHECK(s.rounds == 4);
  CHECK(s.lower_bound == 4);
  CHECK(s.ms == Approx(4 * Ring(4 << 20, 3, 2e6, 0.005)));
}

TEST_CASE("asymmetric plans need more rounds, sharded stages move less", "[allreduce]") {
  const auto m = Uniform(6, 1 << 20);
  NetworkSpec net{1e6, 0};
  // Odyssey's Figure 4 shape: [0,1,2][3,4,5] and [0,1][2,3][4,5]: 3 rounds, not 3 layers at once.
  auto s = GradientSync(m, DevicesOfPipelines({{3, 3}, {2, 2, 2}}), net);
  CHECK(s.rounds == 3);
  CHECK(s.ms == Approx(3 * Ring(1 << 20, 2, 1e6, 0)));
  // A stage on 2 GPUs shards its gradients: the largest shard bounds each layer.
  std::vector<SyncDevice> devs = {{{0, 1, 2, 3, 4, 5}, 2}, {{0, 1, 2, 3, 4, 5}, 2}};
  CHECK(GradientSync(m, devs, net).ms == Approx(6 * Ring(0.5 * (1 << 20), 2, 1e6, 0)));
}

TEST_CASE("Odyssey's step estimate includes the all-reduce and it changes the choice", "[allreduce][odyssey]") {
  // 8 nodes, 16 layers with large gradients: without the all-reduce more data parallelism wins
  // (less bubble); the slower the link, the fewer pipelines (fewer bytes through each device).
  const auto m = Uniform(16, 64 << 20);
  odyssey::SearchOptions so;
  so.micro_batches = 16;
  so.network = NetworkSpec::Free();
  auto free = odyssey::BestPlan(m, 8, so);
  REQUIRE(free.ok());
  CHECK(free->sync.ms == 0);
  CHECK(free->step_time == free->compute_time);
  size_t last_dp = free->layers_per_stage.size();
  bool some_sync = false;
  for (double beta : {1e7, 1e6, 3e5, 1e5, 1e4}) {
    so.network = NetworkSpec{beta, 0.01};
    auto p = odyssey::BestPlan(m, 8, so);
    REQUIRE(p.ok());
    INFO("beta " << beta);
    CHECK(p->step_time == Approx(p->compute_time + p->sync.ms));
    CHECK(p->layers_per_stage.size() <= last_dp);
    last_dp = p->layers_per_stage.size();
    const int dp = static_cast<int>(p->layers_per_stage.size());
    const bool symmetric = std::all_of(p->layers_per_stage.begin(), p->layers_per_stage.end(),
                                       [&](const auto& x) { return x == p->layers_per_stage[0]; });
    if (dp > 1 && symmetric) {
      // Checked against the formula: as many rounds as layers on one device.
      int per_device = *std::max_element(p->layers_per_stage[0].begin(), p->layers_per_stage[0].end());
      CHECK(p->sync.ms == Approx(per_device * Ring(64 << 20, dp, beta, 0.01)));
      some_sync = true;
    }
  }
  CHECK(some_sync);
  CHECK(last_dp < free->layers_per_stage.size());
}
