#include <catch2/catch.hpp>

#include <random>

#include "reft/has/bubble_estimate.h"
#include "reft/has/schedule.h"
#include "test_support.h"

using namespace reft::has;

namespace {

std::vector<Window> RandomTimeline(std::mt19937_64& rng, double* deadline) {
  std::uniform_real_distribution<double> len(0.001, 0.02);
  std::uniform_int_distribution<int> kind(0, 2);
  std::vector<Window> w;
  double t = 0;
  for (int i = 0; i < 12; ++i) {
    double l = len(rng);
    w.push_back({t, t + l, static_cast<Layer>(1 + kind(rng))});
    t += l;
  }
  *deadline = t * 0.9;  // some windows extend past the deadline
  return w;
}

bool InsideWindowOfLayer(const Placement& p, const std::vector<Window>& w) {
  for (const auto& x : w) {
    if (x.layer == p.layer && p.start >= x.start - 1e-12 && p.end <= x.end + 1e-12) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("plans never end a chunk after the deadline and respect the layer order", "[has]") {
  std::mt19937_64 rng(reft::testing::TestSeed(5));
  std::uniform_int_distribution<uint64_t> bytes(1, 64ull << 20);
  for (int trial = 0; trial < 300; ++trial) {
    double deadline = 0;
    auto windows = RandomTimeline(rng, &deadline);
    PlanOptions o;
    o.chunk_bytes = 1 << 20;
    o.deadline = deadline;
    o.compute_share = 0.5;
    o.copy_link_differs = (trial % 2) == 0;
    auto plan = PlanSnapshot({{WorkKind::kCopy, bytes(rng), 1e9}}, windows, o);
    REQUIRE(plan.ok());
    bool used_compute = false, used_comm = false;
    for (const auto& p : plan->placements) {
      if (p.layer == Layer::kDeferred) continue;
      CHECK(p.end <= deadline + 1e-12);
      CHECK(InsideWindowOfLayer(p, windows));
      if (p.layer == Layer::kCompute) used_compute = true;
      if (p.layer == Layer::kCommunication) used_comm = true;
    }
    if (!o.copy_link_differs) CHECK_FALSE(used_comm);
    // Layer order: compute is used only when no bubble window (before the deadline) could still
    // take a chunk, communication only when neither bubbles nor compute could.
    auto free_in = [&](Layer layer, double rate) {
      double best = 0;
      for (const auto& w : windows) {
        if (w.layer != layer) continue;
        double end = std::min(w.end, deadline), used = 0;
        for (const auto& p : plan->placements)
          if (p.layer == layer && p.start >= w.start - 1e-12 && p.end <= w.end + 1e-12) used += p.end - p.start;
        best = std::max(best, (end - w.start - used) * rate);
      }
      return best;
    };
    if (used_compute) CHECK(free_in(Layer::kBubble, 1e9) < o.chunk_bytes * (1 + 1e-9));
    if (used_comm) CHECK(free_in(Layer::kCompute, 0.5e9) < o.chunk_bytes * (1 + 1e-9));
    uint64_t sum = 0;
    for (auto b : plan->bytes_in) sum += b;
    uint64_t total = 0;
    for (const auto& p : plan->placements) total += p.bytes;
    CHECK(sum == total);
  }
}

TEST_CASE("when t_ss <= t_bubble at least 95 % of the bytes land in predicted bubbles", "[has]") {
  for (int stages = 2; stages <= 4; ++stages) {
    reft::planner::PipelineSpec spec;
    spec.forward.assign(stages, 0.010);
    spec.backward.assign(stages, 0.020);
    spec.micro_batches = 2 * stages;
    auto est = EstimateBubbles(spec, 0.8);
    REQUIRE(est.ok());
    for (int p = 0; p < stages; ++p) {
      const auto& s = (*est)[p];
      const double bw = 1e9;
      const auto bytes = static_cast<uint64_t>(s.t_bubble * bw);  // t_ss == t_bubble
      PlanOptions o;
      o.chunk_bytes = 256 << 10;
      o.deadline = s.makespan;
      auto plan = PlanSnapshot({{WorkKind::kCopy, bytes, bw}}, TimelineFromBubbles(s.windows, s.makespan), o);
      REQUIRE(plan.ok());
      INFO("stages " << stages << " stage " << p);
      CHECK(plan->bytes_in[static_cast<int>(Layer::kBubble)] >= 0.95 * bytes);
      CHECK(plan->deferred_bytes() == 0);
      CHECK(plan->finish <= o.deadline);
    }
  }
}

TEST_CASE("AEC parity work is placed in bubbles too after the copies", "[has]") {
  PlanOptions o;
  o.chunk_bytes = 1 << 20;
  o.deadline = 1.0;
  std::vector<Window> w = {{0, 0.1, Layer::kCompute}, {0.1, 0.5, Layer::kBubble}, {0.5, 1.0, Layer::kCompute}};
  auto plan = PlanSnapshot({{WorkKind::kCopy, 100ull << 20, 1e9}, {WorkKind::kParity, 50ull << 20, 5e9}}, w, o);
  REQUIRE(plan.ok());
  uint64_t parity_in_bubble = 0;
  for (const auto& p : plan->placements)
    if (p.item == 1 && p.layer == Layer::kBubble) parity_in_bubble += p.bytes;
  CHECK(parity_in_bubble == 50ull << 20);
  CHECK(plan->deferred_bytes() == 0);
}

TEST_CASE("what cannot finish before the deadline is deferred and never placed late", "[has]") {
  PlanOptions o;
  o.chunk_bytes = 1 << 20;
  o.deadline = 0.01;  // 10 ms at 1 GB/s holds 9 whole chunks
  auto plan = PlanSnapshot({{WorkKind::kCopy, 100ull << 20, 1e9}}, TimelineFromBubbles({{0, 0.005}}, 0.01), o);
  REQUIRE(plan.ok());
  CHECK(plan->deferred_bytes() > 0);
  CHECK(plan->finish <= 0.01);
  CHECK_FALSE(PlanSnapshot({{WorkKind::kCopy, 1, 1e9}}, {{0, 1, Layer::kBubble}, {0.5, 2, Layer::kCompute}}, o).ok());
  o.chunk_bytes = 0;
  CHECK_FALSE(PlanSnapshot({{WorkKind::kCopy, 1, 1e9}}, {}, o).ok());
}
