// Oobleck node specification (paper §4.1.1, Appendix A) and GPU–stage mapping (§4.1.2): the paper's
// divide and conquer, with the corrections docs/planner.md lists: half-open layer ranges [u,k)
// [k,v) (eqs. 1 and 3 start the second half at k+1); a subproblem returns the tuple (T1, slow, k*,
// T3) and the parent recomputes T2 with its own stage count (T2 is not additive); the slowest
// stage is the latest of tied stages (ordering.h); a stage whose eq. 14 peak memory exceeds the
// device is infeasible, which needs the number of stages after the subproblem in the memo key.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <cstdint>

#include "oobleck.h"
#include "ordering.h"

namespace reft::planner::oobleck {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

int MinNodesForMemory(const ModelProfile& m, const ClusterSpec& c) {
  if (c.device_memory_bytes == 0) return 1;
  // Static state of the whole model spread over n·M devices plus one layer's activations per
  // device must fit: the smallest n for which that lower bound holds. The mapping then checks
  // every stage exactly (eq. 14) and rejects n if no split fits.
  double total = 0, act = 0;
  for (const auto& l : m.layers) {
    total += 2.0 * l.param_bytes + l.optimizer_bytes;
    act = std::max(act, static_cast<double>(l.activation_bytes));
  }
  const double cap = c.device_memory_bytes * (1 - c.memory_margin) - act;
  if (cap <= 0) return std::numeric_limits<int>::max();
  return std::max(1, static_cast<int>(std::ceil(total / (cap * c.gpus_per_node))));
}

Result<NodeSpec> SpecifyNodes(int N, int f, int n0, int cap) {
  if (n0 < 1) return Status::InvalidArgument("job.n0: must be >= 1");
  if (f < 0) return Status::InvalidArgument("job.f: must be >= 0");
  if (N < (f + 1) * n0)
    return Status::InvalidArgument("cluster.nodes: " + std::to_string(N) + " nodes cannot hold f+1=" +
                                   std::to_string(f + 1) + " pipelines of n0=" + std::to_string(n0) +
                                   " nodes (need " + std::to_string((f + 1) * n0) + ")");
  if (cap != 0 && cap < 2 * n0 - 1)
    return Status::InvalidArgument("job.template_cap: " + std::to_string(cap) +
                                   " is below 2·n0−1 = " + std::to_string(2 * n0 - 1) +
                                   " (merging needs it)");
  NodeSpec s;
  s.n0 = n0;
  s.n_max = N - f * n0;
  if (cap != 0) s.n_max = std::min(s.n_max, cap);
  for (int n = n0; n <= s.n_max; ++n) s.sizes.push_back(n);
  return s;
}

double PipelineTemplate::TimeFor(int nb) const {
  const int S = static_cast<int>(stages.size());
  return t1 + (nb - S + kstar - 1) * slow + t3;
}

PipelineSpec PipelineTemplate::ToSpec(int nb) const {
  PipelineSpec p;
  for (const auto& s : stages) {
    p.forward.push_back(s.forward);
    p.backward.push_back(s.backward);
  }
  p.micro_batches = nb;
  return p;
}

namespace {

// Device groups of the divide and conquer: a group is either g in [1, M] GPUs of one node or
// a >= 2 whole nodes. A group of whole nodes splits into whole nodes, a one-node group into two
// GPU counts (a stage never spans nodes). Index: g - 1 for sub-node groups, M + a - 2 for a >= 2.
struct Groups {
  int M = 1;
  int Index(int nodes, int gpus) const { return nodes <= 1 ? gpus - 1 : M + nodes - 2; }
  bool Whole(int grp) const { return grp >= M; }
  int Nodes(int grp) const { return Whole(grp) ? grp - M + 2 : 1; }
  int Gpus(int grp) const { return Whole(grp) ? Nodes(grp) * M : grp + 1; }
};

}  // namespace

struct TemplatePlanner::Impl {
  // Result of subproblem (S', u, v, group, after): T1/slow/T3 of the best split found, k* local
  // to the subproblem, and how it splits (s1 stages and left group, first half [u, k)).
  struct Sub {
    double t1 = 0, slow = 0, t3 = 0;
    int16_t kstar = kUnknown;  // >= 0 feasible; kInfeasible; kUnknown
    int16_t s1 = 0, k = 0, left = 0;
  };
  static constexpr int16_t kUnknown = -2, kInfeasible = -1;

  const ModelProfile& model;
  ClusterSpec cluster;
  Groups groups;
  int L, M;
  int max_nodes = 0, max_stages = 0, afters = 1;
  std::vector<std::vector<double>> pre_fb;  // [d][l] prefix of F+B on d GPUs
  std::vector<std::vector<double>> pre_f;   // [d][l] prefix of F
  std::vector<double> pre_static, pre_act;  // prefix bytes
  std::vector<size_t> base;                 // [group][S'][after] -> first memo slot
  std::vector<Sub> memo;
  size_t entries = 0;

