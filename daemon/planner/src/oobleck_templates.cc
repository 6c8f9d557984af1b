// Oobleck node specification (§2.1) and GPU–stage mapping (§2.2), corrected as docs/planner.md says:
// half-open layer ranges [u,k) [k,v); subproblems return the tuple (T1, slow, k*, T3) and the
// parent recomputes T2 with its own S'; memory-infeasible stages are infinite; chain form
// (peel the first stage) with the device shape "GPUs left", which encodes (whole nodes, GPUs
// left in the current node) because a stage never spans nodes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "reft/planner/oobleck.h"

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

struct TemplatePlanner::Impl {
  struct Sub {
    float t1 = 0, slow = 0, t3 = 0;
    int16_t kstar = 0;
    int16_t split = 0;  // first stage ends at layer `split`
    int8_t d = 0;       // GPUs of the first stage
    int8_t state = 0;   // 0 unknown, 1 feasible, 2 infeasible
  };
  const ModelProfile& model;
  ClusterSpec cluster;
  int L, M;
  int max_gpus = 0;
  std::vector<std::vector<double>> pre_fb;     // [d][l] prefix of F+B on d GPUs
  std::vector<std::vector<double>> pre_f;      // [d][l] prefix of F
  std::vector<double> pre_static, pre_act;     // prefix bytes
  std::vector<Sub> memo;
  size_t entries = 0;

