// Odyssey restorer (paper §IV-B): Kuhn–Munkres weight transfer with costs in bytes (the paper
// counts layers, which differ in size), zero-cost dummy columns for idle survivors, and for each
// missing layer the least-loaded holder as the sender (KM minimises the volume, not the slowest
// link).
#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "reft/planner/odyssey.h"

namespace reft::planner::odyssey {

std::vector<int> Hungarian(const std::vector<std::vector<double>>& a) {
  // e-maxx potentials formulation, 1-based, rows n <= columns m.
  const int n = static_cast<int>(a.size());
  if (n == 0) return {};
  const int m = static_cast<int>(a[0].size());
  const double INF = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1), v(m + 1);
  std::vector<int> p(m + 1), way(m + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::vector<double> minv(m + 1, INF);
    std::vector<char> used(m + 1, false);
    do {
      used[j0] = true;
      const int i0 = p[j0];
      double delta = INF;
      int j1 = 0;
      for (int j = 1; j <= m; ++j)
        if (!used[j]) {
          const double cur = a[i0 - 1][j - 1] - u[i0] - v[j];
          if (cur < minv[j]) { minv[j] = cur; way[j] = j0; }
          if (minv[j] < delta) { delta = minv[j]; j1 = j; }
        }
      for (int j = 0; j <= m; ++j)
        if (used[j]) { u[p[j]] += delta; v[j] -= delta; } else { minv[j] -= delta; }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  std::vector<int> col(n, -1);
  for (int j = 1; j <= m; ++j)
    if (p[j]) col[p[j] - 1] = j - 1;
  return col;
}

namespace {

Status CheckTransferInput(const std::vector<std::vector<int>>& held,
                          const std::vector<std::vector<int>>& roles, const std::vector<uint64_t>& bytes) {
  if (held.empty()) return Status::InvalidArgument("transfer.held: no surviving node");
  if (roles.size() > held.size())
    return Status::InvalidArgument("transfer.roles: " + std::to_string(roles.size()) +
                                   " positions but only " + std::to_string(held.size()) + " survivors");
  std::set<int> available;
  for (size_t i = 0; i < held.size(); ++i)
    for (int l : held[i]) {
      if (l < 0 || (!bytes.empty() && static_cast<size_t>(l) >= bytes.size()))
        return Status::InvalidArgument("transfer.held[" + std::to_string(i) + "]: layer " +
                                       std::to_string(l) + " out of range");
      available.insert(l);
    }
  for (size_t j = 0; j < roles.size(); ++j)
    for (int l : roles[j])
      if (!available.count(l))
        return Status::InvalidArgument("transfer.roles[" + std::to_string(j) + "]: layer " +
                                       std::to_string(l) + " has no surviving copy");
  return Status::OK();
}

uint64_t LayerBytes(const std::vector<uint64_t>& bytes, int l) { return bytes.empty() ? 1 : bytes[l]; }

// What survivor i, a holder of layer l, still pulls to have it whole.
uint64_t FillBytes(const std::vector<uint64_t>& bytes, const HeldBytes& held_bytes, size_t i, int l) {
  if (i >= held_bytes.size() || static_cast<size_t>(l) >= held_bytes[i].size()) return 0;
  return LayerBytes(bytes, l) - std::min(LayerBytes(bytes, l), held_bytes[i][l]);
}

TransferPlan Finish(const std::vector<std::vector<int>>& held, const std::vector<std::vector<int>>& roles,
                    const std::vector<uint64_t>& bytes, const HeldBytes& held_bytes,
                    const std::vector<int>& pos) {
  TransferPlan t;
  t.position_of_node = pos;
  std::vector<uint64_t> load(held.size(), 0), in(held.size(), 0);
  std::vector<std::set<int>> hs(held.size());
  for (size_t i = 0; i < held.size(); ++i) hs[i].insert(held[i].begin(), held[i].end());
  for (size_t i = 0; i < held.size(); ++i) {
    if (pos[i] < 0 || static_cast<size_t>(pos[i]) >= roles.size()) { t.position_of_node[i] = -1; continue; }
    for (int l : roles[pos[i]]) {
      if (hs[i].count(l)) {
        const uint64_t fill = FillBytes(bytes, held_bytes, i, l);
        in[i] += fill;
        t.fill_bytes += fill;
        continue;
      }
      // Least-loaded holder sends (ties: lowest index), balancing the senders (KM only
      // minimises total volume).
      int src = -1;
      for (size_t k = 0; k < held.size(); ++k)
        if (hs[k].count(l) && (src < 0 || load[k] < load[src])) src = static_cast<int>(k);
      const uint64_t b = LayerBytes(bytes, l);
      load[src] += b;
      in[i] += b;
      t.moves.push_back({l, src, static_cast<int>(i), b});
      t.total_bytes += b;
      ++t.total_layers;
    }
  }
  for (uint64_t x : load) t.max_sender_bytes = std::max(t.max_sender_bytes, x);
  for (uint64_t x : in) t.max_receiver_bytes = std::max(t.max_receiver_bytes, x);
  return t;
}

}  // namespace

Result<TransferPlan> PlanTransfer(const std::vector<std::vector<int>>& held,
                                  const std::vector<std::vector<int>>& roles,
                                  const std::vector<uint64_t>& bytes, const HeldBytes& held_bytes) {
  REFT_RETURN_NOT_OK(CheckTransferInput(held, roles, bytes));
  const size_t n = held.size();
  std::vector<std::vector<double>> cost(n, std::vector<double>(n, 0.0));  // dummy columns stay 0
  for (size_t i = 0; i < n; ++i) {
    std::set<int> h(held[i].begin(), held[i].end());
    for (size_t j = 0; j < roles.size(); ++j)
      for (int l : roles[j])
        cost[i][j] += static_cast<double>(h.count(l) ? FillBytes(bytes, held_bytes, i, l) : LayerBytes(bytes, l));
  }
  return Finish(held, roles, bytes, held_bytes, Hungarian(cost));
}

Result<TransferPlan> PositionalTransfer(const std::vector<std::vector<int>>& held,
                                        const std::vector<std::vector<int>>& roles,
                                        const std::vector<uint64_t>& bytes,
                                        const HeldBytes& held_bytes) {
  REFT_RETURN_NOT_OK(CheckTransferInput(held, roles, bytes));
  std::vector<int> pos(held.size());
  for (size_t i = 0; i < held.size(); ++i) pos[i] = static_cast<int>(i);
  return Finish(held, roles, bytes, held_bytes, pos);
}

}  // namespace reft::planner::odyssey
