#pragma once
/// \file stream_decode.h
/// \brief The shards a streamed restore rebuilds from AEC parity while the others pass.
///
/// A lost member's shard j is, sub-block by sub-block, the AEC parity of each survivor k XORed
/// with the other shards' sub-blocks in that parity. Those shards stream to the trainer anyway,
/// so each passing piece is also XORed into a shard-sized buffer, the survivors' parity regions
/// (W/M bytes in all) are fetched beside them, and once every piece has passed the buffer holds
/// shard j: the restore never assembles the state, and no byte is read twice. Planned from the
/// recovery analysis, so only what it proves recoverable is decoded; a loss it rebuilds another
/// way (RS, or a shard decoded from another decoded shard) is left to the in-memory assembly.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/huge_buffer.h"
#include "reft/protect/rebuild_analysis.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/cluster_view.h"
#include "reft/recovery/fetcher.h"
#include "reft/recovery/xor_accumulator.h"

namespace reft::recovery {

class StreamDecode {
 public:
  /// \brief The decode of every shard d with `streamed[d] == false` from AEC parity and the
  /// streamed shards; nullptr when the analysis rebuilds some of them otherwise or a parity
  /// region it needs has no live copy. `sg` names the group in messages.
  static Result<std::unique_ptr<StreamDecode>> Plan(const ClusterView& view,
                                                    const protect::SlotMeta& meta,
                                                    const protect::SgGeometry& geometry,
                                                    int64_t step, const std::vector<bool>& streamed,
                                                    const std::string& sg);

  /// \brief Items fetching the parity regions into this object's buffers (call once; they
  /// must be fetched, OK, before Finish).
  std::vector<FetchItem> TakeParityItems();

  /// \brief Adds a passing piece of the state (a streamed shard's bytes) to the decode.
  Status Absorb(uint64_t offset, const uint8_t* data, uint64_t size) {
    return sum_.Absorb(offset, data, size);
  }

  /// \brief Adds the parity in and hands every decoded shard to `deliver` at its state offset,
  /// in pieces. Internal when a streamed byte the decode reads never passed.
  Status Finish(const PieceSink& deliver);

  /// \brief "dp1 rebuilt from AEC parity of dp0, dp2, dp3" per decoded shard.
  const std::vector<std::string>& labels() const { return labels_; }
  uint64_t decoded_bytes() const;

 private:
  StreamDecode() = default;
  struct Shard {
    int member = -1;
    HugeBuffer bytes;  // starts as zero; the XOR sum
  };
  struct ParityUse {  // parity[holder][offset, +size) XORs into shards[shard].bytes[at, +size)
    size_t shard = 0;
    int holder = -1;
    uint64_t offset = 0;
    uint64_t at = 0;
    uint64_t size = 0;
  };
  protect::SgGeometry g_;
  std::vector<Shard> shards_;
  std::vector<HugeBuffer> parity_;  // per member; empty unless read
  std::vector<ParityUse> uses_;
  std::vector<FetchItem> parity_items_;
  std::vector<std::string> labels_;
  XorAccumulator sum_;
};

}  // namespace reft::recovery
