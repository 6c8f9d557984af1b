#pragma once
/// \file reliability.h
/// \brief REFT reliability model (eqs. 5–6 corrected, docs/planner.md: n is the SG size, P_re a
/// survival probability) and its Monte-Carlo check.
/// Pure functions; thread-safe.

#include <cstdint>
#include <functional>
#include <vector>

#include "reft/result.h"

namespace reft::planner {

struct ReliabilityParams {
  int nodes = 3072;           ///< k (each device counted as a node)
  int sg_size = 6;            ///< g = SG size = DP degree (the paper's "n" in eq. 5)
  double lambda_hw = 1e-4;    ///< Weibull scale of hardware failures (per day^c)
  double lambda_sw = 1e-5;    ///< software failures (eq. 6's P_tr)
  double shape = 1.3;         ///< c
  double p_smp = 1.0;         ///< survival probability of one node's snapshot program (a survival
                              ///< probability: the paper's P_re wording is reversed)
};
Status Validate(const ReliabilityParams& p);

/// eq. 5 corrected: [P_s^g + g(1−P_s)P_s^(g−1)]^(k/g) · P_smp^k, P_s = exp(−λ_hw t^c).
double SurvivalReft(const ReliabilityParams& p, double t);
/// eq. 6: P_s^k · P_tr^k (checkpoint-only); `with_software` = false drops P_tr.
double SurvivalCheckpoint(const ReliabilityParams& p, double t, bool with_software = true);
/// \brief Time at which `survival(t)` falls to `threshold` (bisection on a monotone function).
double TimeToThreshold(const std::function<double(double)>& survival, double threshold);

/// \brief Monte-Carlo estimate of the REFT survival at each time in `times`: sample Weibull
/// failure times of every node; the system dies at the second failure inside any SG.
std::vector<double> MonteCarloReft(const ReliabilityParams& p, const std::vector<double>& times,
                                   int trials, uint64_t seed);

}  // namespace reft::planner
