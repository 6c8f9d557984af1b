#pragma once
/// \file paths.h
/// \brief Names of everything the persistent tier creates under its directory, and their
/// strict parsers (a name that does not parse is not ours and is left alone).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "reft/status.h"
#include "reft/store/snapshot_store.h"

namespace reft::persist::internal {

/// \brief OK for 1..128 bytes of [A-Za-z0-9._-] not starting with '.'.
Status ValidateNodeId(const std::string& node_id);

/// \brief The job's directory name: bytes outside [A-Za-z0-9_-] as %XX (so it never starts
/// with '.', never contains '/' and maps back one to one).
std::string JobDirName(const std::string& job);
/// \brief Inverse of JobDirName; nullopt for names it would never produce.
std::optional<std::string> ParseJobDirName(const std::string& name);

/// \brief "step-000000000042" (at least 12 digits).
std::string StepDirName(int64_t step);
std::optional<int64_t> ParseStepDirName(const std::string& name);

/// \brief "pp0-tp1-dp3.reft".
std::string RankFileName(const store::RankKey& rank);
/// \brief Coordinates of a rank file name (job left empty); nullopt if not one.
std::optional<store::RankKey> ParseRankFileName(const std::string& name);

/// \brief "manifest.<node_id>.json".
std::string ManifestFileName(const std::string& node_id);
/// \brief The node id of a manifest file name, or nullopt.
std::optional<std::string> ParseManifestFileName(const std::string& name);

/// \brief Temp and trash names: ".<kind>~<node>~<pid>~<seq>~<final>", kind "tmp" or "trash".
/// '~' cannot occur in a node id nor in the final names, so the split is unambiguous.
std::string ScratchName(const char* kind, const std::string& node_id, uint64_t seq,
                        const std::string& final_name);
struct ScratchParts {
  std::string kind;
  std::string node_id;
  pid_t pid = 0;
  std::string final_name;
};
std::optional<ScratchParts> ParseScratchName(const std::string& name);

}  // namespace reft::persist::internal
