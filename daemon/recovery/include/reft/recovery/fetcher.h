#pragma once
/// \file fetcher.h
/// \brief Fetches many byte ranges with bounded concurrency, deadlines and retry on another
/// source.
///
/// Each item is split into pieces (RecoveryOptions::piece_bytes rounded up to the first source's
/// sealed chunk size). `concurrency` workers take pieces from one queue; a worker tries a
/// piece's sources in order. A source failing with Corrupted, NotFound or InvalidArgument fails
/// only that piece there; one failing with Unavailable, Timeout, Protocol or Cancelled (the
/// holder died, hangs, or is fenced) is remembered as a bad node for the rest of the fetcher's
/// life, so later pieces skip it at once instead of waiting for their own deadline. A piece is
/// tried on each source at most once. When a piece runs out of sources its item fails (its other
/// pieces are skipped) with every attempt's error in the message. Thread-compatible: one Run at
/// a time.
///
/// Streaming: an item without `dst` is read piece by piece into a buffer of the worker's and
/// each verified piece handed to Run's PieceSink. A sink error ends the whole run (the reader
/// of the stream is gone): no source is blamed, the remaining pieces are skipped.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/recovery_options.h"
#include "reft/recovery/region_reader.h"
#include "reft/recovery/restore_stats.h"

namespace reft::recovery {

/// \brief What a fetched region is, for RestoreStats' byte counters.
enum class ByteKind { kShard, kReplica, kParity, kUnique, kOther };

/// \brief One place the bytes of an item can be read: region `region` of `slot`, starting at
/// `region_offset` (the item's byte 0).
struct Source {
  const SlotEntry* slot = nullptr;
  std::string region;
  uint64_t region_offset = 0;
  ByteKind kind = ByteKind::kShard;
  std::string Label() const;  ///< "rep/arc+1 of pp0-tp0-dp1 on node 'n2'"
};

/// \brief One range to fill, with its sources in order of preference.
struct FetchItem {
  std::string what;  ///< "shard dp2", for messages
  uint8_t* dst = nullptr;  ///< nullptr: streamed to Run's sink at `stream_offset`
  uint64_t stream_offset = 0;
  uint64_t size = 0;
  std::vector<Source> sources;

  // Results of Run():
  Status status;                 ///< OK, or why every source failed for some piece
  std::set<std::string> served;  ///< labels of the sources that served its pieces
  /// `served` for a detail line: "a, b", or "empty" for an item of no bytes.
  std::string ServedBy() const;
};

/// \brief Takes verified bytes [offset, offset+size) of a streamed item (its stream_offset
/// plus the piece's offset). Called from several workers at once.
using PieceSink = std::function<Status(uint64_t offset, const uint8_t* data, uint64_t size)>;

/// \brief Memory the sink lends for reading a streamed piece into, so that it passes the piece
/// on without copying it (local::RestoreSink::Borrow). `borrow` returns nullptr when it has
/// none that large (the worker reads into its own buffer); `give_back` gets every lent buffer
/// back once its piece is done, sunk or not.
struct PieceMemory {
  std::function<Result<uint8_t*>(uint64_t size)> borrow;
  std::function<void(uint8_t*)> give_back;
};

/// \brief Ranks a streamed piece by its stream offset: Run fetches pieces in ascending rank
/// (ties in item order), so a consumer of the stream can have the pieces that feed the same
/// output arrive together (StreamDecode::ScheduleRank).
using PieceOrder = std::function<uint64_t(uint64_t stream_offset)>;

class Fetcher {
 public:
  /// `reader` must outlive the fetcher. `stats` (optional) receives byte counters and retries;
  /// `progress` (optional) is called after every verified piece.
  Fetcher(const RegionReader* reader, RecoveryOptions options, RestoreStats* stats = nullptr,
          ProgressCallback progress = nullptr);

  /// \brief Fetches every item; returns when all pieces are done or abandoned. Each piece
  /// attempt ends by min(now + piece_timeout, deadline); past `deadline` nothing new starts and
  /// the remaining pieces fail with Timeout. Item results in `items[i].status`. `sink` takes
  /// the pieces of items without `dst`; its first error is returned (OK otherwise). `order`
  /// (optional) ranks the pieces of items without `dst`; pieces go in item order otherwise.
  Status Run(std::vector<FetchItem>* items, std::chrono::steady_clock::time_point deadline,
             const PieceSink& sink = nullptr, const PieceMemory* memory = nullptr,
             const PieceOrder& order = nullptr);

  /// The largest piece Run() reads of `items` (a sink lending memory sizes it by this).
  uint64_t LargestPiece(const std::vector<FetchItem>& items) const;
  /// How many pieces Run() reads at once.
  int concurrency() const { return std::max(1, options_.concurrency); }

  /// Nodes given up on so far ("node: reason").
  std::map<std::string, std::string> bad_nodes() const;

 private:
  struct RunState;  // one Run(): pieces, queue position, per-item failure flags
  void Work(RunState* run);
  // Pieces of `item` cover whole sealed chunks of its preferred source.
  uint64_t PieceSize(const FetchItem& item) const;
  /// Adds `size` bytes served by `src` to the stats, by kind and by where they came from.
  void CountServedLocked(const Source& src, uint64_t size) REFT_REQUIRES(mu_);
  bool IsBad(const std::string& node) const;
  void MarkBad(const std::string& node, const Status& why);

  const RegionReader* reader_;
  RecoveryOptions options_;
  RestoreStats* stats_;
  ProgressCallback progress_;
  mutable Mutex mu_;  // bad_nodes_, *stats_, progress_ calls, item results
  std::map<std::string, std::string> bad_nodes_ REFT_GUARDED_BY(mu_);
  uint64_t done_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::recovery
