#include <catch2/catch.hpp>

#include <cmath>

#include "reft/planner/reliability.h"

using namespace reft::planner;

TEST_CASE("A1: eq. 5 reproduces 16.22 days at c=1.3, checkpoint in [0.40, 0.50]", "[reliability]") {
  ReliabilityParams p;  // k=3072, g=6, λhw=1e-4, λsw=1e-5
  p.shape = 1.3;
  const double reft = TimeToThreshold([&](double t) { return SurvivalReft(p, t); }, 0.9);
  CHECK(std::fabs(reft - 16.22) / 16.22 < 0.01);
  CHECK(reft == Approx(16.18).epsilon(0.002));
  const double ck = TimeToThreshold([&](double t) { return SurvivalCheckpoint(p, t, true); }, 0.9);
  CHECK(ck >= 0.40);
  CHECK(ck <= 0.50);
  // The other shapes of the REFT paper's table.
  const double want[][2] = {{1.0, 37.29}, {1.5, 11.16}, {2.0, 6.11}};
  for (auto& w : want) {
    p.shape = w[0];
    CHECK(TimeToThreshold([&](double t) { return SurvivalReft(p, t); }, 0.9) == Approx(w[1]).epsilon(0.005));
  }
}

TEST_CASE("A1: Monte-Carlo within 0.01 of the closed form", "[reliability]") {
  ReliabilityParams p;
  p.nodes = 96;  // smaller system so 1e5 trials stay fast; same SG structure
  p.sg_size = 6;
  p.lambda_hw = 1e-3;
  p.shape = 1.3;
  const double t90 = TimeToThreshold([&](double t) { return SurvivalReft(p, t); }, 0.9);
  const std::vector<double> times = {0.5 * t90, t90, 1.5 * t90};
  auto mc = MonteCarloReft(p, times, 100000, 42);
  for (size_t i = 0; i < times.size(); ++i) CHECK(std::fabs(mc[i] - SurvivalReft(p, times[i])) < 0.01);
}

TEST_CASE("reliability parameters are validated", "[reliability]") {
  ReliabilityParams p;
  p.sg_size = 7;
  CHECK(Validate(p).message().find("sg_size") != std::string::npos);
  p = {};
  p.p_smp = 1.5;
  CHECK(Validate(p).message().find("p_smp") != std::string::npos);
}
