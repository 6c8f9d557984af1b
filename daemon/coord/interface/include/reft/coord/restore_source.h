#pragma once
/// \file restore_source.h
/// \brief Where the ranks of a job restore from (docs/recovery.md "One decision per job").
///
/// The problem: the restore decision's source used to be a string ("memory", "tier", "none")
/// compared in many places, so a typo was a silent third branch. In the daemon it is this enum;
/// the strings exist only where the decision leaves the process (the etcd record, the report to
/// the trainer), and the one pair of functions below converts, refusing an unknown string.
/// Header-only; depends on the standard library and reft/result.h.

#include <string>
#include <string_view>

#include "reft/result.h"

namespace reft::coord {

enum class RestoreSource {
  kNone,    ///< nothing to restore: every rank starts fresh
  kMemory,  ///< the newest committed step, rebuilt from the nodes' memory
  kTier,    ///< a step of the persistent tier (the job fell back to it)
};

/// "none" | "memory" | "tier": the spelling of the etcd record and of the trainer's report.
inline const char* RestoreSourceName(RestoreSource source) {
  switch (source) {
    case RestoreSource::kNone:
      return "none";
    case RestoreSource::kMemory:
      return "memory";
    case RestoreSource::kTier:
      return "tier";
  }
  return "none";
}

/// The inverse of RestoreSourceName; InvalidArgument naming the string and the known ones.
inline Result<RestoreSource> ParseRestoreSource(std::string_view name) {
  for (RestoreSource s : {RestoreSource::kNone, RestoreSource::kMemory, RestoreSource::kTier}) {
    if (name == RestoreSourceName(s)) return s;
  }
  return Status::InvalidArgument("unknown restore source '" + std::string(name) +
                                 "' (expected 'none', 'memory' or 'tier')");
}

}  // namespace reft::coord
