#pragma once
/// \file stream_decode.h
/// \brief The shards a streamed restore rebuilds from AEC parity while the others pass.
///
/// A lost member's shard j is, sub-block by sub-block, the AEC parity of each survivor k XORed
/// with the other shards' sub-blocks in that parity. Those shards stream to the trainer anyway,
/// so each passing piece is also XORed into a shard-sized sum, and the survivors' parity
/// regions are streamed into it too (they travel in the same fetch, at offsets past the state's
/// end that only the decode takes). Each stretch of a sub-block is handed on the moment its
/// last term arrives, so the decode overlaps the fetch: the restore never assembles the state,
/// and no byte is read twice. Planned from the recovery analysis, so only what it proves recoverable is decoded; a
/// loss it rebuilds another way (RS, or a shard decoded from another decoded shard) is left to
/// the in-memory assembly.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/huge_buffer.h"
#include "reft/protect/rebuild_analysis.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "xor_accumulator.h"

namespace reft::recovery {

class StreamDecode {
 public:
  /// \brief The decode of every shard d with `streamed[d] == false` from AEC parity and the
  /// streamed shards of a state of `state_size` bytes; nullptr when the analysis rebuilds some
  /// of them otherwise or a parity region it needs has no live copy. `sg` names the group in
  /// messages.
  static Result<std::unique_ptr<StreamDecode>> Plan(const ClusterView& view,
                                                    const protect::SlotMeta& meta,
                                                    const protect::SgGeometry& geometry,
                                                    int64_t step, const std::vector<bool>& streamed,
                                                    uint64_t state_size, const std::string& sg);

  /// \brief Items streaming the parity regions the decode reads (call once; fetch them with
  /// the shards, through the same sink).
  std::vector<FetchItem> TakeParityItems();

  /// \brief The fetch order that keeps each decoded stretch in cache across its terms
  /// (Fetcher::PieceOrder): a piece's position inside its AEC sub-block. The terms of one output
  /// stretch (a sub-block of each other shard and a holder's parity, all at the same position)
  /// then arrive close together instead of one shard apart, so the second and later terms add
  /// into a sum the first left in cache. Bytes past the shards (unique buffers) rank first.
  uint64_t ScheduleRank(uint64_t offset) const;

  /// \brief Whether stream offset `offset` is a parity byte (the decode's alone: not state).
  bool IsParity(uint64_t offset) const { return offset >= parity_base_; }

  /// \brief Adds a passing piece (state or parity) to the decode, and hands every decoded
  /// sub-block it completes to `deliver` at its state offset, in pieces.
  Status Absorb(uint64_t offset, const uint8_t* data, uint64_t size, const PieceSink& deliver);

  /// \brief Internal unless every decoded byte was delivered (call after the fetch).
  Status Finish() const;

  /// \brief "dp1 rebuilt from AEC parity of dp0, dp2, dp3" per decoded shard.
  const std::vector<std::string>& labels() const { return labels_; }
  uint64_t decoded_bytes() const;

 private:
  StreamDecode() = default;
  struct Output {  // a stretch of a sub-block of a decoded shard: bytes [at, at + size) of it
    int member = -1;
    uint8_t* sum = nullptr;
    uint64_t at = 0;
    uint64_t size = 0;
  };
  protect::SgGeometry g_;
  uint64_t parity_base_ = 0;  // parity of member k streams at parity_base_ + k * aec_sub
  std::vector<HugeBuffer> sums_;
  std::vector<Output> outputs_;  // ids of the accumulator's output groups
  std::vector<FetchItem> parity_items_;
  std::vector<std::string> labels_;
  XorAccumulator sum_;
  std::atomic<uint64_t> delivered_{0};
};

}  // namespace reft::recovery
