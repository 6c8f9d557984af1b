// Oobleck dynamic reconfiguration (paper §5, Appendix B) with the choices of docs/planner.md that
// the paper leaves open: lend from the pipeline with the largest surplus; merge with the smallest
// pipeline; when the result still breaks the layout rules, re-instantiate all live nodes with the
// instantiation of the highest estimated throughput; joins (no algorithm in the paper) form new
// pipelines or grow the smallest ones.
#include <algorithm>
#include <set>
#include <string>

#include "oobleck.h"

namespace reft::planner::oobleck {
namespace {

std::string Name(size_t i) { return "p" + std::to_string(i); }

bool Valid(const NodeSpec& s, const std::vector<Pipeline>& ps, int f) {
  if (static_cast<int>(ps.size()) < f + 1) return false;
  for (const auto& p : ps) {
    const int n = static_cast<int>(p.nodes.size());
    if (n < s.n0 || n > s.n_max) return false;
  }
  return true;
}

// Re-partitions all live nodes with the instantiation of the highest estimated throughput.
Status Reinstantiate(const InstantiationModel& im, std::vector<Pipeline>& ps, Reconfiguration& out) {
  std::vector<int> all;
  for (const auto& p : ps) all.insert(all.end(), p.nodes.begin(), p.nodes.end());
  auto search = SearchInstantiations(im, static_cast<int>(all.size()), 1);
  if (!search.ok()) return search.status();
  const auto& best = search->best.front();
  std::vector<Pipeline> next;
  size_t pos = 0;
  for (int n : best.pipeline_nodes) {  // largest template first
    Pipeline p;
    p.nodes.assign(all.begin() + pos, all.begin() + pos + n);
    pos += n;
    next.push_back(p);
  }
  ps = next;
  out.actions.push_back("global re-instantiation into " + std::to_string(ps.size()) +
                        " pipelines (highest estimated throughput of " + std::to_string(search->num_options) +
                        " instantiations)");
  return Status::OK();
}

}  // namespace

Result<Reconfiguration> HandleFailures(const NodeSpec& spec, const InstantiationModel& im,
                                       const std::vector<Pipeline>& current, const std::vector<int>& failed) {
  const int f = im.f;
  Reconfiguration out;
  const std::set<int> dead(failed.begin(), failed.end());
  std::vector<Pipeline> ps;
  std::vector<bool> hit;
  int alive = 0;
  for (const auto& p : current) {
    Pipeline q;
    for (int n : p.nodes)
      if (!dead.count(n)) q.nodes.push_back(n);
    alive += static_cast<int>(q.nodes.size());
    if (q.nodes.empty()) {
      out.actions.push_back("drop a pipeline that lost all its nodes");
      continue;
    }
    hit.push_back(q.nodes.size() != p.nodes.size());
    ps.push_back(q);
  }
  if (alive < (f + 1) * spec.n0) {
    out.exit_required = true;
    out.exit_reason = std::to_string(alive) + " live nodes < (f+1)·n0 = " +
                      std::to_string((f + 1) * spec.n0) + ": persist progress and exit";
    out.pipelines = ps;
    return out;
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!hit[i]) continue;
    int r = static_cast<int>(ps[i].nodes.size());
    if (r >= spec.n0) {
      out.actions.push_back("reinstantiate " + Name(i) + " with the " + std::to_string(r) + "-node template");
      continue;
    }
    // Borrow from the largest surplus while lenders stay >= n0.
    while (r < spec.n0) {
      int lender = -1, surplus = 0;
      for (size_t j = 0; j < ps.size(); ++j) {
        const int sj = static_cast<int>(ps[j].nodes.size()) - spec.n0;
        if (j != i && sj > surplus) { surplus = sj; lender = static_cast<int>(j); }
      }
      if (lender < 0) break;
      const int take = std::min(spec.n0 - r, surplus);
      auto& ln = ps[lender].nodes;
      ps[i].nodes.insert(ps[i].nodes.end(), ln.end() - take, ln.end());
      ln.resize(ln.size() - take);
      r += take;
      out.actions.push_back("borrow " + std::to_string(take) + " node(s) from " + Name(lender) +
                            " for " + Name(i) + "; reinstantiate " + Name(lender) + " with " +
                            std::to_string(ln.size()) + " nodes");
    }
    if (r >= spec.n0) continue;
    // Merge with the smallest other pipeline (Theorem B.1: 2·n0 − k nodes have a template).
    int other = -1;
    for (size_t j = 0; j < ps.size(); ++j)
      if (j != i && (other < 0 || ps[j].nodes.size() < ps[other].nodes.size())) other = static_cast<int>(j);
    if (other < 0) break;
    ps[other].nodes.insert(ps[other].nodes.end(), ps[i].nodes.begin(), ps[i].nodes.end());
    out.actions.push_back("merge " + Name(i) + " into " + Name(other) + " (" +
                          std::to_string(ps[other].nodes.size()) + " nodes)");
    ps.erase(ps.begin() + i);
    hit.erase(hit.begin() + i);
    --i;
  }
  if (!Valid(spec, ps, f)) {
    const Status st = Reinstantiate(im, ps, out);
    if (st.code() == StatusCode::kInvalidArgument && st.message().rfind("cluster.nodes", 0) == 0) {
      out.exit_required = true;
      out.exit_reason = "no instantiation of " + std::to_string(alive) + " nodes with f+1 pipelines: " + st.message();
    } else if (!st.ok()) {
      return st;
    }
  }
  out.pipelines = ps;
  return out;
}

Reconfiguration HandleJoins(const NodeSpec& spec, const std::vector<Pipeline>& current,
                            const std::vector<int>& joined) {
  Reconfiguration out;
  out.pipelines = current;
  size_t pos = 0;
  while (joined.size() - pos >= static_cast<size_t>(spec.n0)) {
    const size_t take = std::min(joined.size() - pos, static_cast<size_t>(spec.n_max));
    // Leave enough for another pipeline rather than stranding fewer than n0 nodes.
    Pipeline p;
    p.nodes.assign(joined.begin() + pos, joined.begin() + pos + take);
    pos += take;
    out.actions.push_back("instantiate a new " + std::to_string(take) + "-node pipeline");
    out.pipelines.push_back(p);
  }
  while (pos < joined.size()) {
    auto it = std::min_element(out.pipelines.begin(), out.pipelines.end(),
                               [](const Pipeline& a, const Pipeline& b) { return a.nodes.size() < b.nodes.size(); });
    if (it == out.pipelines.end() || static_cast<int>(it->nodes.size()) >= spec.n_max) {
      out.actions.push_back(std::to_string(joined.size() - pos) + " node(s) kept as spares (all pipelines at n_max)");
      break;
    }
    it->nodes.push_back(joined[pos++]);
    out.actions.push_back("grow p" + std::to_string(it - out.pipelines.begin()) + " to " +
                          std::to_string(it->nodes.size()) + " nodes");
  }
  return out;
}

}  // namespace reft::planner::oobleck
