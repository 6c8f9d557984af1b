#pragma once
/// \file policy_sim.h
/// \brief Event-driven comparison of recovery policies on one failure trace: Odyssey's adaptive
/// choice, an Oobleck-like baseline and a ReCycle-like baseline, each in its own terms, and every
/// layout timed by the same estimator (the 1F1B simulator plus the all-reduce term), so the
/// ratios measure the policies and not their estimators.
///
/// * Odyssey: on each failure, reroute / reconfigure (best plan for the live units, weights
///   copied by Kuhn–Munkres) / optionally restart from in-memory snapshots, chosen by the
///   D̂-weighted score (D̂ = per-unit MTBF / live units).
/// * Oobleck-like: the job runs Oobleck pipelines from its own templates (f and n0 from the
///   model's memory); a failure reinstantiates, borrows or merges (HandleFailures) and the nodes
///   copy the layers their new stage lacks from live holders; "exit" when the paper's rules say so.
/// * ReCycle-like: always reroute to the live data-parallel peers; when a stage has no live peer
///   left, roll back to the last persistent checkpoint and restart into the best symmetric
///   DP × PP plan that fits the live units (ReCycle runs symmetric plans only; spare units idle).
///
/// When a policy's own mechanism cannot continue because a layer lost its last live holder, it
/// rolls back to the last persistent checkpoint (every checkpoint_interval_ms) and restarts on
/// the live units, losing the samples since; Oobleck-like stops for good below (f+1)·n0 nodes
/// (it stores its progress and exits; no node returns in this simulation).
///
/// Failures: independent exponential lifetimes per unit (no repair), the same trace for every
/// policy of a seed. No samples accrue during a transition; a failure during a transition
/// restarts it. Pure functions; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "reft/planner/allreduce.h"
#include "reft/planner/profile.h"
#include "reft/result.h"

namespace reft::planner {

struct PolicySimConfig {
  int nodes = 32;               ///< failure units (NPUs), one GPU each
  int dp = 8, pp = 4;           ///< initial symmetric plan
  int micro_batches = 32;       ///< global N_m
  int micro_batch_size = 1;
  double failure_rate_per_hour = 0.10;  ///< per unit
  double hours = 9;
  double restart_ms = 60000;    ///< restart of every reconfiguration (processes, communicators)
  double transfer_bytes_per_ms = 1.25e6;    ///< per node link for weight copies (10 Gbit/s)
  double checkpoint_interval_ms = 1800000;  ///< persistent checkpoint period (the fallback of all)
  double checkpoint_load_ms = 120000;       ///< load a persistent checkpoint
  double snapshot_load_ms = 5000;           ///< load in-memory snapshots (Odyssey's restart option)
  double edge_latency = 0;
  NetworkSpec network;          ///< gradient all-reduce links
  uint64_t device_memory = 0;
  int min_pp = 1;               ///< R_pp of the re-planning search
  int max_pp = 0;               ///< 0 = 2·pp
  int oobleck_f = 1;            ///< failures the Oobleck-like templates tolerate
  bool restart_from_memory = false;  ///< Odyssey may also restart from in-memory snapshots
};
struct PolicyRun {
  double samples = 0;
  double throughput = 0;        ///< samples per hour
  int failures = 0;
  double downtime_ms = 0;       ///< time spent in transitions
  std::vector<std::string> decisions;
};
enum class PolicyKind { kOdyssey, kOobleck, kRecycle };
const char* PolicyKindName(PolicyKind k);
Result<PolicyRun> SimulatePolicy(const ModelProfile& m, const PolicySimConfig& c, PolicyKind kind, uint64_t seed);

}  // namespace reft::planner
