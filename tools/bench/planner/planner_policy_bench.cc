// A15: Odyssey-like vs Oobleck-like vs ReCycle-like recovery on the same failure traces.
// 32 NPUs as failure units (initial plan PP4 × DP8, TP1), NPU failure rate 10 %/hour, 9 hours,
// Llama-2-7B-like profile (embedding, 32 layers, LM head; 64 GiB devices), gradient all-reduce
// at 100 Gbit/s.
// Prints one JSON line per seed, then the distribution of the ratios over the seeds; with
// --sweep also the distribution under other restart costs, failure rates and link speeds (what
// drives the ratios), one summary line each.
// Usage: planner_policy_bench [--seeds N] [--sweep]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "policy_sim.h"

using namespace reft::planner;

namespace {

// Llama-2-7B-like, sequence 2048, micro-batch 1: the token embedding, 32 transformer layers
// (202 M parameters each: 4·4096² attention + 3·4096·11008 MLP) and the LM head with the loss
// (131 M parameters, 0.65 of a layer's FLOPs). fp16 parameters and gradients, fp32 master
// weights and Adam moments (12 bytes per parameter).
ModelProfile Llama2_7B() {
  auto layer = [](double fwd_ms, double params, double activation_bytes) {
    LayerProfile lp;
    lp.forward = fwd_ms;
    lp.backward = 2 * fwd_ms;
    lp.param_bytes = static_cast<uint64_t>(2 * params);
    lp.optimizer_bytes = static_cast<uint64_t>(12 * params);
    lp.activation_bytes = static_cast<uint64_t>(activation_bytes);
    return lp;
  };
  ModelProfile m;
  m.layers.push_back(layer(0.1, 131e6, 2048 * 4096 * 2));           // embedding: a lookup
  for (int l = 0; l < 32; ++l) m.layers.push_back(layer(6.0, 202e6, 100e6));
  m.layers.push_back(layer(3.9, 131e6, 2048 * 32000 * 6.0));        // head: fp16 logits + fp32 softmax
  return m;
}

PolicySimConfig BaseConfig() {
  PolicySimConfig c;
  c.nodes = 32;
  c.dp = 8;
  c.pp = 4;
  c.micro_batches = 64;
  c.failure_rate_per_hour = 0.10;
  c.hours = 9;
  c.device_memory = 64ull << 30;
  c.restart_ms = 180000;             // framework restart + communicator setup
  c.transfer_bytes_per_ms = 1.25e6;  // 10 Gbit/s per node link for weight copies
  c.snapshot_load_ms = 10000;
  c.checkpoint_interval_ms = 3600000;
  c.checkpoint_load_ms = 300000;
  c.network.bandwidth_bytes_per_ms = 12.5e6;  // 100 Gbit/s per device for the all-reduce
  c.network.latency_ms = 0.005;
  return c;
}

// Linear-interpolated quantile of a sorted sample.
double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * (sorted.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(sorted.size() - 1, i + 1);
  return sorted[i] + (pos - i) * (sorted[j] - sorted[i]);
}

std::string Distribution(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double mean = 0;
  for (double x : v) mean += x / v.size();
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"mean\":%.3f,\"min\":%.3f,\"p25\":%.3f,\"median\":%.3f,\"p75\":%.3f,\"max\":%.3f}",
                mean, v.front(), Quantile(v, 0.25), Quantile(v, 0.5), Quantile(v, 0.75), v.back());
  return buf;
}

struct Ratios {
  std::vector<double> vs_oobleck, vs_recycle, reft_vs_oobleck;
  int wins = 0;
};

PolicyRun Run(const ModelProfile& m, const PolicySimConfig& c, PolicyKind k, int seed) {
  auto r = SimulatePolicy(m, c, k, seed);
  if (!r.ok()) reft::bench::Die(std::string(PolicyKindName(k)) + " seed " + std::to_string(seed), r.status());
  return *r;
}

