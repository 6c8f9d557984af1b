// Oobleck instantiation (eq. 5 with the index base corrected), the instantiation search that
// replaces listing X(p, N), and batch distribution (eq. 6 replaced by min-max with N_b >= 1 and
// the global batch kept).
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "oobleck.h"
#include "ordering.h"

namespace reft::planner::oobleck {

std::vector<std::vector<int>> EnumerateInstantiations(const std::vector<int>& sizes, int N, int min_pipelines) {
  const int p = static_cast<int>(sizes.size());
  if (N < 0 || p == 0) return {};
  // X(j, v): combinations over the first j templates; X(0,0) = [0-vector]. Row j is built from
  // row j-1 (copy) and row j itself at v − n_{j−1} with x_{j−1} incremented (θ).
  using List = std::vector<std::vector<int>>;
  std::vector<List> prev(N + 1), cur(N + 1);
  prev[0].push_back(std::vector<int>(p, 0));
  for (int j = 1; j <= p; ++j) {
    const int nj = sizes[j - 1];
    for (int v = 0; v <= N; ++v) {
      cur[v] = prev[v];
      if (v - nj >= 0) {
        for (auto x : cur[v - nj]) {
          ++x[j - 1];
          cur[v].push_back(std::move(x));
        }
      }
    }
    std::swap(prev, cur);
  }
  List out;
  for (auto& x : prev[N]) {
    int count = 0;
    for (int c : x) count += c;
    if (count >= min_pipelines) out.push_back(x);
  }
  return out;
}

uint64_t CountInstantiations(const std::vector<int>& sizes, int N, int min_pipelines) {
  if (N < 0 || sizes.empty()) return 0;
  // ways[v][c]: vectors filling v nodes with c pipelines, c capped at min_pipelines.
  const int C = std::max(0, min_pipelines);
  std::vector<std::vector<uint64_t>> ways(N + 1, std::vector<uint64_t>(C + 1, 0));
  ways[0][0] = 1;
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  for (int n : sizes) {
    if (n < 1) continue;
    for (int v = n; v <= N; ++v)  // unbounded: each template any number of times
      for (int c = 0; c <= C; ++c) {
        const int to = std::min(C, c + 1);
        ways[v][to] = add(ways[v][to], ways[v - n][c]);
      }
  }
  return ways[N][C];
}

namespace {

// Branch and bound over instantiation vectors. A pipeline of template j running N micro-batches
// takes a_j + N·slow_j (the T1/T2/T3 form), so by time T it can run cap_j(T) of them; a vector
// x can finish the step by T iff every used template has cap_j(T) >= 1 and Σ x_j·cap_j(T) >= the
// batch. Its min-max step is the smallest such T, which the greedy distribution reaches.
class Searcher {
 public:
  Searcher(const InstantiationModel& m, int nodes, size_t top, uint64_t budget)
      : m_(m), nodes_(nodes), top_(top), budget_(budget) {}

  Result<InstantiationSearch> Run() {
    const int p = static_cast<int>(m_.templates.size());
    if (p == 0) return Status::InvalidArgument("templates: none to instantiate");
    if (m_.micro_batch < 1) return Status::InvalidArgument("job.micro_batch: must be >= 1");
    if (m_.global_batch <= 0 || m_.global_batch % m_.micro_batch != 0)
      return Status::InvalidArgument("job.global_batch: " + std::to_string(m_.global_batch) +
                                     " is not a positive multiple of job.micro_batch " +
                                     std::to_string(m_.micro_batch) + "; recommended global batch " +
                                     std::to_string(RecommendGlobalBatch(m_.global_batch, m_.micro_batch, 1)));
    total_ = m_.global_batch / m_.micro_batch;
    for (const auto& t : m_.templates) {
      sizes_.push_back(t.nodes);
      intercept_.push_back(t.TimeFor(0));
      slow_.push_back(t.slow);
      max_layers_.push_back(0);
      for (const auto& s : t.stages) max_layers_.back() = std::max(max_layers_.back(), s.last_layer - s.first_layer);
    }
    out_.num_options = CountInstantiations(sizes_, nodes_, m_.f + 1);
    // reach[j][v]: v nodes can be filled exactly with templates 0..j-1.
    reach_.assign(p + 1, std::vector<char>(nodes_ + 1, 0));
    reach_[0][0] = 1;
    for (int j = 1; j <= p; ++j)
      for (int v = 0; v <= nodes_; ++v)
        reach_[j][v] = reach_[j - 1][v] || (v >= sizes_[j - 1] && reach_[j][v - sizes_[j - 1]]);
    sync_floor_ = SyncFloor();
    x_.assign(p, 0);
    SetThreshold(std::numeric_limits<double>::infinity());
    Visit(p, nodes_, 0);
    if (out_.best.empty())
      return Status::InvalidArgument("cluster.nodes: no instantiation of " + std::to_string(nodes_) + " nodes with " +
                                     std::to_string(m_.f + 1) + "+ pipelines can run the global batch of " +
                                     std::to_string(m_.global_batch) + " (recommended global batch " +
                                     std::to_string(RecommendGlobalBatch(m_.global_batch, m_.micro_batch,
                                                                         nodes_ / std::max(1, sizes_[0]))) +
                                     ")");
    for (auto& o : out_.best) REFT_RETURN_NOT_OK(Finish(o));
    return out_;
  }

