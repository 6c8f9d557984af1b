#pragma once
/// \file tier_restore.h
/// \brief The persistent tier's side of restore: one rank's state read back from a persisted
/// step (the restore fallback, docs/recovery.md), and what the tier offers for a job
/// (`reftctl restore-check`).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/local/job_ownership.h"
#include "reft/local/recovery_hooks.h"
#include "reft/persist/persistent_tier.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/restore_stats.h"
#include "reft/recovery/tier_access.h"

namespace reft::recovery {

/// \brief Restores the rank `meta` describes at persisted `step`: every SG member's "rep/shard"
/// (the shards together are the SG's canonical replicated vector) and the rank's own
/// "unique/*" from the step's rank files (written by any node), each chunk verified as it is
/// read, into a memfd laid out like a memory restore; RestoredState.source = "tier".
/// The snapshot meta comes from the rank's own file (else any member's).
/// \return InvalidArgument naming the differences when the trainer declares another job
/// layout; Lost naming the missing rank file; Corrupted naming the file, region and chunk (no
/// older step is tried: that would mix steps across the job); IoError from the file system.
Result<local::RestoredState> RestoreFromTier(persist::PersistentTier* tier,
                                             const protect::SlotMeta& meta, int64_t step,
                                             uint64_t piece_bytes, RestoreStats* stats,
                                             const ProgressCallback& progress = nullptr);

/// \brief The tier's record of a job owner (persist::ManifestOwner: uid, gid, group name).
persist::ManifestOwner ToManifestOwner(const local::JobOwner& owner);

/// \brief Whether persisted `step` of `job` may be handed to the trainers of the job's current
/// owner `owner` (docs/security.md "Jobs belong to their owner"): when the owner is known,
/// every manifest of the step that records an owner must record the same one (uid and gid).
/// A manifest without an owner (an older reftd's) is accepted, and so is everything when the
/// current owner is unknown (std::nullopt). Every restore that reads a persisted step for a
/// trainer asks this first (ReftLoad, for RestoreFromTier and ReshapeFromTier alike).
/// \return PermissionDenied "step S of job 'J' in the persistent tier was written for another
/// owner; it is not restored (reftctl jobs release and the tier: docs/security.md)", naming
/// nothing of the other owner; ReadManifests' errors (a step without a directory, a manifest
/// that does not parse: no owner can be checked, so nothing is restored).
Status CheckPersistedOwner(persist::PersistentTier* tier, const std::string& job, int64_t step,
                           const std::optional<local::JobOwner>& owner);

/// \brief What the persistent tier holds for one job (restore-check).
struct PersistentCheck {
  bool enabled = false;
  std::string dir;
  std::string error;  ///< the tier could not be read ("" = fine)
  bool layout_known = false;
  JobLayout layout;
  std::optional<int64_t> newest_complete;  ///< the fallback a restore would use (<= step)
  bool step_complete = false;              ///< `step` itself is complete in the tier
  std::vector<int64_t> steps;              ///< every step directory of the job
  std::vector<std::string> problems;       ///< of `step` (or of the newest step directory)
};

/// \brief Reads the tier's state of `job`: complete steps for `layout` (when not given, the
/// layout of the newest step's manifests), whether `step` is complete, and its problems.
PersistentCheck CheckPersistent(TierAccess* tier, const std::string& job,
                                std::optional<JobLayout> layout,
                                std::optional<int64_t> step);

}  // namespace reft::recovery
