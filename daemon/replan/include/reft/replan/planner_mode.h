#pragma once
/// \file planner_mode.h
/// \brief `planner.mode`: what the planner in the loop does with its decision (docs/planner.md
/// "The online path"). Header-only: the configuration parser and the planner both need it.

#include <string>

#include "reft/result.h"

namespace reft::replan {

enum class PlannerMode {
  kOff,        ///< publish nothing: `plan show` computes the decision on demand
  kAutomatic,  ///< publish the decision as "decided"
  kConfirm,    ///< publish it as "awaiting_confirmation" until `reftctl plan confirm`
};

inline Result<PlannerMode> ParsePlannerMode(const std::string& name) {
  if (name == "off") return PlannerMode::kOff;
  if (name == "automatic") return PlannerMode::kAutomatic;
  if (name == "confirm") return PlannerMode::kConfirm;
  return Status::InvalidArgument("planner.mode: '" + name + "' is not one of off, automatic, confirm");
}

inline const char* PlannerModeName(PlannerMode mode) {
  switch (mode) {
    case PlannerMode::kOff: return "off";
    case PlannerMode::kAutomatic: return "automatic";
    case PlannerMode::kConfirm: return "confirm";
  }
  return "?";
}

}  // namespace reft::replan