 private:
  int Cap(int j, double T) const {
    const double c = (T - intercept_[j]) / slow_[j];
    if (!(c >= 0)) return 0;
    return static_cast<int>(std::min<double>(total_, std::floor(c * (1 + kTimeTieTolerance) + kTimeTieTolerance)));
  }
  // A lower bound of the all-reduce term of any instantiation: at least f+1 (>= 2) participants,
  // at least as many rounds as the fewest layers a template puts on its busiest stage.
  double SyncFloor() const {
    const int participants = std::max(2, m_.f + 1);
    if (m_.f < 1 || m_.model == nullptr) return 0;
    double per_layer = std::numeric_limits<double>::infinity();
    int max_gpus = 1;
    for (const auto& t : m_.templates)
      for (const auto& s : t.stages) max_gpus = std::max(max_gpus, s.gpus);
    for (const auto& l : m_.model->layers)
      per_layer = std::min(per_layer, RingAllReduceMs(static_cast<double>(l.param_bytes) / max_gpus, participants, m_.network));
    const int rounds = *std::min_element(max_layers_.begin(), max_layers_.end());
    return std::isfinite(per_layer) ? rounds * per_layer : 0;
  }
  // Pruning threshold: a vector can enter the top list only if its compute step is below it.
  // most_[j][v]: the most micro-batches templates < j can carry by the threshold on exactly v
  // nodes (unbounded knapsack; -1 when v cannot be filled with templates that finish by then).
  void SetThreshold(double worst_step) {
    threshold_ = worst_step - sync_floor_;
    if (std::isinf(threshold_)) return;
    const int p = static_cast<int>(sizes_.size());
    most_.assign(p + 1, std::vector<long>(nodes_ + 1, -1));
    most_[0][0] = 0;
    for (int j = 1; j <= p; ++j) {
      const int n = sizes_[j - 1];
      const long cap = Cap(j - 1, threshold_);
      for (int v = 0; v <= nodes_; ++v) {
        most_[j][v] = most_[j - 1][v];
        if (cap >= 1 && v >= n && most_[j][v - n] >= 0) most_[j][v] = std::max(most_[j][v], most_[j][v - n] + cap);
      }
    }
  }
  // Capacity at the threshold of the templates chosen so far (x_[j..p-1]); recomputed at every
  // node because the threshold only falls while the search runs.
  double ChosenCapacity(int j) const {
    double cap = 0;
    for (size_t i = j; i < x_.size(); ++i)
      if (x_[i]) cap += static_cast<double>(x_[i]) * Cap(static_cast<int>(i), threshold_);
    return cap;
  }
  // Templates j-1 .. 0 still to choose for `left` nodes; `count` pipelines chosen so far.
  void Visit(int j, int left, int count) {
    if (!complete_) return;
    if (j == 0) {
      if (left == 0 && count >= m_.f + 1) Leaf(count);
      return;
    }
    if (!reach_[j][left]) return;
    const int n = sizes_[j - 1];
    if (count + left / sizes_[0] < m_.f + 1) return;    // too few pipelines even with the smallest
    if (count + (left + n - 1) / n > total_) return;    // more pipelines than micro-batches
    if (!std::isinf(threshold_) && (most_[j][left] < 0 || ChosenCapacity(j) + most_[j][left] < total_)) return;
    for (int k = left / n; k >= 0; --k) {
      if (k > 0 && !std::isinf(threshold_) && Cap(j - 1, threshold_) < 1) continue;  // cannot finish by then
      x_[j - 1] = k;
      Visit(j - 1, left - k * n, count + k);
    }
    x_[j - 1] = 0;
  }
  void Leaf(int count) {
    if (count > total_) return;  // every pipeline needs a micro-batch
    if (++out_.evaluated > budget_) {
      complete_ = false;
      out_.complete = false;
      return;
    }
    const double compute = ComputeStep();
    if (Longer(compute, threshold_)) return;
    InstantiationOption o;
    o.x = x_;
    o.batch.step_time = compute;
    o.sync = Sync(count);
    o.step_ms = compute + o.sync.ms;
    // Insert after every option not slower beyond the tolerance (ties: found first).
    auto it = std::find_if(out_.best.begin(), out_.best.end(),
                           [&](const InstantiationOption& b) { return Shorter(o.step_ms, b.step_ms); });
    if (static_cast<size_t>(it - out_.best.begin()) >= top_) return;
    out_.best.insert(it, std::move(o));
    if (out_.best.size() > top_) out_.best.pop_back();
    if (out_.best.size() == top_) SetThreshold(out_.best.back().step_ms);
  }
  // Smallest T at which x carries the batch (bisection on the monotone capacity; T lies on a
  // breakpoint a_j + N·slow_j, reached within the tie tolerance).
  double ComputeStep() const {
    double lo = 0, hi = 0;
    for (size_t j = 0; j < x_.size(); ++j)
      if (x_[j]) {
        lo = std::max(lo, intercept_[j] + slow_[j]);
        hi = std::max(hi, intercept_[j] + total_ * slow_[j]);
      }
    auto carries = [&](double T) {
      long c = 0;
      for (size_t j = 0; j < x_.size(); ++j)
        if (x_[j]) {
          const int cj = Cap(static_cast<int>(j), T);
          if (cj < 1) return false;
          c += static_cast<long>(x_[j]) * cj;
        }
      return c >= total_;
    };
    if (!carries(lo)) {
      for (int i = 0; i < 200 && Longer(hi, lo); ++i) {
        const double mid = 0.5 * (lo + hi);
        (carries(mid) ? hi : lo) = mid;
      }
      lo = hi;
    }
    // Snap to the breakpoint: the slowest used pipeline at the capacities reached (what the
    // greedy distribution's maximum is).
    double t = 0;
    for (size_t j = 0; j < x_.size(); ++j)
      if (x_[j]) t = std::max(t, intercept_[j] + Cap(static_cast<int>(j), lo) * slow_[j]);
    return t;
  }
  // The all-reduce depends on the number of pipelines and on which templates are used.
  SyncEstimate Sync(int count) {
    std::vector<char> used(x_.size());
    for (size_t j = 0; j < x_.size(); ++j) used[j] = x_[j] > 0;
    auto key = std::make_pair(count, used);
    auto it = sync_cache_.find(key);
    if (it != sync_cache_.end()) return it->second;
    SyncEstimate s;
    if (m_.model != nullptr) {
      std::vector<SyncDevice> devices;
      for (size_t j = 0; j < x_.size(); ++j)
        for (int c = 0; c < x_[j]; ++c)
          for (const auto& st : m_.templates[j].stages) {
            SyncDevice d;
            for (int l = st.first_layer; l < st.last_layer; ++l) d.layers.push_back(l);
            d.gpus = st.gpus;
            devices.push_back(std::move(d));
          }
      s = GradientSync(*m_.model, devices, m_.network);
    }
    return sync_cache_[key] = s;
  }
  // The greedy distribution of the kept options (its maximum equals ComputeStep's).
  Status Finish(InstantiationOption& o) const {
    std::vector<const PipelineTemplate*> pipes;
    for (int j = static_cast<int>(o.x.size()) - 1; j >= 0; --j)
      for (int c = 0; c < o.x[j]; ++c) {
        pipes.push_back(&m_.templates[j]);
        o.pipeline_nodes.push_back(m_.templates[j].nodes);
      }
    REFT_ASSIGN_OR_RETURN(o.batch, DistributeBatch(pipes, m_.global_batch, m_.micro_batch));
    o.step_ms = o.batch.step_time + o.sync.ms;
    o.throughput = m_.global_batch / o.step_ms;
    return Status::OK();
  }

