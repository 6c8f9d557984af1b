#pragma once
/// \file odyssey.h
/// \brief Odyssey (docs/planner.md): state and transitions, execution-plan search (Algorithm 1
/// corrected: one plan per failure count), estimator (eqs. 9–14, simulator-backed), Kuhn–Munkres
/// weight transfer in bytes with balanced sources, greedy colouring of asymmetric all-reduces with
/// the clique lower bound, policy choice by throughput × effective time, and an event-driven
/// policy simulator. Pure functions; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/planner/pipeline_sim.h"
#include "reft/planner/profile.h"
#include "reft/result.h"

namespace reft::planner::odyssey {

/// \brief An execution plan (Definition 1 (ii)–(iv)): pipelines of one node per stage.
struct ExecutionPlan {
  std::vector<std::vector<int>> layers_per_stage;  ///< per pipeline, layer count of each stage
  std::vector<int> micro_batches;                  ///< per pipeline
  double step_time = 0;                            ///< simulator (eq. 10/11)
  int nodes() const;
};

// ---- Estimator (§3.5) --------------------------------------------------------------------
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
/// Simulator-based rerouted step: each surviving pipeline's stage i gets its share of the failed
/// peers' micro-batches (eq. 11 with rerouted micro-batches). The value used for decisions.
Result<double> ReroutedStepTimeSim(const std::vector<double>& stage_f, const std::vector<double>& stage_b,
                                   int n_dp, int n_m, const std::vector<int>& failed_per_stage,
                                   double edge_latency = 0);
/// Stage specs of one pipeline from its layer counts (stage i holds the next counts[i] layers).
PipelineSpec StageSpec(const ModelProfile& m, const std::vector<int>& counts, int micro_batches,
                       double edge_latency = 0);
/// eq. 14: peak bytes of stage i of an n_pp-stage pipeline holding `layers` [first, first+count).
double StagePeakMemory(const ModelProfile& m, int first, int count, int n_pp, int i);

// ---- Planner (§3.3) ----------------------------------------------------------------------
struct SearchOptions {
  int min_pp = 1, max_pp = 0;     ///< R_pp (0 = up to the node count)
  int min_dp = 1, max_dp = 0;     ///< R_dp (0 = up to the node count)
  int micro_batches = 8;          ///< N_m: micro-batches per step (global)
  uint64_t device_memory = 0;     ///< 0 = no memory check
  double memory_margin = 0.10;
  double edge_latency = 0;
};
/// Micro-batches in proportion to pipeline nodes (floor), remainder round-robin, none empty.
std::vector<int> DistributeBatch(int n_m, const std::vector<int>& pipeline_nodes);
/// Even layer split; enumerates placements of the remainder layers; drops OOM; fastest wins.
Result<std::vector<int>> SplitLayers(const ModelProfile& m, int stages, int micro_batches,
                                     const SearchOptions& o);
/// Best plan on `nodes` nodes over asymmetric pipeline-length multisets within R_dp × R_pp.
Result<ExecutionPlan> BestPlan(const ModelProfile& m, int nodes, const SearchOptions& o);
/// Algorithm 1 corrected: best plan for N − i nodes, i = 1..max_faults.
std::vector<Result<ExecutionPlan>> PlanTable(const ModelProfile& m, int nodes, int max_faults,
                                             const SearchOptions& o);

// ---- Restorer (§3.4) ---------------------------------------------------------------------
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
  int total_layers = 0;
};
/// `held[i]` = layers survivor i holds; `roles[j]` = layers position j needs; `bytes[l]` per
/// layer (empty = 1 per layer). KM in bytes, dummy zero columns for idle nodes, then for each
/// missing layer the least-loaded holder sends it (ties: lowest node index).
Result<TransferPlan> PlanTransfer(const std::vector<std::vector<int>>& held,
                                  const std::vector<std::vector<int>>& roles,
                                  const std::vector<uint64_t>& bytes);
/// Baseline: survivor i takes position i.
Result<TransferPlan> PositionalTransfer(const std::vector<std::vector<int>>& held,
                                        const std::vector<std::vector<int>>& roles,
                                        const std::vector<uint64_t>& bytes);

