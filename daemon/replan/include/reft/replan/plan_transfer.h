#pragma once
/// \file plan_transfer.h
/// \brief Executing a decision's transfer plan (docs/planner.md "Executing the transfer plan"):
/// before the trainers restart in the new layout, every node of it stages (Peer.StageLayers)
/// what it lacks of the layers it will host — whole layers a Kuhn–Munkres move brings from
/// another stage, and the other members' shards of the layers it keeps — so each new rank's
/// reshaped restore reads its state on its own node.
///
/// The progress is a JSON document published with the decision (coord::PublishedPlan::
/// transfer_json), so every node's `plan show` sees it and a coordinator that takes over
/// resumes it:
///   {"state": "running" | "done" | "failed", "attempts": n, "started_at_ms", "finished_at_ms",
///    "bytes_staged", "bytes_fetched", "bytes_from_peers",
///    "hosts": [{"node", "layers": [..], "state": "pending" | "done" | "failed", "bytes_staged"?,
///               "error"?}],
///    "moves": [{"layer", "from_node", "to_node", "bytes", "state", "error"?}]}
/// A move's state is its receiving host's. Staging is idempotent (a layer staged before is not
/// fetched again), so a resumed or retried run simply runs every host that is not done.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reft/replan/plan_decision.h"
#include "reft/result.h"

namespace reft::replan {

/// \brief What staging layers on one node did.
struct StageOutcome {
  uint64_t bytes_staged = 0;   ///< the layers' bytes now staged there
  uint64_t bytes_fetched = 0;  ///< read to stage them (0 for layers staged before)
  uint64_t bytes_peer = 0;     ///< of which from other nodes
};

/// \brief Stages `layers` of committed step `step` of `job` on `node`.
using Stager = std::function<Result<StageOutcome>(const std::string& node, const std::string& job,
                                                  int64_t step, const std::vector<int>& layers)>;

/// \brief The progress document a published record carries (its `transfer_json`): null
/// before the transfer started (or when unreadable).
nlohmann::json StoredProgress(const std::string& transfer_json);

/// \brief The progress document of a transfer that has not started: every host and move of the
/// decision's `transfer` pending (a decision without `hosts` stages its moves' receivers).
nlohmann::json NewTransferProgress(const TransferPlan& transfer);

/// \brief Whether the progress asks for (another) run: no document yet, or running (a
/// coordinator stopped midway), or failed fewer than `max_attempts` times.
bool TransferWanted(const nlohmann::json& progress, int max_attempts);

/// \brief Runs every host of `progress` that is not done: one Stager call per node with all
/// the layers it will host, up to `concurrency` nodes at once. `publish` gets the document after
/// the run starts, after each node's outcome and at the end; when it returns false (a newer
/// decision replaced this one) nothing more is published and no further node is started.
/// Returns the final document (state "done" when every host is, else "failed" with each failed
/// host's and move's error).
nlohmann::json RunTransfer(nlohmann::json progress, const std::string& job, int64_t step,
                           const Stager& stage, int concurrency,
                           const std::function<bool(const nlohmann::json&)>& publish);

}  // namespace reft::replan
