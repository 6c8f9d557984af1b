#pragma once
/// \file oobleck.h
/// \brief Oobleck (docs/planner.md): node specification, memoised divide-and-conquer GPU–stage
/// mapping (corrected T1/T2/T3), coin-change instantiation, min-max batch distribution,
/// reinstantiation / borrowing / merging under failures, and node joins.
///
/// All functions are pure (no shared state) and thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/planner/allreduce.h"
#include "reft/planner/pipeline_sim.h"
#include "reft/planner/profile.h"
#include "reft/result.h"

namespace reft::planner::oobleck {

/// \brief Node specification (paper §4.1.1, corrected): templates for n0..n_max nodes, consecutive, so
/// f+1 parts cover every N' in [(f+1)·n0, N] (Roberts' formula instead of the garbled eq. 8).
struct NodeSpec {
  int n0 = 0;
  int n_max = 0;
  std::vector<int> sizes;  ///< n0, n0+1, ..., n_max
};

/// \brief Smallest node count whose devices hold the model (eq. 14 per stage, one layer per GPU
/// at most is not assumed: checked by the mapping). 1 when memory is not configured.
int MinNodesForMemory(const ModelProfile& m, const ClusterSpec& c);
/// \brief Templates n0..min(N − f·n0, cap). Error when N < (f+1)·n0 or the cap is < 2·n0 − 1.
Result<NodeSpec> SpecifyNodes(int N, int f, int n0, int cap = 0);

/// \brief One stage of a template: layers [first, last) on `gpus` GPUs of node `node`
/// (node index inside the template), starting at GPU `first_gpu` of that node.
struct Stage {
  int first_layer = 0;
  int last_layer = 0;
  int node = 0;
  int first_gpu = 0;
  int gpus = 1;
  double forward = 0;   ///< stage F on its GPUs (ms)
  double backward = 0;  ///< stage B on its GPUs (ms)
};

/// \brief A pipeline template for `nodes` nodes (paper §4.1.2), with the model's T1/T2/T3 tuple.
struct PipelineTemplate {
  int nodes = 0;
  std::vector<Stage> stages;
  double t1 = 0, slow = 0, t3 = 0;
  int kstar = 0;
  double iteration_time = 0;  ///< T1 + T2 + T3 with N_b = 4S
  /// Pipeline time for N micro-batches: T1 + (N − S + k* − 1)·slow + T3 (§2.4 sound form).
  double TimeFor(int micro_batches) const;
  PipelineSpec ToSpec(int micro_batches) const;
};

/// \brief The one GPU–stage search (the paper's divide and conquer, corrected): a subproblem
/// (S', layers [u, v), device group, stages after it) splits into two halves at every stage
/// count s, layer k and device split (whole nodes into whole nodes, one node's GPUs into two
/// parts), both halves memoised. One planner serves all templates of a model/cluster shape: the
/// largest template fills the memo the smaller ones reuse. Not thread-safe.
class TemplatePlanner {
 public:
  TemplatePlanner(const ModelProfile& model, const ClusterSpec& cluster);
  ~TemplatePlanner();
  TemplatePlanner(const TemplatePlanner&) = delete;
  TemplatePlanner& operator=(const TemplatePlanner&) = delete;
  /// \brief Best template over S in [n, min(L, n·M)] (ties: fewer stages); error if no stage
  /// split fits memory or the memo would exceed its limit.
  Result<PipelineTemplate> Plan(int nodes);
  /// \brief Memo entries computed so far (for benchmarks).
  size_t cache_entries() const;

