#pragma once
/// \file region_receiver.h
/// \brief The receiving end of one FetchRegion range, whichever transport brings the chunks
/// (the gRPC stream or a bulk connection): it says where each chunk's bytes go before they are
/// received (in sequence, inside the range, no longer than a wire chunk), then checks the
/// received bytes' hash against the chunk's checksum and the holder's manifest
/// (ChunkTableCheck), and paces the receiver's token buckets. Nothing is written outside the
/// caller's range, and a range is complete only when every byte of it was checked.

#include <grpcpp/support/slice.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chunk_table_check.h"
#include "reft/peer/bulk_listener.h"
#include "reft/peer/peer_client.h"
#include "reft/token_bucket.h"

namespace reft::peer {

/// What a holder answers a `bulk` request with: where to connect and what to present.
struct BulkOffer {
  BulkListener::Ticket ticket{};
  uint16_t port = 0;
};

class RegionReceiver {
 public:
  /// Bytes [offset, offset + size) of the region go to `dst`; `what` names the call in
  /// messages. The buckets (may be null) are paced with every accepted chunk.
  RegionReceiver(std::string what, uint8_t* dst, uint64_t offset, uint64_t size,
                 uint64_t max_chunk, const FetchOptions& options,
                 std::vector<TokenBucket*> buckets);

  /// Where the `length` bytes of the chunk at region offset `chunk_offset` go. Protocol when
  /// the chunk is out of sequence, longer than a wire chunk, or reaches past the range.
  Result<uint8_t*> Place(uint64_t chunk_offset, uint64_t length);
  /// The chunk Place() located is in, and its bytes hash to `received_checksum`: Corrupted
  /// when that differs from `wire_checksum` or from the manifest's table.
  Status Accept(uint64_t chunk_offset, uint64_t length, uint64_t wire_checksum,
                uint64_t received_checksum);

  /// One message of the gRPC stream: a chunk (placed, copied, hashed and accepted) or, as the
  /// first message, a bulk offer (returned in `*offer`).
  Status ReceiveMessage(const std::vector<grpc::Slice>& slices, std::optional<BulkOffer>* offer);

  bool done() const { return next_ == end_; }
  /// Protocol naming how far the range got (a stream that ended early).
  Status Incomplete() const;
  const std::string& what() const { return what_; }

 private:
  const std::string what_;
  uint8_t* const dst_;
  const uint64_t begin_;
  const uint64_t end_;
  const uint64_t max_chunk_;
  std::optional<ChunkTableCheck> table_;
  std::vector<TokenBucket*> buckets_;
  uint64_t next_;         ///< region offset the next chunk must start at
  uint64_t chunk_no_ = 0;
};

}  // namespace reft::peer
