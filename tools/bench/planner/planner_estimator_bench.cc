// A12: Odyssey estimator vs the 1F1B simulator for (PP, DP) = (4,2), (4,4), (2,2), before and
// after one node failure (asymmetric plan, and rerouting with eq. 12/13 beside the simulator).
// 32 Llama-like layers (±5 % jitter), 0.3 ms p2p latency, 8 micro-batches per pipeline.
// Usage: planner_estimator_bench     (JSON lines: relative errors of each estimate)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "reft/planner/odyssey.h"

using namespace reft::planner;
using namespace reft::planner::odyssey;

int main() {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> jit(0.95, 1.05);
  ModelProfile m;
  for (int l = 0; l < 32; ++l) {
    LayerProfile lp;
    lp.forward = 10 * jit(rng);
    lp.backward = 2 * lp.forward;
    m.layers.push_back(lp);
  }
  const double lat = 0.3;
  SearchOptions so;
  so.edge_latency = lat;
  double worst = 0;
  for (auto [pp, dp] : {std::pair{4, 2}, {4, 4}, {2, 2}}) {
    for (int failed = 0; failed <= 1; ++failed) {
      std::vector<int> lens(dp, pp);
      if (failed) lens.back() -= 1;
      if (lens.back() == 0) lens.pop_back();
      auto mb = DistributeBatch(8 * dp, lens);
      double sim = 0, est = 0, eq9 = 0;
      for (size_t p = 0; p < lens.size(); ++p) {
        auto split = SplitLayers(m, lens[p], mb[p], so);
        auto sp = StageSpec(m, *split, mb[p], lat);
        sim = std::max(sim, SimulatePipeline(sp)->makespan);
        est = std::max(est, AnalyticStepTime(sp));
        double tf = 0, tb = 0;
        for (size_t i = 0; i < sp.forward.size(); ++i) { tf = std::max(tf, sp.forward[i]); tb = std::max(tb, sp.backward[i]); }
        eq9 = std::max(eq9, SymmetricStepTime(lens[p], mb[p], tf, tb));
      }
      const double e = std::fabs(est - sim) / sim;
      worst = std::max(worst, e);
      std::printf("{\"bench\":\"estimator\",\"pp\":%d,\"dp\":%d,\"plan\":\"%s\",\"sim_ms\":%.2f,\"estimate_ms\":%.2f,"
                  "\"rel_error\":%.4f,\"eq9_slowest_stage_ms\":%.2f,\"eq9_rel_error\":%.4f}\n",
                  pp, dp, failed ? "asymmetric" : "symmetric", sim, est, e, eq9, std::fabs(eq9 - sim) / sim);
    }
    // Rerouting one failure of stage 0 (symmetric plan, uniform stages).
    std::vector<int> counts(pp, 32 / pp), fps(pp, 0);
    fps[0] = 1;
    auto spec = StageSpec(m, counts, 8, lat);
    double tf = 0, tb = 0;
    for (size_t i = 0; i < spec.forward.size(); ++i) { tf = std::max(tf, spec.forward[i]); tb = std::max(tb, spec.backward[i]); }
    auto rs = ReroutedStepTimeSim(m, counts, dp, 8, fps, lat);
    auto e13 = ReroutedStepTimeEq13(pp, dp, 8, tf, tb, fps);
    std::printf("{\"bench\":\"estimator\",\"pp\":%d,\"dp\":%d,\"plan\":\"rerouted\",\"sim_ms\":%.2f,\"eq13_ms\":%.2f,"
                "\"eq13_rel_error\":%.4f}\n", pp, dp, *rs, *e13, std::fabs(*e13 - *rs) / *rs);
  }
  std::printf("{\"bench\":\"estimator_summary\",\"worst_rel_error\":%.4f,\"bound\":0.0802}\n", worst);
  return worst <= 0.0802 ? 0 : 1;
}
