#include <catch2/catch.hpp>

#include <cmath>

#include "reliability.h"

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
}

namespace {
// An independent computation of eqs. 5 and 6, sharing nothing with the code under test: the
// cumulative hazard of the Weibull, ∫_0^t λ·c·u^(c−1) du, by composite Simpson; one node's
// survival exp(−H); a sharding group of g survives with at most one failed node (binomial);
// k/g independent groups; the time to the threshold by bisection written here.
double CumulativeHazard(double lambda, double c, double t) {
  const int n = 4000;  // even
  const double h = t / n;
  auto f = [&](double u) { return u <= 0 ? (c == 1.0 ? lambda : 0.0) : lambda * c * std::pow(u, c - 1); };
  double sum = f(0) + f(t);
  for (int i = 1; i < n; ++i) sum += (i % 2 ? 4 : 2) * f(i * h);
  return sum * h / 3;
}
double ReftSurvivalByHand(int k, int g, double lambda, double c, double t) {
  const double ps = std::exp(-CumulativeHazard(lambda, c, t));
  const double group = std::pow(ps, g) + g * (1 - ps) * std::pow(ps, g - 1);
  return std::pow(group, static_cast<double>(k) / g);
}
double CheckpointSurvivalByHand(int k, double lambda, double c, double t) {
  return std::pow(std::exp(-CumulativeHazard(lambda, c, t)), k);
}
template <typename F>
double DaysTo(F survival, double threshold) {
  double lo = 0, hi = 1000;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (survival(mid) > threshold ? lo : hi) = mid;
  }
  return lo;
}
}  // namespace

TEST_CASE("A1: eqs. 5 and 6 at every shape against an independent computation", "[reliability]") {
  ReliabilityParams p;  // k=3072, g=6, λhw=1e-4, λsw=1e-5
  for (double c : {1.0, 1.3, 1.5, 2.0}) {
    p.shape = c;
    INFO("c = " << c);
    const double reft = TimeToThreshold([&](double t) { return SurvivalReft(p, t); }, 0.9);
    const double ref = DaysTo([&](double t) { return ReftSurvivalByHand(3072, 6, 1e-4, c, t); }, 0.9);
    CHECK(reft == Approx(ref).epsilon(1e-4));
    const double ck = TimeToThreshold([&](double t) { return SurvivalCheckpoint(p, t, true); }, 0.9);
    const double ck_ref = DaysTo([&](double t) { return CheckpointSurvivalByHand(3072, 1.1e-4, c, t); }, 0.9);
    CHECK(ck == Approx(ck_ref).epsilon(1e-4));
    // And the survival curve itself, not only the crossing.
    for (double t : {0.5 * ref, ref, 2 * ref})
      CHECK(SurvivalReft(p, t) == Approx(ReftSurvivalByHand(3072, 6, 1e-4, c, t)).margin(1e-6));
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
