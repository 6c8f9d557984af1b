#pragma once
/// \file transfer_wiring.h
/// \brief Connects the planner's transfer plans to the data path (docs/planner.md "Executing
/// the transfer plan"): this node serves Peer.StageLayers with its ReftLoad, and the planner,
/// when this node coordinates a job, stages layers on the receiving nodes through it.

#include <chrono>

#include "reft/replan/job_planner.h"
#include "reft/observability/metrics.h"
#include "reft/peer/peer_node.h"
#include "reft/recovery/reft_load.h"

namespace reft::app {

/// All pointers must outlive the peer's service and the planner. `timeout` bounds one node's
/// staging (a restore's bound: it fetches like one).
void ServeTransferPlans(peer::PeerNode* peer, recovery::ReftLoad* restore,
                        const recovery::StagedLayers* staged, replan::JobPlanner* planner,
                        observability::Metrics* metrics, std::chrono::milliseconds timeout);

}  // namespace reft::app
