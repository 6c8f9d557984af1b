#pragma once
/// \file keys.h
/// \brief The etcd key schema of reft's control plane (docs/coordination.md). Every key lives
/// under /reft/v1/; steps in keys are zero-padded to 20 digits so that key order is step order
/// and "every completion up to step S" is one key range.
///
///   /reft/v1/nodes/<node>                        {address, epoch}             node's lease
///   /reft/v1/known/<node>                        {address, epoch}             (kept: lists dead)
///   /reft/v1/jobs/<job>/owner                    {uid, gid, group, claimed_at_ms, claimed_on}
///   /reft/v1/jobs/<job>/layout                   {dp, tp, pp, zero}
///   /reft/v1/jobs/<job>/generation               {generation, base_step, persist_floor, reason}
///   /reft/v1/jobs/<job>/committed                {step, generation}
///   /reft/v1/jobs/<job>/completions/<step>/<node> {generation, ranks}
///   /reft/v1/jobs/<job>/locations/<pp>/<tp>/<dp>  {node, step}
///   /reft/v1/jobs/<job>/joined/<pp>/<tp>/<dp>     {node}                       node's lease
///   /reft/v1/jobs/<job>/coordinator              {node}                       node's lease
///   /reft/v1/jobs/<job>/restore                  {generation, step, source, decided_by, detail}
///   /reft/v1/jobs/<job>/plan                     {generation, step, basis, planner, state, ..., plan}
///   /reft/v1/jobs/<job>/persisted                {step, at_ms}
///   /reft/v1/jobs/<job>/operator/<node>          {node}                       node's lease
///   /reft/v1/sweeper                             {node}                       node's lease

#include <cstdint>
#include <string>

#include "reft/store/snapshot_store.h"

namespace reft::coord::keys {

inline const std::string kRoot = "/reft/v1/";

std::string NodesPrefix();
std::string Node(const std::string& node_id);
/// The node id of a key under NodesPrefix(), or "" when it is not one.
std::string NodeIdOf(const std::string& key);
/// Every node that ever registered keeps a record here without a lease, so that a node whose
/// lease expired is listed as dead rather than forgotten (`etcdctl del` forgets it).
std::string KnownPrefix();
std::string Known(const std::string& node_id);

/// Every job's keys, and the job a key under it belongs to ("" when none).
std::string JobsPrefix();
std::string JobOf(const std::string& key);
std::string JobPrefix(const std::string& job);
/// Who owns the job across the cluster (local::JobOwner), created once with the layout.
std::string Owner(const std::string& job);
std::string Layout(const std::string& job);
std::string Generation(const std::string& job);
std::string Committed(const std::string& job);
std::string Coordinator(const std::string& job);
std::string Restore(const std::string& job);
/// The planner's published decision (PublishedPlan).
std::string Plan(const std::string& job);
/// The newest step of the job the persistent tier holds (PersistedRecord).
std::string Persisted(const std::string& job);

std::string StepKey(int64_t step);  ///< 20 digits, steps >= 0
std::string CompletionsPrefix(const std::string& job);
std::string Completion(const std::string& job, int64_t step, const std::string& node);
/// End of the key range holding every completion of a step <= `step`.
std::string CompletionsEnd(const std::string& job, int64_t step);
/// The step of a completion key, or -1 when it is not one.
int64_t CompletionStep(const std::string& job, const std::string& key);

std::string LocationsPrefix(const std::string& job);
/// Prefix of the locations of one sharding group (pp, tp).
std::string GroupLocationsPrefix(const std::string& job, int32_t pp, int32_t tp);
std::string Location(const store::RankKey& rank);
std::string JoinedPrefix(const std::string& job);
std::string Joined(const store::RankKey& rank);
/// A node running an operator's command on the job (reftctl rebuild, persist), bound to its
/// lease: holders serve it the job's bytes meanwhile.
std::string OperatorPrefix(const std::string& job);
std::string Operator(const std::string& job, const std::string& node);
/// The node that forgets jobs nobody uses any more (JobSweeper), bound to its lease.
std::string Sweeper();
/// The replicated buffers a sharding group saves, written by its dp 0 (DeclareReplicated).
std::string ReplicatedPrefix(const std::string& job);
std::string Replicated(const store::RankKey& rank);
/// The rank of a location, joined or replicated key of `job` (`kind` = "locations" |
/// "joined" | "replicated").
bool ParseRankKey(const std::string& job, const std::string& kind, const std::string& key,
                  store::RankKey* rank);

}  // namespace reft::coord::keys
