#pragma once
/// \file reshape_tier.h
/// \brief Reshape from the persistent tier (docs/recovery.md "Reshape"): when memory cannot
/// serve the step, a persisted step saved under another layout is restored into the rank's
/// layout by global names, read from the step's rank files (every chunk verified as read).

#include <string>

#include "reft/local/recovery_hooks.h"
#include "reft/persist/persistent_tier.h"
#include "reft/recovery/reshape.h"
#include "reft/recovery/restore_stats.h"

namespace reft::recovery {

/// \brief The layout persisted step `step` of `job` was saved under (from its manifests).
Result<JobLayout> PersistedLayout(persist::PersistentTier* tier, const std::string& job,
                                  int64_t step);

/// \brief The rank `meta` describes, from persisted step `step` saved under layout `saved`:
/// replicated bytes from the saved members' "rep/shard" regions, sharded ranges from the
/// overlapping parts' "unique/<name>", per-rank buffers at the same coordinates (ReshapeRank).
/// source "tier". Lost naming a missing rank file; Corrupted naming file, region and chunk.
Result<local::RestoredState> ReshapeFromTier(persist::PersistentTier* tier,
                                             const protect::SlotMeta& meta, int64_t step,
                                             const JobLayout& saved,
                                             const local::RestoreRequest& request,
                                             RestoreStats* stats);

}  // namespace reft::recovery
