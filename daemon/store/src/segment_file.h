#pragma once
/// \file segment_file.h
/// \brief One segment file in shm_dir, opened and mapped MAP_SHARED read-write.
///
/// Owns the fd and the mapping; both are released when the last shared_ptr goes, so a slot
/// that is dropped or re-created while a SlotRef still reads it stays mapped (the file itself
/// is already unlinked). Thread-safe for concurrent reads; the store serialises writers.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reft/fault_guard.h"
#include "reft/mutex.h"
#include "reft/result.h"

namespace reft::store::internal {

class SegmentFile {
 public:
  /// \brief How Create gives the new file its pages.
  enum class Pages {
    /// Every page allocated and mapped writable up front (MADV_POPULATE_WRITE, else fallocate
    /// + touch), split over `threads` threads, so that snapshot copies run at memory speed
    /// (first-touch faults cap writes at ~1.3 GB/s on the build machine, docs/bench/store.md).
    kPopulate,
    /// The space reserved (fallocate), so tmpfs exhaustion is an error here, never a SIGBUS.
    kReserve,
    /// Nothing: the writer calls Populate on each range before writing it.
    kOnDemand,
  };
  /// \brief Creates `path` (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, exactly `mode`, group `gid`
  /// unless -1), sizes it to `size` and maps it, with its pages as `pages` says.
  static Result<std::shared_ptr<SegmentFile>> Create(const std::string& path, uint64_t size,
                                                     mode_t mode, gid_t gid, Pages pages,
                                                     int threads);
  /// \brief Opens an existing segment for adoption: must be a regular file (no symlink),
  /// owned by this euid, with no write permission for group and no access for others.
  static Result<std::shared_ptr<SegmentFile>> Open(const std::string& path);
  ~SegmentFile();
  SegmentFile(const SegmentFile&) = delete;
  SegmentFile& operator=(const SegmentFile&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  /// \brief Maps the pages writable now, with up to `threads` threads (cheaper for pages tmpfs
  /// already holds; done before verification so that reading faults nothing).
  void PrefaultExisting(int threads) const;
  /// \brief Allocates and maps writable the pages of [at, at+size) (inside the mapping):
  /// OutOfMemory when tmpfs is full.
  Status Populate(uint8_t* at, uint64_t size) const;
  /// \brief False while a file created with Pages::kOnDemand may still have pages nobody
  /// populated; PopulateAll makes it true.
  bool populated() const { return populated_.load(std::memory_order_acquire); }
  Status PopulateAll(int threads);
  /// \brief Corrupted (naming `path`) when the file was shrunk below the mapping: a fault in
  /// the mapping was repaired (fault_guard.h) or the file is shorter than mapped now.
  Status CheckIntact(const std::string& path) const;
  /// \brief See SlotRef::PinOnce.
  Status PinOnce(const void* owner, uint8_t* addr, const std::function<Status()>& pin,
                 std::function<void()> unpin);

 private:
  struct Pin {
    const void* owner;
    uint8_t* addr;
    std::function<void()> unpin;
  };
  SegmentFile(int fd, uint8_t* data, uint64_t size, bool populated)
      : fd_(fd), data_(data), size_(size), guard_(data, size), populated_(populated) {}
  int fd_;
  uint8_t* data_;
  uint64_t size_;
  // Every trainer gets a writable fd of its slot files, so any of them can be truncated under
  // this mapping: a fault is repaired instead of killing reftd.
  FaultGuardedRange guard_;
  std::atomic<bool> populated_;
  Mutex pins_mu_;
  std::vector<Pin> pins_ REFT_GUARDED_BY(pins_mu_);  // undone before the pages are unmapped
};

}  // namespace reft::store::internal