  Impl(const ModelProfile& m, const ClusterSpec& c) : model(m), cluster(c) {
    L = static_cast<int>(m.layers.size());
    M = c.gpus_per_node;
    groups.M = M;
    pre_fb.assign(M + 1, std::vector<double>(L + 1, 0));
    pre_f.assign(M + 1, std::vector<double>(L + 1, 0));
    for (int d = 1; d <= M; ++d)
      for (int l = 0; l < L; ++l) {
        pre_fb[d][l + 1] = pre_fb[d][l] + m.F(l, d) + m.B(l, d);
        pre_f[d][l + 1] = pre_f[d][l] + m.F(l, d);
      }
    pre_static.assign(L + 1, 0);
    pre_act.assign(L + 1, 0);
    for (int l = 0; l < L; ++l) {
      pre_static[l + 1] = pre_static[l] + 2.0 * m.layers[l].param_bytes + m.layers[l].optimizer_bytes;
      pre_act[l + 1] = pre_act[l] + m.layers[l].activation_bytes;
    }
  }
  int NumGroups() const { return M + std::max(0, max_nodes - 1); }
  // Pairs (u, v) with v - u >= S' in a triangle: K = L - S' + 1 rows.
  static size_t Pairs(int L, int sp) {
    const size_t K = static_cast<size_t>(L - sp + 1);
    return K * (K + 1) / 2;
  }
  size_t Slot(int sp, int u, int v, int grp, int after) const {
    const size_t K = static_cast<size_t>(L - sp + 1);
    const size_t uu = static_cast<size_t>(u);
    const size_t tri = uu * K - uu * (uu - 1) / 2 + static_cast<size_t>(v - u - sp);
    const size_t a = afters == 1 ? 0 : static_cast<size_t>(after);  // no memory check: not keyed
    return base[(static_cast<size_t>(grp) * (max_stages + 1) + sp) * afters + a] + tri;
  }
  bool Valid(int sp, int grp) const {
    return sp >= groups.Nodes(grp) && sp <= std::min(L, groups.Gpus(grp));
  }
  // Sizes the memo for templates up to `nodes` nodes (keeps nothing; grows once in practice).
  Status Reserve(int nodes) {
    if (nodes <= max_nodes) return Status::OK();
    max_nodes = nodes;
    max_stages = std::min(L, nodes * M);
    afters = cluster.device_memory_bytes ? max_stages : 1;
    base.assign(static_cast<size_t>(NumGroups()) * (max_stages + 1) * afters, 0);
    size_t total = 0;
    for (int grp = 0; grp < NumGroups(); ++grp)
      for (int sp = 1; sp <= max_stages; ++sp)
        for (int a = 0; a < afters; ++a) {
          base[(static_cast<size_t>(grp) * (max_stages + 1) + sp) * afters + a] = total;
          if (Valid(sp, grp) && sp + a <= max_stages) total += Pairs(L, sp);
        }
    constexpr size_t kMaxEntries = size_t{1} << 26;  // 2 GiB of memo
    if (total > kMaxEntries)
      return Status::InvalidArgument("cluster: the stage search for " + std::to_string(nodes) + " nodes x " +
                                     std::to_string(M) + " GPUs x " + std::to_string(L) +
                                     " layers needs " + std::to_string(total) + " memo entries (limit " +
                                     std::to_string(kMaxEntries) + ")");
    memo.assign(total, Sub{});
    entries = 0;
    return Status::OK();
  }
  // eq. 14 for one stage on d GPUs of one node: static state sharded over d, `inflight` stored
  // micro-batches (stage i of S holds S - i).
  bool Fits(int u, int v, int d, int inflight) const {
    if (cluster.device_memory_bytes == 0) return true;
    const double need = ((pre_static[v] - pre_static[u]) + inflight * (pre_act[v] - pre_act[u])) / d;
    return need <= cluster.device_memory_bytes * (1 - cluster.memory_margin);
  }
  double StageCost(int u, int v, int d) const { return pre_fb[d][v] - pre_fb[d][u]; }

