#pragma once
/// \file mapped_memfd.h
/// \brief An anonymous memfd mapped read-write: the carrier of a restored state (filled by
/// reftd, handed to the trainer) and of the AOR gradient staging (filled by either side).

#include <cstdint>
#include <string>

#include "reft/result.h"
#include "reft/unique_fd.h"

namespace reft {

/// \brief Owns a memfd and its shared mapping. Move-only; unmaps and closes on destruction.
/// The memfd is sealed against shrinking and growing from creation: whoever else maps it (an
/// untrusted trainer) can never make the owner's reads fault.
class MappedMemfd {
 public:
  /// \brief memfd_create (close-on-exec) of `size` bytes, mapped MAP_SHARED (nothing is mapped
  /// when `size` is 0). OutOfMemory / IoError naming `name` and the size when the kernel refuses.
  static Result<MappedMemfd> Create(const std::string& name, uint64_t size);
  MappedMemfd() = default;
  MappedMemfd(MappedMemfd&& o) noexcept;
  MappedMemfd& operator=(MappedMemfd&& o) noexcept;
  MappedMemfd(const MappedMemfd&) = delete;
  MappedMemfd& operator=(const MappedMemfd&) = delete;
  ~MappedMemfd();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  /// \brief Allocates and maps every page now (MADV_POPULATE_WRITE), so the first writes take
  /// no page faults; a kernel without it (before 5.14) leaves them to fault in as written.
  Status Populate();
  /// \brief Seals the memfd against every write but through mappings made before
  /// (F_SEAL_FUTURE_WRITE): whoever gets the fd after this can only map it read-only, while
  /// this process goes on writing through its own mapping.
  Status SealFutureWrites();
  /// \brief Unmaps, seals the memfd against writes and returns the fd (the bytes stay).
  UniqueFd Release();

 private:
  void Unmap();
  UniqueFd fd_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace reft
