#pragma once
/// \file huge_buffer.h
/// \brief Zeroed scratch memory for large, short-lived buffers (a restore's decode sums and
/// parity), backed by transparent huge pages where the kernel allows.
///
/// Why: the first write to a fresh 4 KiB page costs a fault and a page zeroing, and over a
/// buffer of hundreds of MiB that costs more than the bytes it will hold: 0.1 s per 256 MiB on
/// the reference VM, against 0.01–0.02 s with 2 MiB pages (docs/bench/recovery.md). The range
/// is 2 MiB-aligned and advised MADV_HUGEPAGE, which takes effect under the kernel's THP modes
/// "always" and "madvise" (the common defaults); under "never" it is plain anonymous memory.

#include <cstdint>

#include "reft/result.h"

namespace reft {

/// \brief Owns an anonymous private mapping of `size` zero bytes. Move-only; unmaps on
/// destruction. Pages are allocated on first touch.
class HugeBuffer {
 public:
  /// \brief OutOfMemory naming `what` and the size when the kernel refuses the mapping.
  static Result<HugeBuffer> Allocate(uint64_t size, const char* what);
  HugeBuffer() = default;
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void Unmap();
  void* map_ = nullptr;  // the whole mapping, alignment slack included
  uint64_t map_size_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace reft
