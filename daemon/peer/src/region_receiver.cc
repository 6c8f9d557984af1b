#include "region_receiver.h"

#include <algorithm>
#include <cstring>

#include "reft/checksum.h"
#include "reft/v1/peer.pb.h"

namespace reft::peer {

namespace {

// A cursor over the slices of one received message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}
  bool Byte(uint8_t* out) {
    if (!Skip()) return false;
    *out = slices_[i_].begin()[pos_++];
    return true;
  }
  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool Fixed64(uint64_t* out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= uint64_t{b} << (8 * i);
    }
    *out = v;
    return true;
  }
  /// Copies the next `n` bytes to `dst` and checksums them into `sum` as they land, a
  /// cache-sized block at a time (hashed while still in cache, not read back from memory
  /// afterwards); false if fewer remain.
  bool CopyChecksummed(uint8_t* dst, uint64_t n, ChecksumStream* sum) {
    constexpr uint64_t kBlock = 256 << 10;
    while (n > 0) {
      if (!Skip()) return false;
      uint64_t take = std::min<uint64_t>({n, slices_[i_].size() - pos_, kBlock});
      std::memcpy(dst, slices_[i_].begin() + pos_, take);
      sum->Update(dst, take);
      dst += take;
      pos_ += take;
      n -= take;
    }
    return true;
  }
  bool AtEnd() { return !Skip(); }

 private:
  // Moves past exhausted slices; false at the end of the message.
  bool Skip() {
    while (i_ < slices_.size() && pos_ == slices_[i_].size()) {
      ++i_;
      pos_ = 0;
    }
    return i_ < slices_.size();
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

struct ChunkFields {
  uint64_t offset = 0, length = 0, checksum = 0;
};

}  // namespace

RegionReceiver::RegionReceiver(std::string what, uint8_t* dst, uint64_t offset, uint64_t size,
                               uint64_t max_chunk, const FetchOptions& fo,
                               std::vector<TokenBucket*> buckets)
    : what_(std::move(what)),
      dst_(dst),
      begin_(offset),
      end_(offset + size),
      max_chunk_(max_chunk),
      buckets_(std::move(buckets)),
      next_(offset) {
  if (fo.expect_chunks != nullptr && fo.expect_chunk_size > 0 && fo.expect_region_size > 0) {
    table_.emplace(fo.expect_chunks, fo.expect_chunk_size, fo.expect_region_size);
  }
}

Result<uint8_t*> RegionReceiver::Place(uint64_t chunk_offset, uint64_t length) {
  if (chunk_offset != next_ || length == 0 || length > max_chunk_ || length > end_ - next_) {
    return Status::Protocol(what_ + ": chunk " + std::to_string(chunk_no_) + " at offset " +
                            std::to_string(chunk_offset) + " with length " +
                            std::to_string(length) + " is malformed or out of sequence");
  }
  return dst_ + (chunk_offset - begin_);
}

Status RegionReceiver::Accept(uint64_t chunk_offset, uint64_t length, uint64_t wire_checksum,
                              uint64_t received_checksum) {
  if (received_checksum != wire_checksum) {
    return Status::Corrupted(what_ + ": chunk " + std::to_string(chunk_no_) + " (region bytes " +
                             std::to_string(chunk_offset) + ".." +
                             std::to_string(chunk_offset + length) + ") fails its checksum");
  }
  if (table_) {
    uint64_t sealed = 0;
    switch (table_->Add(chunk_offset, dst_ + (chunk_offset - begin_), length, wire_checksum,
                        &sealed)) {
      case ChunkTableCheck::Result::kOk:
        break;
      case ChunkTableCheck::Result::kMismatch:
        return Status::Corrupted(what_ + ": sealed chunk " + std::to_string(sealed) +
                                 " differs from the checksum in the holder's manifest");
      case ChunkTableCheck::Result::kStraddles:
        return Status::Protocol(what_ + ": chunk " + std::to_string(chunk_no_) +
                                " crosses the end of sealed chunk " + std::to_string(sealed));
    }
  }
  // Pace after receipt: the transport's window (gRPC flow control, TCP socket buffers) is
  // bounded, so the sender is held back too.
  for (TokenBucket* b : buckets_) {
    if (b != nullptr) b->Acquire(length);
  }
  next_ += length;
  ++chunk_no_;
  return Status::OK();
}

Status RegionReceiver::ReceiveMessage(const std::vector<grpc::Slice>& slices,
                                      std::optional<BulkOffer>* offer) {
  // Fast path: the layout PeerService writes (fields 1..3, then `data` last), copied straight
  // from the received slices into place without a protobuf string.
  SliceCursor c(slices);
  ChunkFields f;
  for (uint64_t tag = 0; c.Varint(&tag);) {
    bool ok = true;
    if (tag == 0x08) {
      ok = c.Varint(&f.offset);
    } else if (tag == 0x10) {
      ok = c.Varint(&f.length);
    } else if (tag == 0x19) {
      ok = c.Fixed64(&f.checksum);
    } else if (tag == 0x7A) {
      uint64_t data_size = 0;
      if (!c.Varint(&data_size)) break;
      if (data_size != f.length) break;
      REFT_ASSIGN_OR_RETURN(uint8_t * p, Place(f.offset, f.length));
      ChecksumStream sum;
      if (!c.CopyChecksummed(p, f.length, &sum) || !c.AtEnd()) break;
      return Accept(f.offset, f.length, f.checksum, sum.Digest());
    } else {
      break;
    }
    if (!ok) break;
  }
  // Anything else (another encoder's field order, a bulk offer): a full protobuf parse.
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  v1::RegionChunk chunk;
  if (!chunk.ParseFromString(bytes)) {
    return Status::Protocol(what_ + ": chunk " + std::to_string(chunk_no_) + " is unreadable");
  }
  if (!chunk.bulk_ticket().empty()) {
    if (offer == nullptr || chunk_no_ != 0 || next_ != begin_ ||
        chunk.bulk_ticket().size() != BulkListener::Ticket().size() || chunk.bulk_port() == 0 ||
        chunk.bulk_port() > 65535) {
      return Status::Protocol(what_ + ": unexpected or malformed bulk offer");
    }
    BulkOffer o;
    std::memcpy(o.ticket.data(), chunk.bulk_ticket().data(), o.ticket.size());
    o.port = static_cast<uint16_t>(chunk.bulk_port());
    *offer = o;
    return Status::OK();
  }
  if (chunk.length() != chunk.data().size()) {
    return Status::Protocol(what_ + ": chunk " + std::to_string(chunk_no_) + " says " +
                            std::to_string(chunk.length()) + " bytes and carries " +
                            std::to_string(chunk.data().size()));
  }
  REFT_ASSIGN_OR_RETURN(uint8_t * p, Place(chunk.offset(), chunk.length()));
  std::memcpy(p, chunk.data().data(), chunk.length());
  return Accept(chunk.offset(), chunk.length(), chunk.checksum(), Checksum64(p, chunk.length()));
}

Status RegionReceiver::Incomplete() const {
  return Status::Protocol(what_ + ": stream ended after " + std::to_string(next_ - begin_) +
                          " of " + std::to_string(end_ - begin_) + " bytes");
}

}  // namespace reft::peer
