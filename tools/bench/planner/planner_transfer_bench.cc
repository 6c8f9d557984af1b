// A13: Kuhn–Munkres weight transfer vs positional assignment, 8 nodes DP4 PP2 -> 7 nodes [2,2,3]
// after node 0 (DP0, stage 0) fails, L ∈ {4, 8, 16}, 64 MiB per layer. Transfer time is modelled
// as the busiest node's bytes (sent or received) over a per-node link, so the ratio is what a
// throttled-link run would show. Usage: planner_transfer_bench
#include <algorithm>
#include <cstdio>
#include <vector>

#include "reft/planner/odyssey.h"

using namespace reft::planner;
using namespace reft::planner::odyssey;

namespace {
uint64_t BusiestLink(const TransferPlan& t, size_t nodes) {
  std::vector<uint64_t> tx(nodes, 0), rx(nodes, 0);
  for (const auto& m : t.moves) { tx[m.from] += m.bytes; rx[m.to] += m.bytes; }
  uint64_t worst = 0;
  for (size_t i = 0; i < nodes; ++i) worst = std::max({worst, tx[i], rx[i]});
  return worst;
}
std::vector<std::vector<int>> Stages(const std::vector<int>& counts) {
  std::vector<std::vector<int>> out;
  int l = 0;
  for (int c : counts) {
    std::vector<int> v;
    for (int k = 0; k < c; ++k) v.push_back(l++);
    out.push_back(v);
  }
  return out;
}
}  // namespace

int main() {
  for (int L : {4, 8, 16}) {
    ModelProfile m;
    for (int l = 0; l < L; ++l) {
      LayerProfile lp;
      lp.forward = 5;
      lp.backward = 10;
      lp.param_bytes = 16ull << 20;
      lp.optimizer_bytes = 32ull << 20;  // 64 MiB of state per layer
      m.layers.push_back(lp);
    }
    // Survivors: DP4 PP2, node 0 (pipeline 0, stage 0) lost.
    auto old_stage = Stages({L / 2, L - L / 2});
    std::vector<std::vector<int>> held;
    for (int p = 0; p < 4; ++p)
      for (int s = 0; s < 2; ++s)
        if (!(p == 0 && s == 0)) held.push_back(old_stage[s]);
    // New plan: pipelines of 2, 2 and 3 stages, layers split by the planner's SplitLayers.
    SearchOptions so;
    so.micro_batches = 16;
    std::vector<std::vector<int>> roles;
    for (int len : {2, 2, 3}) {
      auto split = SplitLayers(m, len, 5, so);
      for (auto& v : Stages(*split)) roles.push_back(v);
    }
    std::vector<uint64_t> bytes;
    for (int l = 0; l < L; ++l) bytes.push_back(m.StateBytes(l));
    auto km = PlanTransfer(held, roles, bytes);
    auto pos = PositionalTransfer(held, roles, bytes);
    const uint64_t tk = BusiestLink(*km, held.size()), tp = BusiestLink(*pos, held.size());
    std::printf("{\"bench\":\"transfer\",\"layers\":%d,\"km_bytes\":%llu,\"positional_bytes\":%llu,"
                "\"km_busiest_link_bytes\":%llu,\"positional_busiest_link_bytes\":%llu,"
                "\"volume_reduction\":%.4f,\"transfer_time_reduction\":%.4f}\n",
                L, static_cast<unsigned long long>(km->total_bytes), static_cast<unsigned long long>(pos->total_bytes),
                static_cast<unsigned long long>(tk), static_cast<unsigned long long>(tp),
                pos->total_bytes ? 1.0 - static_cast<double>(km->total_bytes) / pos->total_bytes : 0.0,
                tp ? 1.0 - static_cast<double>(tk) / tp : 0.0);
  }
  return 0;
}
