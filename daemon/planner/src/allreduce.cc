// Data-parallel gradient synchronisation: ring all-reduce per layer, scheduled in the colour
// rounds of Odyssey's asymmetric communication (greedy colouring, clique lower bound).
#include "reft/planner/allreduce.h"

#include <algorithm>

namespace reft::planner {

double RingAllReduceMs(double bytes, int p, const NetworkSpec& net) {
  if (p < 2 || net.free()) return 0;
  return 2.0 * (p - 1) * net.latency_ms + 2.0 * (p - 1) / p * bytes / net.bandwidth_bytes_per_ms;
}

Colouring ColourAllReduces(int num_layers, const std::vector<std::vector<int>>& device_layers) {
  Colouring c;
  c.round_of_layer.assign(num_layers, -1);
  // Adjacency as a dense matrix: layers that share a device serialise.
  std::vector<char> adj(static_cast<size_t>(num_layers) * num_layers, 0);
  std::vector<char> present(num_layers, 0);
  std::vector<int> ls;
  for (const auto& dev : device_layers) {
    ls.clear();
    for (int a : dev)
      if (a >= 0 && a < num_layers) ls.push_back(a);
    std::sort(ls.begin(), ls.end());
    ls.erase(std::unique(ls.begin(), ls.end()), ls.end());
    c.lower_bound = std::max(c.lower_bound, static_cast<int>(ls.size()));
    for (int a : ls) {
      present[a] = 1;
      for (int b : ls)
        if (b != a) adj[static_cast<size_t>(a) * num_layers + b] = 1;
    }
  }
  // Gradient-ready order: the last layer's gradients are ready first.
  std::vector<char> taken(num_layers + 1);
  for (int l = num_layers - 1; l >= 0; --l) {
    if (!present[l]) continue;
    std::fill(taken.begin(), taken.end(), 0);
    for (int b = 0; b < num_layers; ++b)
      if (adj[static_cast<size_t>(l) * num_layers + b] && c.round_of_layer[b] >= 0) taken[c.round_of_layer[b]] = 1;
    int r = 0;
    while (taken[r]) ++r;
    c.round_of_layer[l] = r;
    c.rounds = std::max(c.rounds, r + 1);
  }
  return c;
}

SyncEstimate GradientSync(const ModelProfile& m, const std::vector<SyncDevice>& devices,
                          const NetworkSpec& net) {
  const int L = static_cast<int>(m.layers.size());
  SyncEstimate out;
  if (net.free()) return out;  // no cost to schedule
  std::vector<std::vector<int>> device_layers;
  std::vector<int> holders(L, 0), min_gpus(L, 0);
  for (const auto& d : devices) {
    device_layers.push_back(d.layers);
    for (int l : d.layers) {
      if (l < 0 || l >= L) continue;
      ++holders[l];
      const int g = std::max(1, d.gpus);
      min_gpus[l] = min_gpus[l] == 0 ? g : std::min(min_gpus[l], g);
    }
  }
  const Colouring col = ColourAllReduces(L, device_layers);
  out.rounds = col.rounds;
  out.lower_bound = col.lower_bound;
  std::vector<double> round_ms(col.rounds, 0);
  for (int l = 0; l < L; ++l) {
    if (col.round_of_layer[l] < 0) continue;
    const double shard = static_cast<double>(m.layers[l].param_bytes) / min_gpus[l];  // gradients = params
    round_ms[col.round_of_layer[l]] = std::max(round_ms[col.round_of_layer[l]], RingAllReduceMs(shard, holders[l], net));
  }
  for (double r : round_ms) out.ms += r;
  return out;
}

std::vector<SyncDevice> DevicesOfPipelines(const std::vector<std::vector<int>>& layers_per_stage) {
  std::vector<SyncDevice> out;
  for (const auto& pipe : layers_per_stage) {
    int l = 0;
    for (int c : pipe) {
      SyncDevice d;
      for (int k = 0; k < c; ++k) d.layers.push_back(l++);
      out.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace reft::planner
