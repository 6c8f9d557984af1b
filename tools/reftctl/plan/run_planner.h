#pragma once
/// \file run_planner.h
/// \brief Shared glue of the offline planner commands: load the input document, run one
/// reft_planner entry point, print JSON or a clear error (exit 2 for bad input).

#include <functional>
#include <string>

#include "command.h"
#include "reft/result.h"

namespace reft::ctl {

using PlannerFn = std::function<Result<nlohmann::json>(const nlohmann::json&)>;

/// \brief Loads `path` (JSON or TOML; empty = `{}`), applies `patch` (flag overrides), runs `fn`.
void RunPlanner(CtlContext& ctx, const std::string& path, const nlohmann::json& patch, const PlannerFn& fn);

}  // namespace reft::ctl
