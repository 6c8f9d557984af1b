#pragma once
/// \file recovery_options.h
/// \brief Knobs of the cluster side of restore (daemon/recovery). Plain values; reftd fills
/// them from its config. Every wait has a bound, so no restore, rebuild or peer copy hangs.

#include <chrono>
#include <cstdint>

namespace reft::recovery {

struct RecoveryOptions {
  /// Pieces fetched at once by one restore/rebuild (local reads and peer streams together).
  int concurrency = 4;
  /// Size of one fetched piece; rounded up to a multiple of the source slot's chunk size, so a
  /// piece is verified against whole sealed chunks.
  uint64_t piece_bytes = 8ull << 20;
  /// Deadline of one piece from one source: a peer that hangs mid-stream is abandoned after
  /// this and the piece retried on the next source.
  std::chrono::milliseconds piece_timeout{30000};
  /// Bound of a whole Restore / RebuildLostRanks / CheckRestore (Timeout past it).
  std::chrono::milliseconds restore_timeout{300000};
  /// Commit-state exchange with every live member before a restore chooses its step.
  std::chrono::milliseconds sync_timeout{2000};
  /// GetManifest deadline per member when locating slots.
  std::chrono::milliseconds locate_timeout{2000};
  /// Wait for knowledge: how long a restore keeps asking the holders of the job's slots that
  /// are alive but do not answer (just started, paused, overloaded) before it gives up on them.
  /// A holder known dead is never waited for; "lost" is only ever said of bytes whose holders
  /// are known dead, or still silent after this. Bounded by restore_timeout.
  std::chrono::milliseconds agreement_timeout{60000};
  /// Restore regenerates the rank's slot on this node when this node does not hold it
  /// (a replacement node), so the job is protected again.
  bool rebuild_on_restore = true;
  /// PeerCopier: polling backoff while the neighbour has not published yet (doubles from min
  /// to max), and how often it re-reads the members' manifests to find the neighbour.
  std::chrono::milliseconds copy_backoff_min{2};
  std::chrono::milliseconds copy_backoff_max{50};
  std::chrono::milliseconds relocate_interval{500};
  /// XOR/RS threads of the encoder when a rebuilt slot's redundancy is regenerated.
  int encode_threads = 1;
};

}  // namespace reft::recovery
