#pragma once
/// \file job_commit.h
/// \brief What a node does when a step of a job commits, whichever control plane decided it.

#include <cstdint>
#include <string>

#include "reft/job_layout.h"
#include "reft/store/snapshot_store.h"

namespace reft::store {

/// \brief Commits `step` for every local rank of `job` that holds it (the store frees each
/// rank's older slots only now), then, when `layout` is given, drops the older steps still held
/// by ranks outside it: after a reshape into fewer ranks or another pipeline split, their slots
/// served the reshape and are garbage once a step commits under the new layout, never before.
/// Those steps are older than `step`, so dropping them job-wide frees only what Commit frees
/// for the ranks that remain. Failures are logged: a commit is never undone.
void CommitJobStep(SnapshotStore* store, const std::string& job, int64_t step,
                   const JobLayout* layout);

}  // namespace reft::store
