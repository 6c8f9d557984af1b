/// \file memfd.cc
#include "memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace reft::recovery {

Result<MappedMemfd> MappedMemfd::Create(const std::string& name, uint64_t size) {
  MappedMemfd m;
  const int fd = ::memfd_create(name.substr(0, 200).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::FromErrno(errno, "memfd_create for a restore");
  m.fd_.reset(fd);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    if (err == ENOMEM || err == ENOSPC || err == EFBIG) {
      return Status::OutOfMemory("cannot size a restore buffer of " + std::to_string(size) +
                                 " bytes");
    }
    return Status::FromErrno(err, "ftruncate of the restore memfd");
  }
  // The fd goes to an untrusted trainer while the daemon may still map it: a file it could
  // shrink would SIGBUS the daemon's readers.
  (void)::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  m.size_ = size;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap of the restore memfd");
    m.data_ = static_cast<uint8_t*>(p);
  }
  return m;
}

MappedMemfd::MappedMemfd(MappedMemfd&& o) noexcept
    : fd_(std::move(o.fd_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedMemfd& MappedMemfd::operator=(MappedMemfd&& o) noexcept {
  if (this != &o) {
    Unmap();
    fd_ = std::move(o.fd_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedMemfd::~MappedMemfd() { Unmap(); }

void MappedMemfd::Unmap() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
}

local_proto::UniqueFd MappedMemfd::Release() {
  Unmap();
  // Filled: nobody writes it any more (possible only once no writable mapping is left).
  if (fd_.valid()) (void)::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_WRITE);
  return std::move(fd_);
}

}  // namespace reft::recovery
