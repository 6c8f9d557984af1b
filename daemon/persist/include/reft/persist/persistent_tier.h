#pragma once
/// \file persistent_tier.h
/// \brief The persistent tier (docs/data-paths.md "Persist"): committed snapshots of a node's ranks
/// written to `--persist-dir` (local disk or a shared file system such as NFS), with a
/// manifest and checksums, read back when memory cannot rebuild a step. docs/persist.md has
/// the file layout, the crash-safety argument and an integration walk-through.
///
/// Layout under `dir` (every name below is created by this library):
///
///   <dir>/<job>/step-<step, 12+ digits>/pp<P>-tp<T>-dp<D>.reft   one rank (segment image)
///   <dir>/<job>/step-<step>/manifest.<node_id>.json              what node_id wrote there
///   <dir>/<job>/step-<step>/.tmp~<node>~<pid>~<seq>~<name>       a write in progress
///   <dir>/<job>/.trash~<node>~<pid>~<seq>~step-<step>            a step being deleted
///
/// `<job>` is the job id with every byte outside [A-Za-z0-9_-] written as %XX. A rank file is
/// the store's segment format (reft/store/segment_image.h) in state committed(step): header,
/// region table, per-chunk XXH3-64 table, payload.
///
/// Every file is written to a temp name in its final directory, fdatasync'ed, closed, renamed
/// to its final name and the directory fsync'ed: a final name only ever holds a complete,
/// durable file, whatever kills the writer (SIGKILL, ENOSPC, power loss). Steps are deleted by
/// renaming the whole step directory to a trash name first, so no reader sees half a step.
///
/// Errors (the same codes from every method):
///  - InvalidArgument: bad options, job id, rank, step, regions or layout; nothing touched.
///  - NotFound: `dir` does not exist or is not a directory (message names the path); a step or
///    rank file that is not there.
///  - PermissionDenied: `dir` (or something below it) cannot be written: EACCES, EPERM, EROFS.
///  - IoError: any other file-system failure, e.g. a full directory: "persistent directory
///    <dir>: writing <file>: no space left on device (in-memory snapshots are unaffected)";
///    also when `dir` was replaced or remounted since Open (another st_dev/st_ino).
///  - Corrupted: a file failed verification (names the file, and the region and chunk).
/// A failed write leaves no file under the final name and no temp file behind (best effort:
/// if even unlink fails, CleanupStale removes the temp later). The tier never touches the
/// in-memory snapshots: it only reads the spans it is given.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reft/persist/persisted_rank.h"
#include "reft/persist/types.h"
#include "reft/result.h"

namespace reft::persist {

struct PersistOptions {
  /// Root of the tier (`--persist-dir`). Must exist: the tier never creates it, so a missing
  /// mount is an error instead of writes to the empty mount point.
  std::string dir;
  /// This node (`--node-id`): names its manifests and temp files. 1..128 bytes of
  /// [A-Za-z0-9._-], not starting with '.'. Must be unique among nodes sharing `dir`.
  std::string node_id;
  uint64_t bandwidth = 0;       ///< write bytes/s of the whole tier (TokenBucket); 0 = unlimited
  uint64_t read_bandwidth = 0;  ///< read bytes/s of the whole tier (restore); 0 = unlimited
  /// Newest complete steps retained per job (0 = keep all). Older step directories (complete
  /// or not) are deleted after a persist, except steps this tier is writing.
  uint32_t keep = 2;
  uint64_t chunk_size = 4ull << 20;  ///< checksum granularity of rank files (power of two >= 4 KiB)
  int checksum_threads = 1;          ///< threads that checksum a rank before it is written
  mode_t file_mode = 0640;           ///< rank files and manifests (0600, 0640 or 0644)
  /// fallocate() each rank file to its full size before writing, so a full directory fails
  /// before any byte is written (ignored where the file system cannot: NFSv3, some FUSE).
  bool preallocate = true;
  /// Temp files and trash directories of *other* nodes older than this are removed by
  /// CleanupStale (0 = never). This node's own are removed as soon as their writer process is
  /// dead (they carry its pid).
  uint64_t stale_age_s = 24 * 3600;
};

/// \brief The persistent tier of one node.
///
/// Thread-safety: every method may be called from any thread concurrently. Writes share one
/// write token bucket, reads one read bucket. Within one tier a step that is being written
/// (WriteRank or PersistStep in progress) is never deleted by retention. Between processes and
/// nodes sharing `dir` the only coordination is the atomic rename of whole files and step
/// directories; node ids must therefore be unique.
///
/// Typical use by reftd (see docs/persist.md):
///
///   auto tier = PersistentTier::Open(opts);                  // at start; reports cleanup
///   // every K steps after `step` committed, or on `reftctl persist`:
///   std::vector<RankImage> ranks = ...;                      // from store SlotRefs
///   auto rep = (*tier)->PersistStep(job, step, layout, ranks);
///   // restore fallback:
///   auto s = (*tier)->NewestCompleteStep(job, layout);       // std::nullopt: nothing there
///   auto r = (*tier)->OpenRank(rank, **s);                   // any rank, any node's file
///   r.value()->ReadRegion("rep/shard", dst, size);
class PersistentTier {
 public:
  /// \brief Validates the options, checks that `dir` exists, is a directory and is writable
  /// (a probe file is created and removed), then runs CleanupStale.
  /// \param[out] cleanup what the cleanup removed (optional)
  /// \return InvalidArgument (options), NotFound (missing / not a directory), PermissionDenied
  /// (not writable), IoError (other). Cleanup problems do not fail Open: they are in `cleanup`.
  static Result<std::unique_ptr<PersistentTier>> Open(const PersistOptions& options,
                                                      CleanupReport* cleanup = nullptr);
  virtual ~PersistentTier() = default;