/// Colouring of per-layer all-reduces: device_layers[d] = layers on device d (any pipeline).
struct Colouring {
  std::vector<int> round_of_layer;  ///< -1 for layers on no device
  int rounds = 0;
  int lower_bound = 0;              ///< max layers on one device (a clique)
};
Colouring ColourAllReduces(int num_layers, const std::vector<std::vector<int>>& device_layers);

// ---- Policy (§3.1) -----------------------------------------------------------------------
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
/// score(plan) = (B / t_step) · max(0, D̂ − t_trans) / D̂ (D-G2).
double Score(int global_batch, double step_time, double transition, double expected_interval);
/// Picks the feasible candidate with the highest score (ties: the earlier one).
int ChooseCandidate(const std::vector<Candidate>& c);

/// \brief The running layout a failure hits: plan, unit ids per position, reroute state.
struct Layout {
  ExecutionPlan plan;
  std::vector<std::vector<int>> node;  ///< unit id at [pipeline][stage]
  std::vector<int> failed_per_stage;   ///< failures absorbed by rerouting (symmetric plans)
  double step = 0;                     ///< current step time (ms)
  bool symmetric() const;
  /// \brief Layout of `plan` on `units` (pipeline-major order).
  static Layout Of(const ExecutionPlan& plan, const std::vector<int>& units);
};
struct RecoveryCosts {
  double restart_ms = 60000;
  double snapshot_load_ms = 5000;
  double transfer_bytes_per_ms = 1.25e6;
  double expected_interval_ms = 3.6e6;  ///< D̂
  bool positional_transfer = false;     ///< Oobleck-like baseline: no KM
};
/// \brief Scored candidates [reroute, reconfigure, restart] for `failed` units of `cur`
/// (`alive` indexed by unit id, failed units already false), the new plan and its transfer.
struct FailureEvaluation {
  std::vector<Candidate> candidates;
  Result<ExecutionPlan> new_plan = Status::Internal("not evaluated");
  TransferPlan transfer;             ///< survivors are `live_ids` (KM rows)
  std::vector<int> live_ids;
  std::vector<int> failed_per_stage; ///< after rerouting these failures
  double eq13_ms = -1;               ///< eq. 13 as printed (symmetric plans), logged beside the sim
};
FailureEvaluation EvaluateFailure(const ModelProfile& m, const Layout& cur, const std::vector<int>& failed,
                                  const std::vector<bool>& alive, int global_batch,
                                  const SearchOptions& so, const RecoveryCosts& costs);

/// Event-driven comparison of policies on one failure trace (A15).
struct PolicySimConfig {
  int nodes = 32;               ///< failure units (NPUs)
  int dp = 8, pp = 4;           ///< initial symmetric plan
  int micro_batches = 32;       ///< global N_m
  int micro_batch_size = 1;
  double failure_rate_per_hour = 0.10;  ///< per unit
  double hours = 9;
  double restart_ms = 60000;    ///< framework restart (dynamic parallelism and restart)
  double transfer_bytes_per_ms = 1.25e6;  ///< weight-transfer bandwidth (10 Gbit/s)
  double checkpoint_interval_ms = 1800000;  ///< ReCycle-like fallback: persistent checkpoint period
  double checkpoint_load_ms = 120000;       ///< load a persistent checkpoint
  double snapshot_load_ms = 5000;           ///< load REFT in-memory snapshots
  double edge_latency = 0;
  uint64_t device_memory = 0;
  int min_pp = 1;               ///< R_pp of the re-planning search
  int max_pp = 0;               ///< 0 = 2·pp
};
struct PolicyRun {
  double samples = 0;
  double throughput = 0;        ///< samples per hour
  int failures = 0;
  std::vector<std::string> decisions;
};
enum class PolicyKind { kOdyssey, kOobleck, kRecycle };
Result<PolicyRun> SimulatePolicy(const ModelProfile& m, const PolicySimConfig& c, PolicyKind kind,
                                 uint64_t seed);

}  // namespace reft::planner::odyssey
