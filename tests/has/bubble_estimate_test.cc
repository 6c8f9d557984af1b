#include <catch2/catch.hpp>

#include <random>

#include "test_support.h"

#include "reft/has/bubble_estimate.h"
#include "reft/has/schedule.h"

using namespace reft::has;
using reft::planner::PipelineSpec;

namespace {
PipelineSpec Uniform(int stages, int micro, double f, double b) {
  PipelineSpec p;
  p.forward.assign(stages, f);
  p.backward.assign(stages, b);
  p.micro_batches = micro;
  return p;
}
}  // namespace

TEST_CASE("simulated idle of a uniform 1F1B stage is (S-1)(F+B) and the paper formula about 2x", "[has]") {
  auto r = EstimateBubbles(Uniform(4, 16, 1.0, 2.0), 0.8);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 4);
  for (int p = 0; p < 4; ++p) {
    const auto& s = (*r)[p];
    CHECK(s.idle == Approx(9.0));
    CHECK(s.t_bubble == Approx(0.8 * 9.0));
    CHECK(s.busy == Approx(48.0));
    CHECK(s.idle + s.busy == Approx(s.makespan));
    // The literal reading of the printed formula over-estimates every stage by ~2x.
    CHECK(PaperBubbleEstimate(p, 4, 3.0) > 1.7 * s.idle);
  }
  CHECK_FALSE(EstimateBubbles(Uniform(2, 4, 1, 2), 0.0).ok());
  CHECK_FALSE(EstimateBubbles(Uniform(2, 4, 1, 2), 1.5).ok());
}

TEST_CASE("SplitParameter equals a brute-force chunk count and a simulated single-bubble fill",
          "[has]") {
  std::mt19937_64 rng(reft::testing::TestSeed(11));
  std::uniform_int_distribution<int> chunks(1, 200);
  std::uniform_real_distribution<double> frac(0.0, 1.6);
  const uint64_t chunk = 1 << 20;
  const double bw = 1e9;
  for (int trial = 0; trial < 500; ++trial) {
    const uint64_t bytes = chunk * chunks(rng);
    const double t_ss = EstimateSnapshotTime(bytes, bw);
    const double t_bubble = t_ss * frac(rng);
    Split s = SplitParameter(bytes, chunk, t_ss, t_bubble);
    REQUIRE(s.bubble_bytes + s.compute_bytes == bytes);
    REQUIRE(s.bubble_bytes % chunk == 0);
    // Brute force: the largest whole number of chunks k with k/n <= t_bubble/t_ss.
    const uint64_t n = bytes / chunk;
    uint64_t best = 0;
    for (uint64_t k = 0; k <= n; ++k) {
      if (static_cast<double>(k) * t_ss <= static_cast<double>(n) * t_bubble * (1 + 1e-12)) best = k;
    }
    CHECK(s.bubble_bytes == best * chunk);
    // Simulated: one bubble of t_bubble followed by compute; the plan puts the same bytes in it.
    PlanOptions o;
    o.chunk_bytes = chunk;
    o.deadline = t_bubble + t_ss + 1.0;
    auto plan = PlanSnapshot({{WorkKind::kCopy, bytes, bw}},
                             {{0, t_bubble, Layer::kBubble}, {t_bubble, o.deadline, Layer::kCompute}}, o);
    REQUIRE(plan.ok());
    const uint64_t in_bubble = plan->bytes_in[static_cast<int>(Layer::kBubble)];
    CHECK((in_bubble == s.bubble_bytes || in_bubble == s.bubble_bytes + chunk ||
           in_bubble + chunk == s.bubble_bytes));  // floating-point edge of a whole chunk
    CHECK(plan->deferred_bytes() == 0);
  }
}
