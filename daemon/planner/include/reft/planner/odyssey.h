#pragma once
/// \file odyssey.h
/// \brief Odyssey (docs/planner.md): state and transitions, execution-plan search (Algorithm 1
/// corrected: one plan per failure count), estimator (eqs. 9–14, simulator-backed, plus the
/// data-parallel all-reduce of allreduce.h), Kuhn–Munkres weight transfer in bytes with balanced
/// sources, policy choice by throughput × effective time. Pure functions; thread-safe.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reft/planner/allreduce.h"
#include "reft/planner/pipeline_sim.h"
#include "reft/planner/profile.h"
#include "reft/result.h"

namespace reft::planner::odyssey {

/// \brief An execution plan (Definition 1 (ii)–(iv)): pipelines of one node per stage.
struct ExecutionPlan {
  std::vector<std::vector<int>> layers_per_stage;  ///< per pipeline, layer count of each stage
  std::vector<int> micro_batches;                  ///< per pipeline
  double compute_time = 0;                         ///< simulator (eqs. 10/11): slowest pipeline
  SyncEstimate sync;                               ///< data-parallel all-reduce after it
  double step_time = 0;                            ///< compute_time + sync.ms
  int nodes() const;
};

// ---- Estimator (paper §IV-C) -----------------------------------------------------------------
/// eq. 9: (N_pp + N_m − 1)(T_f + T_b).
double SymmetricStepTime(int n_pp, int n_m, double tf, double tb);
/// Closed-form 1F1B step of one pipeline with unequal stages (eq. 9 generalised with the
/// corrected T1/T2/T3 split): Σ(F+B) + (N − S + k* − 1)·max(F+B) + Σ_{k≥k*}(F+B), k* = slowest
/// stage, plus the edge latencies on the fill and drain paths. Equals eq. 9 for equal stages.
double AnalyticStepTime(const PipelineSpec& p);
/// eq. 13 as printed (pessimistic; sum over stages); eq. 12 is the single-failure case.
/// Error when some failed[i] >= n_dp (corrected boundary: no replica left).
Result<double> ReroutedStepTimeEq13(int n_pp, int n_dp, int n_m, double tf, double tb,
                                    const std::vector<int>& failed_per_stage);
/// Rerouted step of a symmetric N_dp × S plan (the first failed[i] pipelines lost stage i), by
/// the schedule of PlanSchedule: the value used for decisions, beside eq. 13 as printed.
Result<double> ReroutedStepTimeSim(const ModelProfile& m, const std::vector<int>& layer_counts, int n_dp, int n_m,
                                   const std::vector<int>& failed_per_stage, double edge_latency = 0);
/// Stage specs of one pipeline from its layer counts (stage i holds the next counts[i] layers).
PipelineSpec StageSpec(const ModelProfile& m, const std::vector<int>& counts, int micro_batches,
                       double edge_latency = 0);
/// eq. 14: peak bytes of stage i of an n_pp-stage pipeline holding `layers` [first, first+count).
double StagePeakMemory(const ModelProfile& m, int first, int count, int n_pp, int i);

// ---- Planner (paper §IV-A) -------------------------------------------------------------------
struct SearchOptions {
  int min_pp = 1, max_pp = 0;     ///< R_pp (0 = up to the node count)
  int min_dp = 1, max_dp = 0;     ///< R_dp (0 = up to the node count)
  int micro_batches = 8;          ///< N_m: micro-batches per step (global)
  uint64_t device_memory = 0;     ///< 0 = no memory check
  double memory_margin = 0.10;
  double edge_latency = 0;
  NetworkSpec network;            ///< gradient all-reduce links
  /// Only plans whose pipelines all have the same stages (what a dp × tp × pp job runs: reft
  /// restores such layouts only); nodes beyond dp·pp stay idle. False: Odyssey's search over
  /// pipelines of different lengths, every node used.
  bool uniform = false;
};
/// \brief Fills compute_time (eq. 10 over the simulated pipelines), sync and step_time of `p`.
Status EstimateStep(const ModelProfile& m, const SearchOptions& o, ExecutionPlan& p);
/// \brief The schedule of plan `p` over its live stages, every stage a process: the
/// micro-batches of a dead position (dead[p][s]) go round-robin to the live peers holding the
/// same layers (pipelines with identical stage boundaries); a rerouted micro-batch still comes
/// from its own pipeline's upstream stage and goes on to its downstream stage (ReCycle's data
/// path). Each process runs its ops in the order they would have started had no node failed
/// (each pipeline's 1F1B schedule): a rerouted micro-batch takes the slot the dead stage would
/// have used, and the schedule cannot deadlock. Error when a dead stage has no live peer.
Result<Schedule> PlanSchedule(const ModelProfile& m, const ExecutionPlan& p,
                              const std::vector<std::vector<bool>>& dead, double edge_latency);
/// \brief Compute time of `p` with dead positions rerouted: eq. 11 on PlanSchedule's schedule
/// (with no dead position, eq. 10 over the pipelines).
Result<double> ReroutedComputeTime(const ModelProfile& m, const ExecutionPlan& p,
                                   const std::vector<std::vector<bool>>& dead, double edge_latency);
/// \brief What a running job tells about one layer without a time profile.
struct LayerState {
  uint64_t param_bytes = 0;      ///< parameters (gradients are as large)
  uint64_t optimizer_bytes = 0;  ///< optimizer state
  uint64_t activation_bytes = 0; ///< per micro-batch, if known (0 = unknown: memory not checked)
};
/// \brief A per-layer profile from a measured step time, for a job that attached none: each
/// layer's F+B is proportional to its parameters (dense layers' FLOPs are), equal when no layer
/// has any, B = 2F, scaled so that the estimate of the running plan (eq. 11 plus the all-reduce)
/// equals `measured_step_ms`. Error when the all-reduce alone exceeds the measured step.
Result<ModelProfile> ProfileFromStepTime(const std::vector<LayerState>& layers, const ExecutionPlan& running,
                                         double measured_step_ms, const SearchOptions& o);

/// Micro-batches in proportion to pipeline nodes (floor), remainder round-robin, none empty.
std::vector<int> DistributeBatch(int n_m, const std::vector<int>& pipeline_nodes);
/// Even layer split; enumerates placements of the remainder layers; drops OOM; fastest wins.
Result<std::vector<int>> SplitLayers(const ModelProfile& m, int stages, int micro_batches,
                                     const SearchOptions& o);
/// Best plan on `nodes` nodes over asymmetric pipeline-length multisets within R_dp × R_pp
/// (with `o.uniform`, over dp identical pipelines of pp stages, dp·pp <= nodes).
Result<ExecutionPlan> BestPlan(const ModelProfile& m, int nodes, const SearchOptions& o);
/// Algorithm 1 corrected: best plan for N − i nodes, i = 1..max_faults.
std::vector<Result<ExecutionPlan>> PlanTable(const ModelProfile& m, int nodes, int max_faults,
                                             const SearchOptions& o);

// ---- Restorer (paper §IV-B) ------------------------------------------------------------------
/// Min-cost assignment (Kuhn–Munkres / Hungarian, O(n³)); cost[i][j] for row i → column j.
/// Rows <= columns required. Returns the column of each row.
std::vector<int> Hungarian(const std::vector<std::vector<double>>& cost);
/// One layer copy: `layer` from node `from` to node `to`.
struct LayerMove {
  int layer = 0;
  int from = 0;
  int to = 0;
  uint64_t bytes = 0;
};
struct TransferPlan {
  std::vector<int> position_of_node;  ///< survivor index -> new position (-1 = idle)
  std::vector<LayerMove> moves;
  uint64_t total_bytes = 0;
  uint64_t max_sender_bytes = 0;
  uint64_t max_receiver_bytes = 0;  ///< moves and fills
  int total_layers = 0;
  /// Bytes of layers a node keeps but holds only part of (`held_bytes`): what it pulls from
  /// its stage's other members on top of the moves.
  uint64_t fill_bytes = 0;
  /// Bytes through the busiest node link (sent or received): what bounds the copy time.
  uint64_t max_link_bytes() const { return std::max(max_sender_bytes, max_receiver_bytes); }
};
/// `held[i]` = layers survivor i holds; `roles[j]` = layers position j needs; `bytes[l]` per
/// layer (empty = 1 per layer). KM in bytes, dummy zero columns for idle nodes, then for each
/// missing layer the least-loaded holder sends it (ties: lowest node index).
/// `held_bytes[i][l]` (empty = whole layers): the bytes of held layer l survivor i has.
/// Odyssey assumes every holder has whole layers (weights in GPU memory); reft's copies are
/// host-memory shards — a member holds its own shard of its stage and the copies it keeps — and
/// its trainers restart, so a node keeping layer l still pulls bytes[l] - held_bytes[i][l]: KM
/// counts that too.
using HeldBytes = std::vector<std::vector<uint64_t>>;
Result<TransferPlan> PlanTransfer(const std::vector<std::vector<int>>& held,
                                  const std::vector<std::vector<int>>& roles,
                                  const std::vector<uint64_t>& bytes, const HeldBytes& held_bytes = {});
/// Baseline: survivor i takes position i.
Result<TransferPlan> PositionalTransfer(const std::vector<std::vector<int>>& held,
                                        const std::vector<std::vector<int>>& roles,
                                        const std::vector<uint64_t>& bytes,
                                        const HeldBytes& held_bytes = {});

// ---- Policy (paper §III) ---------------------------------------------------------------------
enum class Policy { kReroute, kReconfigure, kRestart };
const char* PolicyName(Policy p);
struct Candidate {
  Policy policy;
  bool feasible = false;
  double step_time = 0;       ///< ms
  double transition = 0;      ///< ms
  double score = 0;           ///< samples/ms × max(0, D̂ − t_trans)/D̂
  std::string why;
};
/// score(plan) = (B / t_step) · max(0, D̂ − t_trans) / D̂: eq. 8 with the inter-fault duration,
/// unknown at decision time, replaced by D̂, the expected time to the next failure.
double Score(int global_batch, double step_time, double transition, double expected_interval);
/// Picks the feasible candidate with the highest score (ties: the earlier one).
int ChooseCandidate(const std::vector<Candidate>& c);

/// \brief The running layout a failure hits: the plan and the unit at each position. Units that
/// failed since the plan was adopted stay in `node`; the `alive` vector marks them, and their
/// work is being rerouted.
struct Layout {
  ExecutionPlan plan;
  std::vector<std::vector<int>> node;  ///< unit id at [pipeline][stage]
  double step = 0;                     ///< current step time (ms), rerouting included
  bool symmetric() const;
  /// \brief Layout of `plan` on `units` (pipeline-major order).
  static Layout Of(const ExecutionPlan& plan, const std::vector<int>& units);
};
struct RecoveryCosts {
  double restart_ms = 60000;
  double snapshot_load_ms = 5000;
  double transfer_bytes_per_ms = 1.25e6;
  double expected_interval_ms = 3.6e6;  ///< D̂
  /// Bytes one copy of each layer moves (a running job knows what its buffers hold); empty =
  /// the profile's StateBytes (parameters, gradients and optimizer state).
  std::vector<uint64_t> layer_bytes;
  /// Per unit (as the layout's unit ids) the bytes of each layer it holds (PlanTransfer);
  /// empty = whole layers.
  std::vector<std::vector<uint64_t>> unit_held_bytes;
  /// Survivors to positions of the new plan: Kuhn–Munkres in bytes (false), or the baseline
  /// that keeps survivor i at position i (true; for comparing the two on a running job).
  bool positional_transfer = false;
};
/// \brief The survivors' (rows of `held`, `held_bytes`) transfer onto the positions `roles` of a
/// new plan, with the assignment `costs` asks for (Kuhn–Munkres, or positional), `bytes` per layer.
Result<TransferPlan> AssignTransfer(const RecoveryCosts& costs, const std::vector<std::vector<int>>& held,
                                    const std::vector<std::vector<int>>& roles, const std::vector<uint64_t>& bytes,
                                    const HeldBytes& held_bytes);
/// \brief Transition of a move to a new plan that copies `transfer`: a restart, and the busiest
/// node link's bytes (senders and receivers copy in parallel).
double CopyTransition(const RecoveryCosts& costs, const TransferPlan& transfer);
/// \brief Step time of `cur` with the work of its dead units (false in `alive`) rerouted to live
/// peers (ReroutedComputeTime) plus the all-reduce among the live holders.
Result<double> ReroutedStep(const ModelProfile& m, const Layout& cur, const std::vector<bool>& alive,
                            const SearchOptions& so);
/// \brief Scored candidates [reroute, reconfigure, restart] for the units in `failed` (already
/// false in `alive`, which is indexed by unit id), the new plan and its Kuhn–Munkres transfer.
/// Reconfigure and restart both move to the best plan for the live units (BestPlan); reconfigure
/// copies the missing layers from live holders (restart + the busiest link's bytes), restart
/// reloads every rank from in-memory snapshots (restart + snapshot load).
struct FailureEvaluation {
  std::vector<Candidate> candidates;
  Result<ExecutionPlan> new_plan = Status::Internal("not evaluated");
  TransferPlan transfer;             ///< survivors are `live_ids` (KM rows)
  std::vector<int> live_ids;
  double eq13_ms = -1;               ///< eq. 13 as printed (symmetric plans), logged beside the sim
};
FailureEvaluation EvaluateFailure(const ModelProfile& m, const Layout& cur, const std::vector<int>& failed,
                                  const std::vector<bool>& alive, int global_batch,
                                  const SearchOptions& so, const RecoveryCosts& costs);
/// \brief Layers held by the unit at every live position of `cur` (rows of a transfer plan) and
/// the matching unit ids.
void LiveHoldings(const Layout& cur, const std::vector<bool>& alive, std::vector<int>& ids,
                  std::vector<std::vector<int>>& held);
/// \brief Layer ranges of every stage of every pipeline, pipeline-major.
std::vector<std::vector<int>> StageLayerLists(const ExecutionPlan& p);

}  // namespace reft::planner::odyssey
