#pragma once
/// \file codec.h
/// \brief The bounded little-endian payload encoding of local-channel messages.
///
/// Every variable-length item carries an explicit u32 length that the reader checks against
/// both the bytes left and a caller-given maximum before it allocates, so a hostile frame can
/// neither read out of bounds nor make the daemon allocate more than the frame's own size.
/// Not thread-safe (value types used by one thread).

#include <cstdint>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::local_proto {

/// \brief Appends fields to a byte vector.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Raw(v, 2); }
  void U32(uint32_t v) { Raw(v, 4); }
  void U64(uint64_t v) { Raw(v, 8); }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  /// u32 length + bytes.
  void Bytes(const std::string& s);
  /// Exactly `n` bytes, no length prefix (fixed-size records).
  void Fixed(const uint8_t* data, size_t n) { out_.insert(out_.end(), data, data + n); }
  const std::vector<uint8_t>& data() const { return out_; }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  void Raw(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

/// \brief Reads fields from a byte span; every read fails with a Protocol status naming
/// `field` when the input is truncated or a length exceeds its bound.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  Status U8(uint8_t* v, const char* field);
  Status U16(uint16_t* v, const char* field);
  Status U32(uint32_t* v, const char* field);
  Status U64(uint64_t* v, const char* field);
  Status I32(int32_t* v, const char* field);
  Status I64(int64_t* v, const char* field);
  /// A u32-length-prefixed string of at most `max_len` bytes.
  Status Bytes(std::string* v, size_t max_len, const char* field);
  /// Exactly `n` bytes into `out` (a fixed-size record).
  Status Fixed(uint8_t* out, size_t n, const char* field);
  /// A u32 element count of at most `max_count`; also checks that `count * min_elem_bytes`
  /// bytes remain so a lying count cannot trigger a large reserve().
  Status Count(uint32_t* v, uint32_t max_count, size_t min_elem_bytes, const char* field);
  /// Protocol error unless every byte was consumed (trailing garbage is rejected).
  Status Finish(const char* message_name) const;
  size_t left() const { return left_; }

 private:
  Status Raw(uint64_t* v, int n, const char* field);
  const uint8_t* p_;
  size_t left_;
};

}  // namespace reft::local_proto
