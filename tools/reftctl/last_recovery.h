#pragma once
/// \file last_recovery.h
/// \brief The job's last recovery as `plan show` and `restore-check` print it: the JSON
/// `last_recovery` of the plan-show document ({phases, first_commit_step, first_commit_at},
/// docs/recovery.md "Phases of a recovery"), one line per phase that happened.

#include <string>

#include <nlohmann/json.hpp>

#include "command.h"

namespace reft::ctl {

/// \brief `last_recovery` of `job` as the daemon's ShowPlan answers it; null when it has none
/// (no loss published for the job, the gossip control plane) or cannot say (CheckRpc not
/// called: restore-check goes on without it).
nlohmann::json FetchLastRecovery(CtlContext& ctx, const std::string& job);

/// \brief Prints `last_recovery` (nothing when null): each phase's time and node, the time
/// from the phase before, and the first step committed after the recovery.
void PrintLastRecovery(const nlohmann::json& last_recovery);

}  // namespace reft::ctl
