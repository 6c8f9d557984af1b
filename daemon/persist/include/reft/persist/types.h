#pragma once
/// \file types.h
/// \brief Plain value types of the persistent tier: what goes in (RankImage), what comes out
/// (RankFileInfo, PersistReport, StepStatus, Manifest, CleanupReport). A step is complete for a
/// JobLayout when every rank of the layout has a valid file and no rank outside it has one.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reft/job_layout.h"
#include "reft/store/segment_image.h"
#include "reft/store/snapshot_store.h"

namespace reft::persist {

/// \brief One rank to persist: the rank and the regions of its slot to write (in practice
/// "meta", "rep/shard" and the "unique/*" regions: its own data, not the redundancy). The bytes
/// are read, never modified; they must stay valid and unchanged until the call returns (a
/// store::SlotRef held on the committed slot guarantees that).
struct RankImage {
  store::RankKey rank;
  std::vector<store::ImageRegion> regions;
};

/// \brief A rank file as written (and as listed in a manifest).
struct RankFileInfo {
  store::RankKey rank;
  int64_t step = -1;
  std::string file;                   ///< name inside the step directory: "pp0-tp0-dp3.reft"
  std::string path;                   ///< full path (empty when read from a manifest)
  uint64_t file_bytes = 0;            ///< size of the file
  uint64_t payload_bytes = 0;         ///< sum of region sizes
  uint64_t chunk_size = 0;
  uint64_t chunk_count = 0;
  uint64_t chunk_table_checksum = 0;  ///< XXH3-64 of the chunk table: identifies the content
  std::vector<store::RegionSpec> regions;
  double seconds = 0;                 ///< wall time of the write (not in the manifest)
};

/// \brief What PersistStep did.
struct PersistReport {
  std::string job;
  int64_t step = -1;
  std::vector<RankFileInfo> files;    ///< rank files written, in input order
  std::string manifest_path;          ///< this node's manifest of the step
  uint64_t bytes_written = 0;         ///< rank files and manifest together
  double seconds = 0;                 ///< wall time of the whole call
  std::vector<int64_t> removed_steps; ///< deleted by retention afterwards
  std::string retention_error;        ///< non-empty if retention failed (the persist did not)
};

/// \brief The state of one persisted step for a layout.
struct StepStatus {
  int64_t step = -1;
  bool complete = false;               ///< every rank of the layout valid, none outside it
  std::vector<store::RankKey> valid;   ///< ranks whose file checked out (header + chunk table)
  /// One line per problem: "pp0-tp0-dp1: missing", "pp0-tp0-dp2: corrupted: ...",
  /// "pp1-tp0-dp0: outside the layout dp=2,tp=1,pp=1,zero=0".
  std::vector<std::string> problems;
  std::vector<std::string> manifests;  ///< node ids that wrote a manifest for the step
  uint64_t temp_files = 0;             ///< writes in progress (or abandoned) in the step directory
};

/// \brief The owner of the job a manifest's files were written for (docs/security.md "Jobs
/// belong to their owner"): the tier's own copy of local::JobOwner, which daemon/recovery
/// converts (persist does not depend on the local channel). Two owners are the same when uid
/// and gid are; `group` is the group's name as the claim gave it, for people to read.
struct ManifestOwner {
  uint32_t uid = 0;
  std::optional<uint32_t> gid;
  std::string group;  ///< "" = none
  bool operator==(const ManifestOwner& o) const { return uid == o.uid && gid == o.gid; }
  bool operator!=(const ManifestOwner& o) const { return !(*this == o); }
};

/// \brief A node's manifest of one step (`manifest.<node_id>.json`).
struct Manifest {
  std::string path;
  std::string node_id;
  std::string job;
  int64_t step = -1;
  JobLayout layout;
  int64_t created_unix_ms = 0;
  /// The job's owner when the files were written; std::nullopt = unknown (a manifest of an
  /// older reftd, or a job without an owner record at the time).
  std::optional<ManifestOwner> owner;
  std::vector<RankFileInfo> files;  ///< `path` and `seconds` are not stored
};

/// \brief What CleanupStale (and Open) removed or could not remove.
struct CleanupReport {
  std::vector<std::string> removed;  ///< stale temp files and half-deleted step directories
  std::vector<std::string> errors;   ///< what could not be removed, with the reason
};

}  // namespace reft::persist