  Impl(const ModelProfile& m, const ClusterSpec& c) : model(m), cluster(c) {
    L = static_cast<int>(m.layers.size());
    M = c.gpus_per_node;
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
  void Reserve(int gpus) {
    if (gpus <= max_gpus) return;
    // Re-index the memo for the larger device range (keeps nothing: only grows once in practice).
    max_gpus = gpus;
    memo.assign(static_cast<size_t>(L + 1) * (L + 1) * (max_gpus + 1), Sub{});
    entries = 0;
  }
  Sub& At(int sp, int u, int g) {
    return memo[(static_cast<size_t>(sp) * (L + 1) + u) * (max_gpus + 1) + g];
  }
  // eq. 14 per stage: static state sharded over d GPUs, `inflight` stored micro-batches.
  bool Fits(int u, int v, int d, int inflight) const {
    if (cluster.device_memory_bytes == 0) return true;
    const double need = ((pre_static[v] - pre_static[u]) + inflight * (pre_act[v] - pre_act[u])) / d;
    return need <= cluster.device_memory_bytes * (1 - cluster.memory_margin);
  }
  static int NodesTouched(int g, int M) { return (g + M - 1) / M; }

  const Sub& Solve(int sp, int u, int g) {
    Sub& me = At(sp, u, g);
    if (me.state != 0) return me;
    ++entries;
    me.state = 2;
    if (sp == 1) {
      if (g >= 1 && g <= M && Fits(u, L, g, 1)) {
        const float c = static_cast<float>(pre_fb[g][L] - pre_fb[g][u]);
        me.t1 = me.slow = me.t3 = c;
        me.kstar = 0;
        me.split = static_cast<int16_t>(L);
        me.d = static_cast<int8_t>(g);
        me.state = 1;
      }
      return me;
    }
    const int partial = g % M;
    const int dmax = partial ? partial : M;
    double best = kInf;
    Sub out;
    for (int d = 1; d <= dmax; ++d) {
      const int rest = g - d;
      if (rest < sp - 1 || NodesTouched(rest, M) > sp - 1) continue;
      for (int k = u + 1; k <= L - (sp - 1); ++k) {
        if (!Fits(u, k, d, sp)) break;  // longer first stages only need more memory
        const Sub& z = Solve(sp - 1, k, rest);
        if (z.state != 1) continue;
        const double a = pre_fb[d][k] - pre_fb[d][u];
        const double t1 = a + z.t1;
        double slow, t3;
        int kstar;
        if (a >= z.slow) {
          slow = a; kstar = 0; t3 = a + z.t1;
        } else {
          slow = z.slow; kstar = 1 + z.kstar; t3 = z.t3;
        }
        const double t2 = (3.0 * sp + kstar - 1) * slow;
        const double total = t1 + t2 + t3;
        if (total < best) {
          best = total;
          out.t1 = static_cast<float>(t1);
          out.slow = static_cast<float>(slow);
          out.t3 = static_cast<float>(t3);
          out.kstar = static_cast<int16_t>(kstar);
          out.split = static_cast<int16_t>(k);
          out.d = static_cast<int8_t>(d);
          out.state = 1;
        }
      }
    }
    Sub& me2 = At(sp, u, g);  // same slot (memo never reallocates during a solve)
    if (out.state == 1) me2 = out;
    return me2;
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
  const int G = nodes * im.M;
  im.Reserve(G);
  double best = kInf;
  int best_s = -1;
  for (int S = nodes; S <= std::min(im.L, G); ++S) {
    const auto& r = im.Solve(S, 0, G);
    if (r.state != 1) continue;
    const double t = r.t1 + (3.0 * S + r.kstar - 1) * r.slow + r.t3;
    if (t < best) { best = t; best_s = S; }
  }
  if (best_s < 0)
    return Status::InvalidArgument("cluster.device_memory: no stage mapping of " +
                                   std::to_string(im.L) + " layers on " + std::to_string(nodes) +
                                   " nodes fits in device memory");
  PipelineTemplate t;
  t.nodes = nodes;
  const auto& top = im.At(best_s, 0, G);
  t.t1 = top.t1; t.slow = top.slow; t.t3 = top.t3; t.kstar = top.kstar;
  t.iteration_time = best;
  int sp = best_s, u = 0, g = G;
  while (sp >= 1) {
    const auto& s = im.At(sp, u, g);
    Stage st;
    st.first_layer = u;
    st.last_layer = s.split;
    st.gpus = s.d;
    const int used = G - g;  // GPUs consumed before this stage
    st.node = used / im.M;
    st.first_gpu = used % im.M;
    st.forward = im.pre_f[s.d][s.split] - im.pre_f[s.d][u];
    st.backward = (im.pre_fb[s.d][s.split] - im.pre_fb[s.d][u]) - st.forward;
    t.stages.push_back(st);
    u = s.split;
    g -= s.d;
    --sp;
  }
  return t;
}

}  // namespace reft::planner::oobleck

namespace reft::planner::oobleck {
namespace {

// General form: device group G = GPU count, either G <= M (GPUs of one node) or whole nodes
// (G % M == 0). Halves: whole nodes split into whole nodes, one node's GPUs into two parts.
struct GeneralSolver {
  struct Sub {
    double t1 = 0, slow = 0, t3 = 0;
    int kstar = 0, s = 0, k = 0, g1 = 0;
    bool ok = false;
  };
  const ModelProfile& m;
  int L, M, S_total;
  uint64_t mem;
  double margin;
  std::vector<std::vector<double>> pre_fb;
  std::vector<double> pre_static, pre_act;
  std::unordered_map<uint64_t, Sub> memo;

