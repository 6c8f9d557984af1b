#include "reft/mapped_memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace reft {

Result<MappedMemfd> MappedMemfd::Create(const std::string& name, uint64_t size) {
  MappedMemfd m;
  const int fd = ::memfd_create(name.substr(0, 200).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::FromErrno(errno, "memfd_create '" + name + "'");
  m.fd_.reset(fd);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    if (err == ENOMEM || err == ENOSPC || err == EFBIG) {
      return Status::OutOfMemory("cannot size the memfd '" + name + "' to " +
                                 std::to_string(size) + " bytes");
    }
    return Status::FromErrno(err, "ftruncate of the memfd '" + name + "'");
  }
  // The fd goes to an untrusted trainer while this process may still map it: a file it could
  // shrink would make our reads fault (SIGBUS).
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    return Status::FromErrno(errno, "sealing the memfd '" + name + "'");
  }
  m.size_ = size;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap of the memfd '" + name + "'");
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

// Linux 5.14 and 5.1; older kernel headers lack the names.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

Status MappedMemfd::Populate() {
  if (data_ == nullptr) return Status::OK();
  if (::madvise(data_, size_, MADV_POPULATE_WRITE) == 0 || errno == EINVAL) return Status::OK();
  if (errno == ENOMEM || errno == EFAULT) {
    return Status::OutOfMemory("cannot populate a memfd of " + std::to_string(size_) + " bytes");
  }
  return Status::FromErrno(errno, "populating a memfd");
}

Status MappedMemfd::SealFutureWrites() {
  if (::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0) {
    return Status::FromErrno(errno, "sealing a memfd against future writes");
  }
  return Status::OK();
}

UniqueFd MappedMemfd::Release() {
  Unmap();
  // Filled: nobody writes it any more. Sealing needs no writable mapping to be left, which
  // Unmap() just ensured; a kernel refusing it leaves the bytes correct, only unsealed.
  if (fd_.valid()) (void)::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_WRITE);
  return std::move(fd_);
}

}  // namespace reft
