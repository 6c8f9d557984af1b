#pragma once
/// \file generation_file.h
/// \brief The job generation of the commit state, kept in a small file per job next to the
/// snapshot segments (shm_dir/commit-state), so that a restarted daemon knows which generation
/// its adopted slots belong to (docs/recovery.md "Fallback to the persistent tier"). The file
/// lives exactly as long as the slots it describes: both are lost together on a reboot, and
/// the node then learns the generation from its peers.
///
/// Format (text, one field per line, parsed strictly):
///   reft-generation 1
///   generation <u64>
///   base <i64>
///   floor <i64>
///   reason <rest of the line>
/// Written to a temp name, fsync'ed and renamed, so a reader sees the old or the new record.

#include <cstdint>
#include <optional>
#include <string>

#include "reft/result.h"

namespace reft::coord::internal {

struct GenerationRecord {
  uint64_t generation = 0;
  int64_t base_step = -1;
  int64_t persist_floor = -1;
  std::string reason;
  int64_t epoch = 0;  ///< the restore epoch (etcd: revision of the decision key); optional
};

/// \brief Writes `<dir>/<escaped job>.gen` durably (creating `dir` 0700 when missing).
Status SaveGeneration(const std::string& dir, const std::string& job, const GenerationRecord& rec);

/// \brief Reads the record of `job`; std::nullopt when there is none. Corrupted naming the
/// file when it does not parse.
Result<std::optional<GenerationRecord>> LoadGeneration(const std::string& dir,
                                                       const std::string& job);

}  // namespace reft::coord::internal