  const InstantiationModel& m_;
  const int nodes_;
  const size_t top_;
  const uint64_t budget_;
  int total_ = 0;
  std::vector<int> sizes_, max_layers_;
  std::vector<double> intercept_, slow_;
  std::vector<std::vector<long>> most_;
  std::vector<std::vector<char>> reach_;
  std::vector<int> x_;
  double threshold_ = 0, sync_floor_ = 0;
  bool complete_ = true;
  std::map<std::pair<int, std::vector<char>>, SyncEstimate> sync_cache_;
  InstantiationSearch out_;
};

}  // namespace

Result<InstantiationSearch> SearchInstantiations(const InstantiationModel& m, int nodes, size_t top,
                                                 uint64_t max_evaluations) {
  if (nodes < 1) return Status::InvalidArgument("cluster.nodes: no live node to instantiate");
  if (top < 1) top = 1;
  return Searcher(m, nodes, top, max_evaluations).Run();
}

int RecommendGlobalBatch(int global_batch, int micro_batch, int pipelines) {
  const int mb = std::max({1, (global_batch + micro_batch - 1) / micro_batch, pipelines});
  return mb * micro_batch;
}

Result<BatchPlan> DistributeBatch(const std::vector<const PipelineTemplate*>& pipes,
                                  int global_batch, int micro_batch) {
  if (pipes.empty()) return Status::InvalidArgument("pipelines: none to distribute the batch over");
  if (micro_batch < 1) return Status::InvalidArgument("job.micro_batch: must be >= 1");
  const int x = static_cast<int>(pipes.size());
  if (global_batch <= 0 || global_batch % micro_batch != 0 || global_batch / micro_batch < x)
    return Status::InvalidArgument(
        "job.global_batch: " + std::to_string(global_batch) + " cannot be split into micro-batches of " +
        std::to_string(micro_batch) + " over " + std::to_string(x) +
        " pipelines; recommended global batch " +
        std::to_string(RecommendGlobalBatch(global_batch, micro_batch, x)));
  const int total = global_batch / micro_batch;
  BatchPlan plan;
  plan.micro_batches.assign(x, 1);
  // Greedy: each further micro-batch goes where it raises that pipeline's time least (ties: the
  // lowest pipeline index); costs are increasing in N, so the running maximum is minimal at
  // every step (exchange argument).
  for (int m = x; m < total; ++m) {
    int best = 0;
    double bt = std::numeric_limits<double>::infinity();
    for (int i = 0; i < x; ++i) {
      const double t = pipes[i]->TimeFor(plan.micro_batches[i] + 1);
      if (Shorter(t, bt)) { bt = t; best = i; }
    }
    ++plan.micro_batches[best];
  }
  for (int i = 0; i < x; ++i)
    plan.step_time = std::max(plan.step_time, pipes[i]->TimeFor(plan.micro_batches[i]));
  plan.throughput = global_batch / plan.step_time;
  return plan;
}

BatchPlan BruteForceBatch(const std::vector<const PipelineTemplate*>& pipes, int total,
                          int micro_batch) {
  const int x = static_cast<int>(pipes.size());
  BatchPlan best;
  best.step_time = std::numeric_limits<double>::infinity();
  std::vector<int> n(x, 1);
  std::function<void(int, int)> rec = [&](int i, int left) {
    if (i == x - 1) {
      n[i] = left;
      double t = 0;
      for (int k = 0; k < x; ++k) t = std::max(t, pipes[k]->TimeFor(n[k]));
      if (t < best.step_time) { best.step_time = t; best.micro_batches = n; }
      return;
    }
    for (int c = 1; c <= left - (x - 1 - i); ++c) {
      n[i] = c;
      rec(i + 1, left - c);
    }
  };
  if (x > 0 && total >= x) rec(0, total);
  best.throughput = total * micro_batch / best.step_time;
  return best;
}

}  // namespace reft::planner::oobleck
