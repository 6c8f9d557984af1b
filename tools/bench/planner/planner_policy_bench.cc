// A15: Odyssey-like vs Oobleck-like vs ReCycle-like recovery on the same failure traces.
// 32 NPUs (PP4 × DP8, TP1), NPU failure rate 10 %/hour, 9 hours, Llama-2-7B-like profile
// (32 layers, 64 GB devices). Prints one JSON line per seed and a summary with the paper's
// 1.229× / 1.355× beside the measured mean ratios.
// Usage: planner_policy_bench [seeds=20]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "reft/planner/odyssey.h"

using namespace reft::planner;
using namespace reft::planner::odyssey;

int main(int argc, char** argv) {
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 20;
  ModelProfile m;
  for (int l = 0; l < 32; ++l) {
    LayerProfile lp;
    lp.forward = 6.0;   // ms per micro-batch (size 1) per layer
    lp.backward = 12.0;
    lp.param_bytes = 404ull << 20;        // 202 M fp16 parameters
    lp.optimizer_bytes = 2424ull << 20;   // fp32 master + Adam moments
    lp.activation_bytes = 96ull << 20;
    m.layers.push_back(lp);
  }
  PolicySimConfig c;
  c.nodes = 32;
  c.dp = 8;
  c.pp = 4;
  c.micro_batches = 64;
  c.failure_rate_per_hour = 0.10;
  c.hours = 9;
  c.device_memory = 64ull << 30;
  c.restart_ms = 180000;             // framework restart + communicator setup
  c.transfer_bytes_per_ms = 1.25e6;  // 10 Gbit/s per sender
  c.snapshot_load_ms = 10000;
  c.checkpoint_interval_ms = 3600000;
  c.checkpoint_load_ms = 300000;
  double sum_oob = 0, sum_rec = 0;
  int wins = 0, counted = 0;
  for (int s = 1; s <= seeds; ++s) {
    auto o = SimulatePolicy(m, c, PolicyKind::kOdyssey, s);
    auto b = SimulatePolicy(m, c, PolicyKind::kOobleck, s);
    auto r = SimulatePolicy(m, c, PolicyKind::kRecycle, s);
    if (!o.ok() || !b.ok() || !r.ok()) {
      std::fprintf(stderr, "seed %d: %s %s %s\n", s, o.status().ToString().c_str(),
                   b.status().ToString().c_str(), r.status().ToString().c_str());
      return 1;
    }
    int reroutes = 0, reconf = 0, restarts = 0;
    for (const auto& d : o->decisions) {
      reroutes += d == "reroute";
      reconf += d == "reconfigure";
      restarts += d == "restart";
    }
    const double ro = o->throughput / b->throughput, rr = o->throughput / r->throughput;
    sum_oob += ro;
    sum_rec += rr;
    wins += (ro >= 1 && rr >= 1);
    ++counted;
    std::printf("{\"bench\":\"policy\",\"seed\":%d,\"failures\":%d,\"odyssey_samples_per_h\":%.0f,"
                "\"oobleck_samples_per_h\":%.0f,\"recycle_samples_per_h\":%.0f,\"vs_oobleck\":%.3f,"
                "\"vs_recycle\":%.3f,\"odyssey_reroutes\":%d,\"odyssey_reconfigs\":%d,\"odyssey_restarts\":%d}\n",
                s, o->failures, o->throughput, b->throughput, r->throughput, ro, rr, reroutes, reconf, restarts);
    std::fflush(stdout);
  }
  std::printf("{\"bench\":\"policy_summary\",\"seeds\":%d,\"mean_vs_oobleck\":%.3f,\"paper_vs_oobleck\":1.229,"
              "\"mean_vs_recycle\":%.3f,\"paper_vs_recycle\":1.355,\"seeds_odyssey_ge_both\":%d}\n",
              counted, sum_oob / counted, sum_rec / counted, wins);
  return 0;
}
