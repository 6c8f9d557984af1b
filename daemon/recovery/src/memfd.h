#pragma once
/// \file memfd.h
/// \brief An anonymous memfd mapped read-write while a restore fills it; the fd is handed on
/// sealed against shrinking, growing and (once released) writing.

#include <cstdint>
#include <string>

#include "reft/local_proto/unique_fd.h"
#include "reft/result.h"

namespace reft::recovery {

/// \brief Owns a memfd and its shared mapping. Move-only; unmaps and closes on destruction.
class MappedMemfd {
 public:
  /// \brief memfd_create (close-on-exec) of `size` bytes, mapped MAP_SHARED. OutOfMemory /
  /// IoError naming the size when the kernel refuses.
  static Result<MappedMemfd> Create(const std::string& name, uint64_t size);
  MappedMemfd() = default;
  MappedMemfd(MappedMemfd&& o) noexcept;
  MappedMemfd& operator=(MappedMemfd&& o) noexcept;
  MappedMemfd(const MappedMemfd&) = delete;
  MappedMemfd& operator=(const MappedMemfd&) = delete;
  ~MappedMemfd();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  /// \brief Unmaps, seals the memfd against writes and returns the fd (the bytes stay).
  local_proto::UniqueFd Release();

 private:
  void Unmap();
  local_proto::UniqueFd fd_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace reft::recovery