  static int Nodes(int g, int M) { return g <= M ? 1 : g / M; }
  uint64_t Key(int sp, int u, int v, int g) const {
    return ((static_cast<uint64_t>(sp) * (L + 1) + u) * (L + 1) + v) * 4096 + g;
  }
  const Sub& Solve(int sp, int u, int v, int g) {
    const uint64_t key = Key(sp, u, v, g);
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    Sub best;
    if (sp == 1) {
      if (g <= M) {
        const double need = ((pre_static[v] - pre_static[u]) + S_total * (pre_act[v] - pre_act[u])) / g;
        if (mem == 0 || need <= mem * (1 - margin)) {
          best.t1 = best.slow = best.t3 = pre_fb[g][v] - pre_fb[g][u];
          best.ok = true;
        }
      }
      return memo[key] = best;
    }
    double bt = std::numeric_limits<double>::infinity();
    std::vector<int> firsts;
    if (g > M) {
      for (int a1 = 1; a1 < g / M; ++a1) firsts.push_back(a1 * M);
    } else {
      for (int g1 = 1; g1 < g; ++g1) firsts.push_back(g1);
    }
    for (int g1 : firsts) {
      const int g2 = g - g1;
      for (int s1 = 1; s1 < sp; ++s1) {
        if (g1 < s1 || g2 < sp - s1 || Nodes(g1, M) > s1 || Nodes(g2, M) > sp - s1) continue;
        for (int k = u + s1; k <= v - (sp - s1); ++k) {
          const Sub a = Solve(s1, u, k, g1);  // copies: the map may rehash
          if (!a.ok) continue;
          const Sub z = Solve(sp - s1, k, v, g2);
          if (!z.ok) continue;
          Sub c;
          c.t1 = a.t1 + z.t1;
          if (a.slow >= z.slow) { c.slow = a.slow; c.kstar = a.kstar; c.t3 = a.t3 + z.t1; }
          else { c.slow = z.slow; c.kstar = s1 + z.kstar; c.t3 = z.t3; }
          const double tot = c.t1 + (3.0 * sp + c.kstar - 1) * c.slow + c.t3;
          if (tot < bt) {
            bt = tot;
            c.s = s1; c.k = k; c.g1 = g1; c.ok = true;
            best = c;
          }
        }
      }
    }
    return memo[key] = best;
  }
  void Emit(int sp, int u, int v, int g, int off, PipelineTemplate& t) {
    const Sub sub = Solve(sp, u, v, g);
    if (sp == 1) {
      Stage st;
      st.first_layer = u; st.last_layer = v; st.gpus = g;
      st.node = off / M; st.first_gpu = off % M;
      double f = 0;
      for (int l = u; l < v; ++l) f += m.F(l, g);
      st.forward = f;
      st.backward = (pre_fb[g][v] - pre_fb[g][u]) - f;
      t.stages.push_back(st);
      return;
    }
    Emit(sub.s, u, sub.k, sub.g1, off, t);
    Emit(sp - sub.s, sub.k, v, g - sub.g1, off + sub.g1, t);
  }
};

}  // namespace

Result<PipelineTemplate> TemplatePlanner::PlanGeneral(int nodes) {
  const Impl& im = *impl_;
  if (nodes < 1) return Status::InvalidArgument("template nodes must be >= 1");
  if (im.L == 0) return Status::InvalidArgument("model.layers: empty");
  const int G = nodes * im.M;
  if (G >= 4096) return Status::InvalidArgument("cluster: the general form supports < 4096 GPUs");
  PipelineTemplate best;
  best.iteration_time = kInf;
  for (int S = nodes; S <= std::min(im.L, G); ++S) {
    GeneralSolver gs{im.model, im.L, im.M, S, im.cluster.device_memory_bytes, im.cluster.memory_margin,
                     im.pre_fb, im.pre_static, im.pre_act, {}};
    const auto r = gs.Solve(S, 0, im.L, G);
    if (!r.ok) continue;
    const double t = r.t1 + (3.0 * S + r.kstar - 1) * r.slow + r.t3;
    if (t < best.iteration_time) {
      best = PipelineTemplate{};
      best.nodes = nodes;
      best.t1 = r.t1; best.slow = r.slow; best.t3 = r.t3; best.kstar = r.kstar;
      best.iteration_time = t;
      gs.Emit(S, 0, im.L, G, 0, best);
    }
  }
  if (!std::isfinite(best.iteration_time))
    return Status::InvalidArgument("cluster.device_memory: no stage mapping of " + std::to_string(im.L) +
                                   " layers on " + std::to_string(nodes) + " nodes fits in device memory");
  return best;
}

}  // namespace reft::planner::oobleck
