#pragma once
/// \file checksum.h
/// \brief The one checksum reft uses everywhere (slots, chunks on the wire, persisted files):
/// XXH3-64 with runtime CPU dispatch (AVX2/AVX-512 where available).

#include <cstddef>
#include <cstdint>

namespace reft {

/// \brief XXH3-64 of `size` bytes at `data` (size 0 is valid).
uint64_t Checksum64(const void* data, size_t size);

/// \brief Incremental form for data that arrives in pieces; equals Checksum64 of the concatenation.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept opaque so xxhash.h stays out of public headers
};

}  // namespace reft
