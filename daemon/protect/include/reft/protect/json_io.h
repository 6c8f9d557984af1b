#pragma once
/// \file json_io.h
/// \brief JSON forms of the sharding input, rank plans and protection reports (reftctl, daemon).
///
/// Input: {"layout": {"dp", "tp", "pp", "zero_stage", "nodes": [...]}, "scheme": "arc1+aec",
///   "chunk": 65536 | "64KiB", "buffers": [{"name", "size": n | "1MiB", "dtype", "kind":
///   "replicated"|"unique", "layer", "optimizer"}], "groups": [{"pp", "tp", "buffers": [...]}],
///   "strict_placement": false}

#include <nlohmann/json.hpp>

#include "reft/protect/planner.h"
#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief Parses the input document; errors name the offending field.
Result<ShardingInput> ShardingInputFromJson(const nlohmann::json& doc);

nlohmann::json ToJson(const RankPlan& plan);
nlohmann::json ToJson(const ProtectionReport& report, const Scheme& scheme);

}  // namespace reft::protect
