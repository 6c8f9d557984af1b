#pragma once
/// \file json_io.h
/// \brief JSON forms of the sharding input, rank plans and protection reports (reftctl, daemon).
///
/// Input: {"layout": {"dp", "tp", "pp", "zero_stage", "nodes": [...]}, "scheme": "arc1+aec",
///   "chunk": 65536 | "64KiB", "buffers": [{"name", "size": n | "1MiB", "dtype", "kind":
///   "replicated"|"unique", "layer", "optimizer"}], "groups": [{"pp", "tp", "buffers": [...]}],
///   "strict_placement": false, "io": {"bandwidth": "10GiB", "window_s": 0.5}}

#include <nlohmann/json.hpp>

#include "reft/protect/tolerance.h"
#include "reft/protect/sharding.h"
#include "reft/result.h"

namespace reft::protect {

/// \brief Parses the input document; errors name the offending field.
Result<ShardingInput> ShardingInputFromJson(const nlohmann::json& doc);

/// \brief The "buffers" array of the input format; errors name `where`[i].field.
Result<std::vector<BufferSpec>> BuffersFromJson(const nlohmann::json& arr, const std::string& where);
nlohmann::json BuffersToJson(const std::vector<BufferSpec>& buffers);

/// \brief When `doc` has "io": {"bandwidth": bytes per second | "10GiB", "window_s": s}, the
/// §1.7 recommendation {"scheme", "reason", "arc_seconds", "aec_seconds"}; null otherwise.
Result<nlohmann::json> RecommendationJson(const nlohmann::json& doc, const ShardingInput& input);

nlohmann::json ToJson(const RankPlan& plan);
nlohmann::json ToJson(const ProtectionReport& report, const Scheme& scheme);

}  // namespace reft::protect
