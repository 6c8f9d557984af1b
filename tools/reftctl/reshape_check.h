#pragma once
/// \file reshape_check.h
/// \brief `reftctl restore-check --layout dp=3,pp=2,tp=1`: whether, and from where, the newest
/// committed step can be restored into another layout (docs/recovery.md "Reshape"), derived
/// from the restore check of the saved layout.

#include <string>

#include <nlohmann/json.hpp>

#include "reft/job_layout.h"
#include "reft/result.h"

namespace reft::ctl {

/// \brief "dp=3,pp=2,tp=1[,zero=1]" in any order; sizes default to 1, zero to 0.
/// InvalidArgument naming the bad part.
Result<JobLayout> ParseLayoutArg(const std::string& text);

/// \brief The "reshape" object of restore-check's JSON for target layout `to`, from the
/// restore-check document `check` (its groups describe the saved layout). tp must stay as
/// saved, except for a DCP checkpoint (`check["dcp"]`: every buffer under "dcp/"), whose load
/// reshards by reading saved byte ranges: any layout is possible when memory rebuilds the step.
nlohmann::json ReshapeCheckJson(const nlohmann::json& check, const JobLayout& to);

/// \brief The human form: a verdict line and one row per rank of the new layout.
void PrintReshapeCheck(const nlohmann::json& reshape);

}  // namespace reft::ctl
