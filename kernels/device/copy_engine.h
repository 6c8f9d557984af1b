#pragma once
/// \file copy_engine.h
/// \brief A CopyStream run by one worker thread on the host: operations execute in order,
/// copies are chunked and paced to a bandwidth (the emulated device's copy engine), events are
/// shared-memory counters another process can wait on. Used by the emulated and host backends.

#include <condition_variable>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "reft/kernels/device.h"
#include "reft/mutex.h"

namespace reft::kernels {

/// \brief A 64-bit counter in a memfd. Recording an event stores a target value; waiting
/// means "counter >= target". Shareable across processes through the fd.
class SharedCounter {
 public:
  static Result<std::shared_ptr<SharedCounter>> Create();
  /// \brief Maps an fd received from another process (the fd is dup()ed, the caller keeps its own).
  static Result<std::shared_ptr<SharedCounter>> Open(int fd);
  ~SharedCounter();
  int fd() const { return fd_; }
  void Store(uint64_t value);
  uint64_t Load() const;
  /// \brief Waits until the counter reaches `target`; Timeout after `timeout_ms` (< 0 = forever).
  Status WaitAtLeast(uint64_t target, int64_t timeout_ms) const;

 private:
  SharedCounter(int fd, uint64_t* word) : fd_(fd), word_(word) {}
  int fd_;
  uint64_t* word_;
};

/// \brief Encodes/decodes an event's target value in EventExport::ipc_handle.
std::string EncodeEventTarget(uint64_t target);
Result<uint64_t> DecodeEventTarget(const std::string& handle);

/// \brief Waits on the host until an exported event completed (the fence for emulated memory).
/// An event with no fd is already complete.
Status WaitCounterEvent(const EventExport& event, int64_t timeout_ms);

/// \brief Copies `size` bytes no faster than `bytes_per_second` (0 = plain memcpy): chunk by
/// chunk, never ahead of size / bandwidth (the emulated device's link).
void PacedCopy(void* dst, const void* src, uint64_t size, uint64_t bytes_per_second);

/// \brief Signals a new value of this process's "ready" counter and returns it as an event
/// (host/emulated memory: the host writes before the call are complete). Thread-safe.
Result<EventExport> RecordHostReadyEvent();

class HostCopyStream final : public CopyStream {
 public:
  /// \brief `paced` = apply the emulated bandwidth to copies (false: plain memcpy).
  static Result<std::unique_ptr<HostCopyStream>> Create(bool paced, const std::string& name);
  ~HostCopyStream() override;

  Status Synchronize() override;
  Status WaitEvent(const EventExport& event) override;
  Result<EventExport> RecordEvent() override;

  /// \brief Queues a copy of `size` bytes (chunked, paced when the stream is).
  void EnqueueCopy(void* dst, const void* src, uint64_t size);
  /// \brief Queues arbitrary host work (e.g. XOR) in stream order.
  void EnqueueWork(std::function<Status()> work);

 private:
  HostCopyStream(bool paced, std::shared_ptr<SharedCounter> done);
  void Run(const std::string& name);

  const bool paced_;
  std::shared_ptr<SharedCounter> done_;  // completion counter exported by RecordEvent
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> queue_ REFT_GUARDED_BY(mu_);
  uint64_t enqueued_ REFT_GUARDED_BY(mu_) = 0;  // operations queued so far
  uint64_t finished_ REFT_GUARDED_BY(mu_) = 0;  // operations executed so far
  uint64_t recorded_ REFT_GUARDED_BY(mu_) = 0;  // last event target handed out
  Status first_error_ REFT_GUARDED_BY(mu_);
  bool stop_ REFT_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace reft::kernels