Ratios RunSeeds(const ModelProfile& m, const PolicySimConfig& c, int seeds, bool per_seed) {
  Ratios out;
  PolicySimConfig with_memory = c;
  with_memory.restart_from_memory = true;
  for (int s = 1; s <= seeds; ++s) {
    const auto o = Run(m, c, PolicyKind::kOdyssey, s);
    const auto b = Run(m, c, PolicyKind::kOobleck, s);
    const auto r = Run(m, c, PolicyKind::kRecycle, s);
    const auto f = Run(m, with_memory, PolicyKind::kOdyssey, s);
    int reroutes = 0, reconf = 0, checkpoint_restarts = 0;
    for (const auto& d : o.decisions) {
      reroutes += d == "reroute";
      reconf += d == "reconfigure";
    }
    for (const auto& d : r.decisions) checkpoint_restarts += d == "checkpoint-restart";
    const double ro = o.throughput / b.throughput, rr = o.throughput / r.throughput;
    out.vs_oobleck.push_back(ro);
    out.vs_recycle.push_back(rr);
    out.reft_vs_oobleck.push_back(f.throughput / b.throughput);
    out.wins += (ro >= 1 && rr >= 1);
    if (per_seed)
      std::printf("{\"bench\":\"policy\",\"seed\":%d,\"failures\":%d,\"odyssey_samples_per_h\":%.0f,"
                  "\"oobleck_samples_per_h\":%.0f,\"recycle_samples_per_h\":%.0f,\"odyssey_restart_from_memory_samples_per_h\":%.0f,"
                  "\"vs_oobleck\":%.3f,\"vs_recycle\":%.3f,\"odyssey_reroutes\":%d,\"odyssey_reconfigs\":%d,"
                  "\"odyssey_downtime_s\":%.0f,\"oobleck_downtime_s\":%.0f,\"recycle_checkpoint_restarts\":%d}\n",
                  s, o.failures, o.throughput, b.throughput, r.throughput, f.throughput, ro, rr, reroutes, reconf,
                  o.downtime_ms / 1000, b.downtime_ms / 1000, checkpoint_restarts);
    std::fflush(stdout);
  }
  return out;
}

void Summary(const char* name, const PolicySimConfig& c, int seeds, const Ratios& r) {
  std::printf("{\"bench\":\"%s\",\"seeds\":%d,\"restart_s\":%.0f,\"failure_rate_per_hour\":%.3f,\"allreduce_gbps\":%.0f,"
              "\"vs_oobleck\":%s,\"paper_vs_oobleck\":1.229,\"target_vs_oobleck\":[1.10,1.40],"
              "\"vs_recycle\":%s,\"paper_vs_recycle\":1.355,\"target_vs_recycle\":[1.20,1.55],"
              "\"restart_from_memory_vs_oobleck\":%s,\"seeds_odyssey_ge_both\":%d}\n",
              name, seeds, c.restart_ms / 1000, c.failure_rate_per_hour, c.network.bandwidth_bytes_per_ms / 1.25e5,
              Distribution(r.vs_oobleck).c_str(), Distribution(r.vs_recycle).c_str(),
              Distribution(r.reft_vs_oobleck).c_str(), r.wins);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    else if (std::atoi(argv[i]) > 0) seeds = std::atoi(argv[i]);  // the old positional form
    else reft::bench::Die(std::string("usage: planner_policy_bench [--seeds N] [--sweep]; bad argument ") + argv[i]);
  }
  const auto m = Llama2_7B();
  const auto base = BaseConfig();
  Summary("policy_summary", base, seeds, RunSeeds(m, base, seeds, true));
  if (!sweep) return 0;
  struct Variant {
    const char* what;
    PolicySimConfig c;
  };
  std::vector<Variant> vs;
  for (double restart_s : {30.0, 600.0}) {
    auto c = base;
    c.restart_ms = restart_s * 1000;
    vs.push_back({"policy_sweep_restart", c});
  }
  for (double rate : {0.05, 0.2}) {
    auto c = base;
    c.failure_rate_per_hour = rate;
    vs.push_back({"policy_sweep_failure_rate", c});
  }
  {
    auto c = base;
    c.network = NetworkSpec::Free();
    vs.push_back({"policy_sweep_no_allreduce", c});
  }
  for (const auto& v : vs) Summary(v.what, v.c, seeds, RunSeeds(m, v.c, seeds, false));
  return 0;
}
