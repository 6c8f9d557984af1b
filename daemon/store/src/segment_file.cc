#include "segment_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "reft/thread.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux >= 5.14
#endif

namespace reft::store::internal {
namespace {

/// MADV_POPULATE_WRITE over [data, data+size), split across `threads` threads: page faults
/// are CPU-bound, so two threads fault twice as fast (docs/bench/store.md). Returns 0 or errno.
int PopulateRange(uint8_t* data, uint64_t size, int threads) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t pages = size / page;
  int n = static_cast<int>(std::min<uint64_t>(std::max(threads, 1), pages / 2048 + 1));
  std::vector<int> errs(n, 0);
  auto part = [&](int t) {
    uint64_t b = pages * t / n * page, e = t + 1 == n ? size : pages * (t + 1) / n * page;
    if (e > b && madvise(data + b, e - b, MADV_POPULATE_WRITE) != 0) errs[t] = errno;
  };
  std::vector<reft::Thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back("reft-populate", [&part, t] { part(t); });
  part(0);
  for (auto& th : pool) th.join();
  for (int e : errs) {
    if (e != 0) return e;
  }
  return 0;
}

Status PopulateWrite(uint8_t* data, uint64_t size, int fd, uint64_t file_offset, int threads) {
  int err = PopulateRange(data, size, threads);
  if (err == 0) return Status::OK();
  if (err != EINVAL) {
    // EFAULT/ENOMEM: a page could not be allocated (tmpfs full); touching it would SIGBUS.
    return Status::OutOfMemory(std::string("no room for the segment's pages in shared memory "
                                           "(tmpfs full; MADV_POPULATE_WRITE: ") +
                               std::strerror(err) + ")");
  }
  // Older kernel: reserve the space first so that touching can never SIGBUS, then touch.
  int rc = posix_fallocate(fd, static_cast<off_t>(file_offset), static_cast<off_t>(size));
  if (rc != 0) return Status::FromErrno(rc, "fallocate of the segment");
  const long page = sysconf(_SC_PAGESIZE);
  for (uint64_t off = 0; off < size; off += static_cast<uint64_t>(page)) {
    reinterpret_cast<volatile uint8_t*>(data)[off] = 0;
  }
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<SegmentFile>> SegmentFile::Create(const std::string& path, uint64_t size,
                                                         mode_t mode, gid_t gid, Pages pages,
                                                         int threads) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Status::FromErrno(errno, "creating segment " + path);
  auto fail = [&](Status st) {
    ::unlink(path.c_str());
    ::close(fd);
    return st;
  };
  // The umask must not widen or narrow the mode the operator asked for.
  if (::fchmod(fd, mode) != 0) return fail(Status::FromErrno(errno, "fchmod " + path));
  if (gid != static_cast<gid_t>(-1) && ::fchown(fd, static_cast<uid_t>(-1), gid) != 0) {
    return fail(Status::FromErrno(errno, "chown to group " + std::to_string(gid) + " of " + path));
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return fail(Status::FromErrno(errno, "ftruncate " + path));
  }
  if (pages == Pages::kReserve) {
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (rc != 0) {
      return fail(Status::OutOfMemory("cannot reserve " + std::to_string(size) + " bytes for " +
                                      path + ": " + std::strerror(rc)));
    }
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(Status::FromErrno(errno, "mmap " + path));
  auto* data = static_cast<uint8_t*>(p);
  if (pages == Pages::kPopulate) {
    Status st = PopulateWrite(data, size, fd, 0, threads);
    if (!st.ok()) {
      ::munmap(p, size);
      return fail(st.WithContext(path));
    }
  }
  return std::shared_ptr<SegmentFile>(new SegmentFile(fd, data, size, pages != Pages::kOnDemand));
}

Result<std::shared_ptr<SegmentFile>> SegmentFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::FromErrno(errno, "opening " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "fstat " + path);
  }
  auto reject = [&](std::string why) {
    ::close(fd);
    return Status::PermissionDenied(path + ": " + why);
  };
  if (!S_ISREG(st.st_mode)) return reject("not a regular file");
  if (st.st_uid != ::geteuid()) {
    return reject("owned by uid " + std::to_string(st.st_uid) + ", not by this daemon (uid " +
                  std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 0027) != 0) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return reject(std::string("mode ") + buf + " lets group write or others access it");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::Corrupted(path + ": empty file");
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "mmap " + path);
  }
  // An adopted segment holds a whole snapshot: every page was written.
  return std::shared_ptr<SegmentFile>(new SegmentFile(fd, static_cast<uint8_t*>(p), size, true));
}

void SegmentFile::PrefaultExisting(int threads) const { (void)PopulateRange(data_, size_, threads); }

Status SegmentFile::Populate(uint8_t* at, uint64_t size) const {
  if (at < data_ || size > size_ || static_cast<uint64_t>(at - data_) > size_ - size) {
    return Status::InvalidArgument("populating bytes outside the segment's mapping");
  }
  if (size == 0) return Status::OK();
  // madvise wants a page-aligned start; the pages the range touches are populated whole.
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = static_cast<uint64_t>(at - data_) / page * page;
  const uint64_t end = std::min<uint64_t>(size_, static_cast<uint64_t>(at - data_) + size);
  return PopulateWrite(data_ + begin, end - begin, fd_, begin, 1);
}

Status SegmentFile::PopulateAll(int threads) {
  if (populated()) return Status::OK();
  REFT_RETURN_NOT_OK(PopulateWrite(data_, size_, fd_, 0, threads));
  populated_.store(true, std::memory_order_release);
  return Status::OK();
}

Status SegmentFile::CheckIntact(const std::string& path) const {
  struct stat st {};
  const bool shrunk = ::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < size_;
  if (!shrunk && !guard_.Damaged()) return Status::OK();
  return Status::Corrupted("segment " + path + " was truncated under reftd by a process " +
                           "holding its fd (mapped " + std::to_string(size_) + " bytes, now " +
                           std::to_string(st.st_size) + ")");
}

Status SegmentFile::PinOnce(const void* owner, uint8_t* addr, const std::function<Status()>& pin,
                            std::function<void()> unpin) {
  MutexLock lock(pins_mu_);
  for (const Pin& p : pins_) {
    if (p.owner == owner && p.addr == addr) return Status::OK();
  }
  REFT_RETURN_NOT_OK(pin());
  pins_.push_back({owner, addr, std::move(unpin)});
  return Status::OK();
}

SegmentFile::~SegmentFile() {
  {
    MutexLock lock(pins_mu_);
    for (Pin& p : pins_) p.unpin();
  }
  guard_.Reset();
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace reft::store::internal
