#include "reliability.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace reft::planner {

Status Validate(const ReliabilityParams& p) {
  if (p.nodes < 1) return Status::InvalidArgument("reliability.nodes: must be >= 1");
  if (p.sg_size < 1 || p.nodes % p.sg_size != 0)
    return Status::InvalidArgument("reliability.sg_size: must be >= 1 and divide nodes");
  if (!(p.lambda_hw >= 0)) return Status::InvalidArgument("reliability.lambda_hw: must be >= 0");
  if (!(p.lambda_sw >= 0)) return Status::InvalidArgument("reliability.lambda_sw: must be >= 0");
  if (!(p.shape > 0)) return Status::InvalidArgument("reliability.shape: must be > 0");
  if (!(p.p_smp > 0 && p.p_smp <= 1)) return Status::InvalidArgument("reliability.p_smp: must be in (0, 1]");
  return Status::OK();
}

double SurvivalReft(const ReliabilityParams& p, double t) {
  const double ps = std::exp(-p.lambda_hw * std::pow(t, p.shape));
  const int g = p.sg_size;
  const double sg = std::pow(ps, g) + g * (1 - ps) * std::pow(ps, g - 1);
  return std::pow(sg, static_cast<double>(p.nodes) / g) * std::pow(p.p_smp, p.nodes);
}

double SurvivalCheckpoint(const ReliabilityParams& p, double t, bool with_software) {
  const double lam = p.lambda_hw + (with_software ? p.lambda_sw : 0);
  return std::exp(-lam * std::pow(t, p.shape) * p.nodes);
}

double TimeToThreshold(const std::function<double(double)>& survival, double threshold) {
  double lo = 0, hi = 1;
  while (survival(hi) > threshold && hi < 1e9) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (survival(mid) > threshold ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<double> MonteCarloReft(const ReliabilityParams& p, const std::vector<double>& times,
                                   int trials, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<long> alive(times.size(), 0);
  const int groups = p.nodes / p.sg_size;
  for (int tr = 0; tr < trials; ++tr) {
    double death = std::numeric_limits<double>::infinity();
    for (int gi = 0; gi < groups; ++gi) {
      double a = std::numeric_limits<double>::infinity(), b = a;  // two earliest failures
      for (int k = 0; k < p.sg_size; ++k) {
        // Weibull with survival exp(−λ t^c): t = (−ln U / λ)^(1/c).
        const double x = p.lambda_hw > 0
                             ? std::pow(-std::log(1 - u(rng)) / p.lambda_hw, 1 / p.shape)
                             : std::numeric_limits<double>::infinity();
        if (x < a) { b = a; a = x; } else if (x < b) { b = x; }
      }
      death = std::min(death, b);
    }
    for (size_t i = 0; i < times.size(); ++i)
      if (death > times[i]) ++alive[i];
  }
  std::vector<double> out;
  for (size_t i = 0; i < times.size(); ++i)
    out.push_back(static_cast<double>(alive[i]) / trials * std::pow(p.p_smp, p.nodes));
  return out;
}

}  // namespace reft::planner
