#pragma once
/// \file oobleck.h
/// \brief Oobleck (docs/planner.md): node specification, memoised divide-and-conquer GPU–stage
/// mapping (corrected T1/T2/T3), coin-change instantiation, min-max batch distribution,
/// reinstantiation / borrowing / merging under failures, and node joins.
///
/// All functions are pure (no shared state) and thread-safe.

#include <cstdint>
#include <vector>

#include "reft/planner/pipeline_sim.h"
#include "reft/planner/profile.h"
#include "reft/result.h"

namespace reft::planner::oobleck {

/// \brief Node specification (§2.1, corrected): templates for n0..n_max nodes, consecutive, so
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

/// \brief A pipeline template for `nodes` nodes (§2.2), with the model's T1/T2/T3 tuple.
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

/// \brief Memoised chain-form solver shared by all templates of one model/cluster shape
/// (the largest template fills the cache for the smaller ones). Not thread-safe.
class TemplatePlanner {
 public:
  TemplatePlanner(const ModelProfile& model, const ClusterSpec& cluster);
  ~TemplatePlanner();
  /// \brief Best template over S in [n, min(L, n·M)]; error if no stage split fits memory.
  Result<PipelineTemplate> Plan(int nodes);
  /// \brief The paper's general divide-and-conquer form (split into (s, k, G1) halves, memo key
  /// (S', u, v, G)) for fidelity comparisons on small cases: O(L⁴·n) keys, no memory check of
  /// activations beyond the template's stage count. Same T1/T2/T3 composition as Plan().
  Result<PipelineTemplate> PlanGeneral(int nodes);
  /// \brief Memo entries computed so far (for benchmarks).
  size_t cache_entries() const;

 private:
  struct Impl;
  Impl* impl_;
};

/// \brief X(p, N): every vector x (pipelines per template) with Σ x_j·n_j = N and Σ x_j >= f+1,
/// by the coin-change recurrence (eq. 5, with the index base corrected), at most `limit` vectors.
std::vector<std::vector<int>> EnumerateInstantiations(const std::vector<int>& sizes, int N,
                                                      int min_pipelines, size_t limit = 100000);

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
/// \brief Removes `failed` node ids (§2.5): reinstantiate, else borrow from the pipeline with the
/// largest surplus, else merge with the smallest pipeline; the result uses only template sizes.
Reconfiguration HandleFailures(const NodeSpec& spec, int f, const std::vector<Pipeline>& current,
                               const std::vector<int>& failed);
/// \brief Adds `joined` node ids: they form new n0-sized pipelines where possible, the rest grow
/// the smallest pipelines (never beyond n_max) so no node is idle.
Reconfiguration HandleJoins(const NodeSpec& spec, const std::vector<Pipeline>& current,
                            const std::vector<int>& joined);

}  // namespace reft::planner::oobleck
