#pragma once
// A RestoreSink for tests: what a trainer's buffers would receive from a streamed restore.

#include <cstdint>
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
  Status Begin(const std::map<std::string, uint64_t>&, uint64_t size) override {
    MutexLock lock(mu_);
    begun_ = true;
    bytes_.assign(size, 0);
    return Status::OK();
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
};

}  // namespace reft::recovery::test
