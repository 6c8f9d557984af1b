#include "device_staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

namespace reft::client {

Result<std::unique_ptr<StagingBuffer>> StagingBuffer::Create(kernels::DeviceBackend* backend,
                                                             int device, void* device_ptr,
                                                             uint64_t size) {
  std::unique_ptr<StagingBuffer> b(new StagingBuffer());
  b->backend_ = backend;
  b->device_ = device;
  b->device_ptr_ = device_ptr;
  b->size_ = size;
  b->mapped_ = std::max<uint64_t>(size, 1);
  // Anonymous mmap: page-aligned (what page-locking wants) and untouched pages cost nothing
  // until the first copy.
  void* p = ::mmap(nullptr, b->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a staging buffer");
  b->host_ = static_cast<uint8_t*>(p);
  Status pinned = backend->PinHost(b->host_, b->mapped_);
  if (!pinned.ok()) return pinned.WithContext("page-locking a staging buffer");
  b->pinned_ = true;
  return b;
}

StagingBuffer::~StagingBuffer() {
  if (host_ == nullptr) return;
  if (pinned_) (void)backend_->UnpinHost(host_);
  ::munmap(host_, mapped_);
}

Status StagingBuffer::Pull(const kernels::EventExport& ready) {
  return backend_->CopyLocalToHost(device_, device_ptr_, host_, size_, ready);
}

Status StagingBuffer::Push(void* native_stream) {
  return backend_->CopyHostToLocal(device_, host_, device_ptr_, size_, native_stream);
}

Status WaitHostCopyGate(const uint64_t* word, uint64_t value, int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::microseconds(2);
  // Polling: the writer is a DMA engine, which signals nothing a futex could wait on.
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout("the device copy into staged host buffers did not complete within " +
                             std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
  return Status::OK();
}

}  // namespace reft::client
