#pragma once
/// \file api.h
/// \brief JSON-in/JSON-out entry points behind `reftctl plan ...` and `reftctl reliability`
/// (schemas in docs/planner.md, examples in examples/planner/). Errors name the bad field.
/// Pure functions; thread-safe.

#include <nlohmann/json.hpp>

#include "reft/result.h"

namespace reft::planner {

/// `plan templates`: {model, cluster, job{f, n0?, template_cap?}} -> node spec + templates.
Result<nlohmann::json> PlanTemplates(const nlohmann::json& in);
/// `plan instantiate`: + job{global_batch, micro_batch}, top? -> instantiation options ranked by
/// throughput with their batch distribution.
Result<nlohmann::json> PlanInstantiate(const nlohmann::json& in);
/// `plan failover`: mode "odyssey" (policy choice between reroute/reconfigure/restart for the
/// current plan and the failed nodes) or "oobleck" (reinstantiate/borrow/merge, joins).
Result<nlohmann::json> PlanFailover(const nlohmann::json& in);
/// `plan transfer`: {held, roles, layer_bytes?, node_names?} -> KM transfer plan (sender and
/// receiver of every layer) beside the positional baseline.
Result<nlohmann::json> PlanTransferJson(const nlohmann::json& in);
/// `reliability`: eqs. 5–6 times to a survival threshold, curves, optional Monte-Carlo check.
Result<nlohmann::json> Reliability(const nlohmann::json& in);

}  // namespace reft::planner
