#pragma once
/// \file fs_ops.h
/// \brief File-system steps of the persistent tier, each mapping errno to the tier's error
/// codes: the durable write (temp, fdatasync, close, rename, directory fsync), directory
/// creation, tree removal.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "reft/status.h"
#include "reft/store/segment_image.h"
#include "reft/token_bucket.h"

namespace reft::persist::internal {

/// \brief strerror(err) with a lower-case first letter ("no space left on device").
std::string ErrnoText(int err);

/// \brief The tier's error for a failed system call: NotFound for ENOENT/ENOTDIR,
/// PermissionDenied for EACCES/EPERM/EROFS, IoError otherwise. Message:
/// "persistent directory <root>: <what>: <errno text>", plus "(in-memory snapshots are
/// unaffected)" when the directory is full (ENOSPC, EDQUOT).
Status FsError(int err, const std::string& root, const std::string& what);

/// \brief fsync of a directory (makes renames and creations in it durable). 0 or errno.
int FsyncDir(const std::string& path);

/// \brief mkdir `path` with `mode`; OK if it exists as a directory. When it was created, the
/// parent directory is fsync'ed so the new entry is durable. `rel` names it in messages.
Status MakeDirDurable(const std::string& path, mode_t mode, const std::string& root,
                      const std::string& rel);

/// \brief Removes `path` recursively. Empty string, or what failed.
std::string RemoveTree(const std::string& path);

/// \brief True if a process `pid` exists on this host (kill(pid, 0) succeeds or says EPERM).
bool ProcessAlive(pid_t pid);

/// \brief One durable file write into an existing directory.
struct DurableWrite {
  std::string root;         ///< the tier's directory (for messages)
  std::string dir;          ///< directory of the file; fsync'ed after the rename
  std::string rel;          ///< final path relative to root (for messages)
  std::string temp_name;    ///< name in `dir` while writing
  std::string final_name;   ///< name in `dir` once complete
  mode_t mode = 0640;
  uint64_t expected_bytes = 0;  ///< exact size the producer writes
  bool preallocate = false;     ///< fallocate expected_bytes first
  TokenBucket* bucket = nullptr;
  size_t piece = 8u << 20;      ///< largest single write(2)
};

/// \brief Emits the file's bytes through the sink it is given.
using Producer = std::function<Status(const store::SegmentImageWriter::Sink& sink)>;

/// \brief Creates `temp_name` (O_EXCL), optionally fallocates, writes what `produce` emits
/// (bandwidth-limited), checks the size, fdatasyncs, closes, renames to `final_name` and
/// fsyncs `dir`. On any failure before the rename the temp file is closed and unlinked, so
/// nothing is left under either name. A failure of the final directory fsync is reported, but
/// the file under its final name is then complete (its data was synced before the rename).
Status WriteFileDurably(const DurableWrite& w, const Producer& produce);

}  // namespace reft::persist::internal
