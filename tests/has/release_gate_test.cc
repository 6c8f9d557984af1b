#include <catch2/catch.hpp>

#include "reft/has/bubble_estimate.h"
#include "reft/has/release_gate.h"

using namespace reft::has;

namespace {

struct Outcome {
  double finish = 0;
  uint64_t bytes = 0, in_bubble = 0;  // in_bubble: copy interval entirely inside a true bubble
};

// Drives the gate with a fake clock over one stage's true timeline (the hints are exact).
Outcome Run(const StageBubbles& s, uint64_t bytes, uint64_t chunk, double bw, bool seed) {
  GateOptions go;
  go.bytes_per_second = bw;
  ReleaseGate gate(go);
  if (seed) gate.profiler().Seed(s.windows, s.makespan);
  gate.Begin(0, bytes);
  auto in_bubble = [&](double t) {
    for (auto [a, b] : s.windows) if (t >= a && t < b) return true;
    return false;
  };
  Outcome o;
  double t = 0;
  uint64_t remaining = bytes;
  while (remaining > 0) {
    const uint64_t c = std::min(chunk, remaining);
    Layer l = gate.Decide(t, remaining, c, in_bubble(t), t >= s.makespan);
    if (l == Layer::kDeferred) { t += 50e-6; continue; }
    const double end = t + static_cast<double>(c) / bw;
    bool inside = false;
    for (auto [a, b] : s.windows) if (t >= a && end <= b + 1e-12) inside = true;
    if (inside) o.in_bubble += c;
    gate.ObserveCopy(c, end - t);
    t = end;
    remaining -= c;
  }
  o.finish = t;
  o.bytes = bytes;
  return o;
}

}  // namespace

TEST_CASE("release gate: deadline kept and >= 95 % in bubbles when t_ss <= t_bubble", "[has]") {
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
      INFO("stages " << stages << " stage " << p);
      auto fit = Run(s, static_cast<uint64_t>(0.9 * s.t_bubble * bw), 256 << 10, bw, true);
      CHECK(fit.finish <= s.makespan);
      CHECK(fit.in_bubble >= 0.95 * fit.bytes);
      // t_ss = 2 * makespan-worth of bubbles: part goes alongside compute, deadline still kept
      // as long as t_ss fits the whole step.
      auto big = Run(s, static_cast<uint64_t>(0.7 * s.makespan * bw), 256 << 10, bw, true);
      CHECK(big.finish <= s.makespan);
      CHECK(big.in_bubble > 0);
      CHECK(big.in_bubble < big.bytes);
    }
  }
}

TEST_CASE("release gate without a prediction copies at once and a fence releases everything", "[has]") {
  ReleaseGate gate(GateOptions{});
  gate.Begin(10.0, 100);
  CHECK(gate.Decide(10.0, 100, 10, false, false) == Layer::kCompute);
  gate.profiler().Seed({{0.5, 0.9}}, 1.0);
  CHECK(gate.Decide(10.0, 100, 10, false, false) == Layer::kDeferred);  // waits for the bubble
  CHECK(gate.Decide(10.6, 100, 10, true, false) == Layer::kBubble);
  CHECK(gate.Decide(10.1, 100, 10, false, true) == Layer::kCompute);   // fence waiting
  CHECK(gate.Decide(10.0, 100, 10, false, false) == Layer::kDeferred);
  CHECK(gate.Decide(11.0, 100, 10, false, false) == Layer::kCompute);  // past the deadline
  gate.ObserveCopy(2000, 1e-6);
  CHECK(gate.bytes_per_second() > 1e9);
}

TEST_CASE("idle profiler starts from the seed and follows measurements", "[has]") {
  IdleProfiler p(0.5);
  CHECK_FALSE(p.has_prediction());
  p.Seed({{1, 2}}, 4);
  CHECK(p.IdleBetween(0, 4) == Approx(1));
  p.Observe({{1, 3}}, 6);  // first measurement replaces the simulator estimate
  CHECK(p.IdleBetween(0, 10) == Approx(2));
  p.Observe({{1, 2}}, 6);
  CHECK(p.windows()[0].second == Approx(2.5));
  CHECK(p.deadline() == Approx(6));
  p.Observe({{0, 1}, {2, 3}}, 5);  // structure changed: replaced
  CHECK(p.windows().size() == 2);
}

TEST_CASE("a missed deadline lowers the trust in bubbles and clean snapshots restore it", "[has]") {
  GateOptions o;
  o.safety = 0.8;
  ReleaseGate gate(o);
  gate.profiler().Seed({{0.0, 0.5}}, 1.0);
  gate.Begin(0, 0);
  // 0.35 s of copy, 0.4 s of trusted bubble: waits for the bubble; after a miss 0.3 s.
  const uint64_t bytes = 350'000'000;
  CHECK(gate.Decide(0.0, bytes, 1, false, false) == Layer::kDeferred);
  gate.EndSnapshot(true);
  CHECK(gate.trust() == Approx(0.6));
  CHECK(gate.Decide(0.0, bytes, 1, false, false) == Layer::kCompute);  // W_* goes now
  for (int i = 0; i < 10; ++i) gate.EndSnapshot(false);
  CHECK(gate.trust() == Approx(0.8));
}