 private:
  struct Impl;
  Impl* impl_;
};

/// \brief X(p, N): every vector x (pipelines per template) with Σ x_j·n_j = N and Σ x_j >= f+1,
/// by the coin-change recurrence (eq. 5, with the index base corrected). The list grows
/// combinatorially with N: the planner never lists it (SearchInstantiations searches instead);
/// this is the paper's form, for checks on small cases.
std::vector<std::vector<int>> EnumerateInstantiations(const std::vector<int>& sizes, int N,
                                                      int min_pipelines);
/// \brief |X(p, N)| without listing it (saturates at UINT64_MAX).
uint64_t CountInstantiations(const std::vector<int>& sizes, int N, int min_pipelines);

/// \brief Min-max batch distribution (eq. 6 sound form): micro-batches per pipeline, each >= 1.
struct BatchPlan {
  std::vector<int> micro_batches;  ///< per pipeline
  double step_time = 0;            ///< max_i t_i(N_i)
  double throughput = 0;           ///< samples per ms
};
/// \brief Greedy one-at-a-time assignment to the pipeline with the smallest t_i(N_i+1);
/// optimal for the monotone per-pipeline costs. Error (with the recommended global batch in
/// the message) when B is not a multiple of b or too small for one micro-batch per pipeline.
Result<BatchPlan> DistributeBatch(const std::vector<const PipelineTemplate*>& pipelines,
                                  int global_batch, int micro_batch);
/// \brief Exhaustive min-max distribution (tests only; small cases).
BatchPlan BruteForceBatch(const std::vector<const PipelineTemplate*>& pipelines, int total_mb,
                          int micro_batch);
/// \brief Nearest global batch >= `global_batch` that splits into >= `pipelines` micro-batches.
int RecommendGlobalBatch(int global_batch, int micro_batch, int pipelines);

/// \brief What the instantiation search ranks: the templates (increasing node counts, as the
/// node specification lists them), the job's batch, and the layer sizes and links of the
/// gradient all-reduce.
struct InstantiationModel {
  const ModelProfile* model = nullptr;
  std::vector<PipelineTemplate> templates;
  int f = 1;                 ///< at least f+1 pipelines
  int global_batch = 0;      ///< samples
  int micro_batch = 1;       ///< samples per micro-batch
  NetworkSpec network;
};
/// \brief One instantiation with its estimate.
struct InstantiationOption {
  std::vector<int> x;        ///< pipelines per template
  std::vector<int> pipeline_nodes;  ///< node count of each pipeline (largest template first)
  BatchPlan batch;           ///< micro-batches per pipeline (same order); compute time
  SyncEstimate sync;         ///< data-parallel all-reduce after the step
  double step_ms = 0;        ///< compute + sync
  double throughput = 0;     ///< samples per ms
};
/// \brief The ranked search result.
struct InstantiationSearch {
  std::vector<InstantiationOption> best;  ///< highest throughput first (ties: found first)
  uint64_t num_options = 0;  ///< |X(p, N)| (saturating)
  uint64_t evaluated = 0;    ///< vectors whose step time was computed; the bound pruned the rest
  bool complete = true;      ///< false only when max_evaluations stopped the search
};
/// \brief The `top` instantiations of `nodes` nodes with the highest throughput B / (step +
/// all-reduce), by branch and bound over x (largest template first) without listing X(p, N):
/// a partial vector is dropped when the remaining templates cannot carry the rest of the batch
/// within the current top-th best step time on the nodes left (an exact knapsack bound). Exact
/// unless `complete` is false. Errors name job.global_batch when the batch cannot be split.
Result<InstantiationSearch> SearchInstantiations(const InstantiationModel& m, int nodes, size_t top = 1,
                                                 uint64_t max_evaluations = 20000000);

/// \brief One running pipeline: its node ids (in stage order) and the template size it runs.
struct Pipeline {
  std::vector<int> nodes;
};
/// \brief Result of handling failures or joins.
struct Reconfiguration {
  std::vector<Pipeline> pipelines;
  std::vector<std::string> actions;  ///< "reinstantiate p1 with 3 nodes", "borrow ...", "merge ..."
  bool exit_required = false;       ///< fewer than (f+1)·n0 nodes or a layer without a copy
  std::string exit_reason;
};
/// \brief Removes `failed` node ids (paper §5): reinstantiate, else borrow from the pipeline with the
/// largest surplus, else merge with the smallest pipeline. When the result breaks the layout
/// rules (a size without a template, fewer than f+1 pipelines), all live nodes are re-instantiated
/// with the highest-throughput instantiation (SearchInstantiations on `im`, whose templates are
/// those of `spec.sizes`).
Result<Reconfiguration> HandleFailures(const NodeSpec& spec, const InstantiationModel& im,
                                       const std::vector<Pipeline>& current, const std::vector<int>& failed);
/// \brief Adds `joined` node ids: they form new n0-sized pipelines where possible, the rest grow
/// the smallest pipelines (never beyond n_max) so no node is idle.
Reconfiguration HandleJoins(const NodeSpec& spec, const std::vector<Pipeline>& current,
                            const std::vector<int>& joined);

}  // namespace reft::planner::oobleck
