#pragma once
// A RestoreSink for tests: what a trainer's buffers would receive from a streamed restore.

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "reft/local/recovery_hooks.h"
#include "reft/mapped_memfd.h"
#include "reft/mutex.h"

namespace reft::recovery::test {

// What a trainer's buffers would receive, in the state's layout; fails every write from
// `fail_from` on with `failure` (a trainer that went away).
class CollectingSink final : public local::RestoreSink {
 public:
  explicit CollectingSink(size_t fail_from = SIZE_MAX,
                          Status failure = Status::Unavailable("the trainer closed the stream"))
      : fail_from_(fail_from), failure_(std::move(failure)) {}

  bool Available() const override {
    MutexLock lock(mu_);
    return !begun_;
  }
  Status Begin(const std::map<std::string, uint64_t>&, uint64_t size, uint64_t piece_bytes,
               int in_flight) override {
    MutexLock lock(mu_);
    begun_ = true;
    bytes_.assign(size, 0);
    // Lends fewer buffers than pieces in flight, as a ring does not: some workers read into
    // lent memory, the others into their own (both paths of the fetch).
    piece_bytes_ = piece_bytes;
    lent_.assign(static_cast<size_t>(std::max(1, in_flight - 1)), nullptr);
    pool_.assign(lent_.size(), std::vector<uint8_t>(piece_bytes));
    return Status::OK();
  }
  Result<uint8_t*> Borrow(uint64_t size) override {
    MutexLock lock(mu_);
    if (size > piece_bytes_) return nullptr;
    for (size_t i = 0; i < lent_.size(); ++i) {
      if (lent_[i] != nullptr) continue;
      lent_[i] = pool_[i].data();
      ++borrowed_;
      return lent_[i];
    }
    return nullptr;
  }
  void GiveBack(uint8_t* memory) override {
    MutexLock lock(mu_);
    for (auto& l : lent_) {
      if (l == memory) l = nullptr;
    }
  }
  Status Write(uint64_t offset, const uint8_t* data, uint64_t size) override {
    MutexLock lock(mu_);
    if (writes_++ >= fail_from_) return failure_;
    if (offset + size > bytes_.size()) {
      out_of_range_ = true;
      return Status::Internal("out of range");
    }
    std::memcpy(bytes_.data() + offset, data, size);
    written_ += size;
    return Status::OK();
  }
  void End(bool complete) override {
    MutexLock lock(mu_);
    ended_ = true;
    complete_ = complete;
  }

  bool begun() const { MutexLock lock(mu_); return begun_; }
  bool complete() const { MutexLock lock(mu_); return ended_ && complete_; }
  bool out_of_range() const { MutexLock lock(mu_); return out_of_range_; }
  uint64_t written() const { MutexLock lock(mu_); return written_; }
  uint64_t borrowed() const { MutexLock lock(mu_); return borrowed_; }

  // The streamed bytes as the sealed memfd a memfd restore would have handed over.
  local::RestoredState AsMemfd(const local::RestoredState& streamed) const {
    MutexLock lock(mu_);
    local::RestoredState out;
    out.step = streamed.step;
    out.source = streamed.source;
    out.detail = streamed.detail;
    out.offsets = streamed.offsets;
    out.size = bytes_.size();
    auto mem = MappedMemfd::Create("streamed", bytes_.size());
    REQUIRE(mem.ok());
    std::memcpy(mem->data(), bytes_.data(), bytes_.size());
    out.fd = mem->Release();
    return out;
  }

 private:
  const size_t fail_from_;
  const Status failure_;
  mutable Mutex mu_;
  bool begun_ REFT_GUARDED_BY(mu_) = false;
  bool ended_ REFT_GUARDED_BY(mu_) = false;
  bool complete_ REFT_GUARDED_BY(mu_) = false;
  bool out_of_range_ REFT_GUARDED_BY(mu_) = false;
  size_t writes_ REFT_GUARDED_BY(mu_) = 0;
  uint64_t written_ REFT_GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> bytes_ REFT_GUARDED_BY(mu_);
  uint64_t piece_bytes_ REFT_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<uint8_t>> pool_ REFT_GUARDED_BY(mu_);
  std::vector<uint8_t*> lent_ REFT_GUARDED_BY(mu_);  // per pool buffer: lent or nullptr
  uint64_t borrowed_ REFT_GUARDED_BY(mu_) = 0;
};

}  // namespace reft::recovery::test
