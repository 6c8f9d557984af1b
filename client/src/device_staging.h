#pragma once
/// \file device_staging.h
/// \brief The staged fallback for device memory reftd cannot pull (the backend's Export()
/// refuses it: VMM / expandable segments, stream-ordered pools): the trainer's copy worker
/// copies it device->host into a pinned host buffer of its own, which then takes the host
/// path (protection encoding, slot copy) like any CPU buffer; restore goes the other way.
/// Also the host-copy gate: a word in host memory that a device copy libreft does not see
/// (torch's, for a build without the backend) writes when the bytes have landed.

#include <cstdint>
#include <memory>

#include "reft/kernels/device.h"
#include "reft/result.h"

namespace reft::client {

class StagingBuffer {
 public:
  /// \brief A page-aligned host buffer of `size` bytes, pinned through `backend` (a no-op for
  /// emulated memory), for the device memory at `device_ptr` on `device`.
  static Result<std::unique_ptr<StagingBuffer>> Create(kernels::DeviceBackend* backend,
                                                       int device, void* device_ptr,
                                                       uint64_t size);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  uint8_t* host() const { return host_; }
  /// \brief Device -> host, after `ready` (this snapshot's ready event for the device); blocks.
  Status Pull(const kernels::EventExport& ready);
  /// \brief Host -> device, queued on `native_stream` after the work there; blocks.
  Status Push(void* native_stream);

 private:
  StagingBuffer() = default;
  kernels::DeviceBackend* backend_ = nullptr;
  int device_ = 0;
  void* device_ptr_ = nullptr;
  uint8_t* host_ = nullptr;
  uint64_t size_ = 0;
  uint64_t mapped_ = 0;
  bool pinned_ = false;
};

/// \brief Blocks until `*word >= value` (an acquire load: the bytes written before the word are
/// visible); Timeout after `timeout_ms`. The word is written by a device copy the caller queued
/// behind the copies into staged host buffers.
Status WaitHostCopyGate(const uint64_t* word, uint64_t value, int64_t timeout_ms);

}  // namespace reft::client