  const Sub& Solve(int sp, int u, int v, int grp, int after) {
    Sub& me = memo[Slot(sp, u, v, grp, after)];
    if (me.kstar != kUnknown) return me;
    ++entries;
    Sub best;
    best.kstar = kInfeasible;
    if (sp == 1) {
      if (!groups.Whole(grp) && Fits(u, v, grp + 1, after + 1)) {
        best.t1 = best.slow = best.t3 = StageCost(u, v, grp + 1);
        best.kstar = 0;
      }
      return me = best;
    }
    double best_total = std::numeric_limits<double>::infinity();
    // Splits in a fixed order (left group size, then left stage count, then split layer); a
    // later split replaces the incumbent only when shorter beyond the tie tolerance.
    const bool whole = groups.Whole(grp);
    const int parts = whole ? groups.Nodes(grp) : groups.Gpus(grp);
    for (int p1 = 1; p1 < parts; ++p1) {
      const int gl = whole ? groups.Index(p1, p1 * M) : groups.Index(1, p1);
      const int gr = whole ? groups.Index(parts - p1, (parts - p1) * M) : groups.Index(1, parts - p1);
      for (int s1 = 1; s1 < sp; ++s1) {
        const int s2 = sp - s1;
        if (!Valid(s1, gl) || !Valid(s2, gr)) continue;
        for (int k = u + s1; k <= v - s2; ++k) {
          const Sub a = Solve(s1, u, k, gl, after + s2);
          if (a.kstar < 0) continue;
          const Sub z = Solve(s2, k, v, gr, after);
          if (z.kstar < 0) continue;
          Sub c;
          c.t1 = a.t1 + z.t1;
          if (Longer(a.slow, z.slow)) {
            c.slow = a.slow; c.kstar = a.kstar; c.t3 = a.t3 + z.t1;
          } else {  // the second half's slowest stage, also on a tie (the latest tied stage)
            c.slow = z.slow; c.kstar = static_cast<int16_t>(s1 + z.kstar); c.t3 = z.t3;
          }
          const double total = c.t1 + (3.0 * sp + c.kstar - 1) * c.slow + c.t3;
          if (Shorter(total, best_total)) {
            best_total = total;
            c.s1 = static_cast<int16_t>(s1);
            c.k = static_cast<int16_t>(k);
            c.left = static_cast<int16_t>(gl);
            best = c;
          }
        }
      }
    }
    Sub& slot = memo[Slot(sp, u, v, grp, after)];  // the memo never reallocates during a solve
    return slot = best;
  }

  void Emit(int sp, int u, int v, int grp, int after, int gpu_offset, PipelineTemplate& t) {
    const Sub s = Solve(sp, u, v, grp, after);
    if (sp == 1) {
      Stage st;
      st.first_layer = u;
      st.last_layer = v;
      st.gpus = groups.Gpus(grp);
      st.node = gpu_offset / M;
      st.first_gpu = gpu_offset % M;
      st.forward = pre_f[st.gpus][v] - pre_f[st.gpus][u];
      st.backward = StageCost(u, v, st.gpus) - st.forward;
      t.stages.push_back(st);
      return;
    }
    const int right = groups.Whole(grp) ? groups.Index(groups.Nodes(grp) - groups.Nodes(s.left),
                                                      (groups.Nodes(grp) - groups.Nodes(s.left)) * M)
                                         : groups.Index(1, groups.Gpus(grp) - groups.Gpus(s.left));
    Emit(s.s1, u, s.k, s.left, after + sp - s.s1, gpu_offset, t);
    Emit(sp - s.s1, s.k, v, right, after, gpu_offset + groups.Gpus(s.left), t);
  }
};

TemplatePlanner::TemplatePlanner(const ModelProfile& model, const ClusterSpec& cluster)
    : impl_(new Impl(model, cluster)) {}
TemplatePlanner::~TemplatePlanner() { delete impl_; }
size_t TemplatePlanner::cache_entries() const { return impl_->entries; }

Result<PipelineTemplate> TemplatePlanner::Plan(int nodes) {
  Impl& im = *impl_;
  if (nodes < 1) return Status::InvalidArgument("template nodes must be >= 1");
  if (im.L == 0) return Status::InvalidArgument("model.layers: empty");
  if (im.L > 32000 || im.M > 127) return Status::InvalidArgument("cluster.gpus_per_node: at most 127");
  REFT_RETURN_NOT_OK(im.Reserve(nodes));
  const int grp = im.groups.Index(nodes, nodes * im.M);
  double best = kInf;
  int best_s = -1;
  // Stage counts in increasing order: a tie keeps the fewer stages.
  for (int S = nodes; S <= std::min(im.L, nodes * im.M); ++S) {
    const auto r = im.Solve(S, 0, im.L, grp, 0);
    if (r.kstar < 0) continue;
    const double t = r.t1 + (3.0 * S + r.kstar - 1) * r.slow + r.t3;
    if (Shorter(t, best)) { best = t; best_s = S; }
  }
  if (best_s < 0)
    return Status::InvalidArgument("cluster.device_memory: no stage mapping of " +
                                   std::to_string(im.L) + " layers on " + std::to_string(nodes) +
                                   " nodes fits in device memory");
  PipelineTemplate t;
  t.nodes = nodes;
  const auto top = im.Solve(best_s, 0, im.L, grp, 0);
  t.t1 = top.t1; t.slow = top.slow; t.t3 = top.t3; t.kstar = top.kstar;
  t.iteration_time = best;
  im.Emit(best_s, 0, im.L, grp, 0, 0, t);
  return t;
}

}  // namespace reft::planner::oobleck