  virtual const PersistOptions& options() const = 0;

  /// \brief Writes one rank file of `step` durably (temp, fdatasync, rename, fsync of the
  /// directory), bandwidth-limited, replacing an older file of the same rank and step.
  /// Creates the job and step directories when needed. Does not write the manifest.
  /// \return the file's description for WriteManifest; errors as in the file comment. On any
  /// error there is no partial file under the final name and the temp file is removed.
  virtual Result<RankFileInfo> WriteRank(const store::RankKey& rank, int64_t step,
                                         const std::vector<store::ImageRegion>& regions) = 0;

  /// \brief Writes (replaces) `manifest.<node_id>.json` of `step` the same durable way. Entries
  /// of an existing manifest of this node for ranks not in `files` are kept (merged), so ranks
  /// persisted by separate calls end up in one manifest. `owner`: the job's owner, recorded in
  /// the manifest (std::nullopt = unknown: an existing manifest's owner is then kept).
  /// \return the manifest's path. InvalidArgument if a file belongs to another job or step;
  /// AlreadyExists when this node's existing manifest of the step records another owner (a
  /// manifest speaks for one owner: the step must be removed from the tier first).
  virtual Result<std::string> WriteManifest(
      const std::string& job, int64_t step, const JobLayout& layout,
      const std::vector<RankFileInfo>& files,
      const std::optional<ManifestOwner>& owner = std::nullopt) = 0;

  /// \brief The usual entry point: WriteRank for every rank (in order; the first error stops
  /// and is returned, files already written stay: each one is complete and valid), then
  /// WriteManifest, then ApplyRetention (a retention failure is reported in the result, it
  /// does not fail the persist). Every rank must belong to `job` and lie inside `layout`.
  /// `owner`: the job's owner, recorded in the manifest (WriteManifest).
  virtual Result<PersistReport> PersistStep(
      const std::string& job, int64_t step, const JobLayout& layout,
      const std::vector<RankImage>& ranks,
      const std::optional<ManifestOwner>& owner = std::nullopt) = 0;

  /// \brief Keeps the newest `keep` complete steps of `job` (complete for `layout`) and deletes
  /// every older step directory, complete or not, except steps this tier is writing. Nothing
  /// is deleted while fewer than `keep` steps are complete, or when keep is 0.
  /// \return the steps deleted, ascending.
  virtual Result<std::vector<int64_t>> ApplyRetention(const std::string& job,
                                                      const JobLayout& layout) = 0;

  /// \brief Job ids that have a directory under `dir`, sorted.
  virtual Result<std::vector<std::string>> ListJobs() = 0;
  /// \brief Steps of `job` that have a step directory (complete or not), ascending; empty if
  /// the job has none.
  virtual Result<std::vector<int64_t>> ListSteps(const std::string& job) = 0;
  /// \brief Checks the rank files of `step` against `layout`: presence, header, region table,
  /// chunk table checksum, and that each header names the rank and step of its file name.
  /// Payload chunks are not read (they are verified by every read, and by PersistedRank::Verify).
  /// \return NotFound if the step has no directory.
  virtual Result<StepStatus> CheckStep(const std::string& job, int64_t step,
                                       const JobLayout& layout) = 0;
  /// \brief Steps of `job` complete for `layout`, ascending.
  virtual Result<std::vector<int64_t>> CompleteSteps(const std::string& job,
                                                     const JobLayout& layout) = 0;
  /// \brief The newest step complete for `layout`, or std::nullopt when there is none (the
  /// restore fallback then has nothing to load and must say so).
  virtual Result<std::optional<int64_t>> NewestCompleteStep(const std::string& job,
                                                            const JobLayout& layout) = 0;

  /// \brief Opens the rank file of `rank` at `step` (written by any node) for reading.
  /// \return NotFound if there is none; Corrupted if its header or chunk table is bad, or if
  /// its header names another rank or step than its path.
  virtual Result<std::unique_ptr<PersistedRank>> OpenRank(const store::RankKey& rank,
                                                          int64_t step) = 0;

  /// \brief Every node's manifest of `step`, sorted by node id.
  /// \return NotFound if the step has no directory; Corrupted naming a manifest that does not
  /// parse.
  virtual Result<std::vector<Manifest>> ReadManifests(const std::string& job, int64_t step) = 0;

  /// \brief Removes temp files and trash directories left by dead writers: this node's whose
  /// writer pid is no longer running (a SIGKILLed reftd), and anyone's older than
  /// `stale_age_s`. Never touches final names. Open calls it; reftd may call it periodically.
  virtual CleanupReport CleanupStale() = 0;
};

}  // namespace reft::persist
