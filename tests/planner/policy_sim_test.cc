// The policy simulator: one trace for every policy, each policy in its own terms.
#include <catch2/catch.hpp>

#include <algorithm>

#include "policy_sim.h"
#include "uniform_model.h"

using namespace reft::planner;

namespace {
ModelProfile Uniform(int L, double f) { return testing::UniformModel(L, f); }
PolicySimConfig Small() {
  PolicySimConfig c;
  c.nodes = 16;
  c.dp = 4;
  c.pp = 4;
  c.micro_batches = 16;
  c.hours = 3;
  c.failure_rate_per_hour = 0.05;
  return c;
}
struct ThreePolicies {
  PolicyRun odyssey, oobleck, recycle;
};
// The three policies on the trace of one seed.
ThreePolicies RunAll(const ModelProfile& m, const PolicySimConfig& c, uint64_t seed) {
  auto o = SimulatePolicy(m, c, PolicyKind::kOdyssey, seed);
  auto b = SimulatePolicy(m, c, PolicyKind::kOobleck, seed);
  auto r = SimulatePolicy(m, c, PolicyKind::kRecycle, seed);
  REQUIRE(o.ok());
  REQUIRE(b.ok());
  REQUIRE(r.ok());
  return {*o, *b, *r};
}
}  // namespace

TEST_CASE("A15 shape: the three policies see one trace", "[policy]") {
  const auto m = Uniform(16, 5);
  const auto c = Small();
  const auto run = RunAll(m, c, 3);
  const auto *o = &run.odyssey, *b = &run.oobleck, *r = &run.recycle;
  CHECK(o->failures == b->failures);
  CHECK(o->failures == r->failures);
  CHECK(o->failures > 0);
  CHECK(o->throughput > 0);
  // The Oobleck-like baseline reconfigures on every failure it sees, with its own mechanism.
  for (const auto& d : b->decisions)
    CHECK((d == "reinstantiate" || d == "borrow" || d == "merge" || d == "global" || d == "checkpoint-restart"));
  for (const auto& d : r->decisions) CHECK((d == "reroute" || d == "checkpoint-restart"));
}

TEST_CASE("without failures every policy runs the same plan", "[policy]") {
  const auto m = Uniform(16, 5);
  auto c = Small();
  c.failure_rate_per_hour = 1e-9;
  const auto run = RunAll(m, c, 1);
  const auto *o = &run.odyssey, *b = &run.oobleck, *r = &run.recycle;
  CHECK(o->failures == 0);
  CHECK(o->throughput == Approx(b->throughput));
  CHECK(o->throughput == Approx(r->throughput));
  CHECK(o->downtime_ms == 0);
}

TEST_CASE("ReCycle-like rolls back to the checkpoint and restarts symmetric when a stage dies", "[policy]") {
  // DP 2: the second failure in a stage leaves it without a replica.
  const auto m = Uniform(8, 5);
  PolicySimConfig c;
  c.nodes = 8;
  c.dp = 2;
  c.pp = 4;
  c.micro_batches = 8;
  c.hours = 6;
  c.failure_rate_per_hour = 0.3;
  c.checkpoint_interval_ms = 3.6e6;
  c.min_pp = 2;
  int restarted = 0, rerouted_after = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto r = SimulatePolicy(m, c, PolicyKind::kRecycle, seed);
    REQUIRE(r.ok());
    const auto it = std::find(r->decisions.begin(), r->decisions.end(), "checkpoint-restart");
    if (it == r->decisions.end()) continue;
    ++restarted;
    CHECK(r->downtime_ms >= c.restart_ms + c.checkpoint_load_ms);
    // The restarted plan is symmetric, so the next failure is rerouted again.
    rerouted_after += it + 1 != r->decisions.end() && *(it + 1) == "reroute";
  }
  CHECK(restarted > 0);
  CHECK(rerouted_after > 0);
}

TEST_CASE("the policy simulator rejects impossible setups", "[policy]") {
  const auto m = Uniform(8, 5);
  auto c = Small();
  c.dp = 8;
  CHECK(SimulatePolicy(m, c, PolicyKind::kOdyssey, 1).status().message().find("dp*pp") != std::string::npos);
  c = Small();
  c.failure_rate_per_hour = 0;
  CHECK_FALSE(SimulatePolicy(m, c, PolicyKind::kRecycle, 1).ok());
}
