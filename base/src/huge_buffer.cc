/// \file huge_buffer.cc
/// \brief Anonymous, 2 MiB-aligned, MADV_HUGEPAGE scratch memory.

#include "reft/huge_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "reft/units.h"

namespace reft {

namespace {
constexpr uint64_t kHugePage = uint64_t{2} << 20;
}  // namespace

Result<HugeBuffer> HugeBuffer::Allocate(uint64_t size, const char* what) {
  HugeBuffer b;
  if (size == 0) return b;
  // Map a huge page more than asked and use the aligned part, so every 2 MiB of the buffer
  // can be one huge page.
  b.map_size_ = size + kHugePage;
  b.map_ = ::mmap(nullptr, b.map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                  MAP_NORESERVE, -1, 0);
  if (b.map_ == MAP_FAILED) {
    b.map_ = nullptr;
    return Status::OutOfMemory(std::string("cannot map ") + FormatBytes(size) + " for " + what +
                               ": " + std::strerror(errno));
  }
  const uint64_t base = reinterpret_cast<uint64_t>(b.map_);
  b.data_ = reinterpret_cast<uint8_t*>((base + kHugePage - 1) & ~(kHugePage - 1));
  b.size_ = size;
  // Advice only: a kernel without THP leaves 4 KiB pages, which work the same.
  (void)::madvise(b.data_, (size + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);
  return b;
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    Unmap();
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() { Unmap(); }

void HugeBuffer::Unmap() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace reft
