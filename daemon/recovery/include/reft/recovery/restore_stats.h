#pragma once
/// \file restore_stats.h
/// \brief What a restore, rebuild or check did: phase timings, bytes by source, retries and
/// warnings (for logs and, later, metrics), and the progress callback type.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace reft::recovery {

/// \brief Phases of REFT-load and rebuild, in order.
enum class Phase { kLocate, kFetch, kDecode, kDeliver, kRebuild };
const char* PhaseName(Phase phase);  ///< "locate", "fetch", "decode", "deliver", "rebuild"

/// \brief Progress of the current phase. Callbacks run on the restoring thread or on a fetch
/// worker (serialised: never two at once); they must be quick and must not call back into the
/// restore.
struct Progress {
  Phase phase = Phase::kLocate;
  uint64_t bytes_done = 0;   ///< fetch: bytes verified so far
  uint64_t bytes_total = 0;  ///< fetch: bytes planned in the current round
  std::string message;       ///< e.g. "step 7 of job: 3 of 4 shards present"
};
using ProgressCallback = std::function<void(const Progress&)>;

struct RestoreStats {
  int64_t step = -1;
  std::chrono::nanoseconds locate{0};   ///< commit-state sync, manifests, meta
  std::chrono::nanoseconds allocate{0};  ///< the restore memfd created and mapped
  std::chrono::nanoseconds fetch{0};    ///< every verified byte read (local and peers)
  std::chrono::nanoseconds decode{0};   ///< RebuildShards (ARC copy, XOR, RS)
  std::chrono::nanoseconds deliver{0};  ///< memfd filled and handed over
  std::chrono::nanoseconds rebuild{0};  ///< regenerating a slot in this node's store
  /// Reaching the job-wide decision: waiting for silent holders of the job's slots and agreeing
  /// on the step and source with the other ranks (part of `locate`).
  std::chrono::nanoseconds agreement{0};
  std::string agreement_detail;  ///< why it waited, and whose decision the restore followed

  // Where verified bytes came from (every byte counted once in one of the three) ...
  uint64_t bytes_local = 0;       ///< read from this node's store
  uint64_t bytes_peer = 0;        ///< fetched from other nodes
  uint64_t bytes_persistent = 0;  ///< read from the persistent tier (restore fallback)
  // ... and what they were (each byte counted once in one of these):
  uint64_t bytes_shard = 0;    ///< members' own shards ("rep/shard") from their own slots
  uint64_t bytes_replica = 0;  ///< ARC copies ("rep/arc+o") and peer/AOR copies of unique buffers
  uint64_t bytes_parity = 0;   ///< AEC / RS parity ("rep/aec", "rep/rs")
  uint64_t bytes_unique = 0;   ///< unique buffers from their own rank's slot
  uint64_t bytes_other = 0;    ///< the snapshot meta a restore reads
  /// Shard bytes of members without a slot: decoded, or an ARC copy fetched straight into
  /// place (those are in bytes_replica too).
  uint64_t bytes_rebuilt = 0;
  /// Members' own data read from memory (shards, unique buffers, meta; not ARC/peer copies nor
  /// parity), by where: with bytes_replica, bytes_parity and bytes_persistent every byte is
  /// counted once, as the metric reft_recovered_bytes_total{source} needs.
  uint64_t bytes_own_local = 0;
  uint64_t bytes_own_peer = 0;
  /// Read from layers a transfer plan staged on this node (staged_layers.h; in bytes_local too).
  uint64_t bytes_staged = 0;

  int retries = 0;  ///< pieces that failed on one source and were tried on another
  std::vector<std::string> warnings;
  std::string detail;  ///< one line: where each part came from

  /// Adds another run's counters and timings (warnings appended).
  void Add(const RestoreStats& o);
};

}  // namespace reft::recovery
