#include "chunk_table_check.h"

#include <algorithm>

namespace reft::peer {

ChunkTableCheck::ChunkTableCheck(const std::vector<uint64_t>* table, uint64_t chunk_size,
                                 uint64_t region_size)
    : table_(table), chunk_size_(chunk_size), region_size_(region_size) {}

ChunkTableCheck::Result ChunkTableCheck::Add(uint64_t offset, const uint8_t* data, uint64_t size,
                                             uint64_t wire_checksum, uint64_t* chunk) {
  const uint64_t c = offset / chunk_size_;
  const uint64_t begin = c * chunk_size_;
  const uint64_t end = std::min(region_size_, begin + chunk_size_);
  *chunk = c;
  if (offset + size > end) return Result::kStraddles;
  if (c >= table_->size()) return Result::kMismatch;
  if (offset == begin && offset + size == end) {
    return wire_checksum == (*table_)[c] ? Result::kOk : Result::kMismatch;
  }
  if (offset == begin) {
    partial_ = std::make_unique<ChecksumStream>();
    partial_chunk_ = c;
  } else if (partial_chunk_ != c || partial_next_ != offset) {
    return Result::kOk;  // the range starts inside this sealed chunk: the server checked it
  }
  partial_->Update(data, size);
  partial_next_ = offset + size;
  if (partial_next_ < end) return Result::kOk;
  partial_chunk_ = UINT64_MAX;
  return partial_->Digest() == (*table_)[c] ? Result::kOk : Result::kMismatch;
}

}  // namespace reft::peer
