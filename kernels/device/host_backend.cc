// Host memory: trainers copy CPU buffers into their slot themselves (the staged path), so the
// daemon never imports host memory. The backend exists so every kind answers the same API.
#include <cstring>

#include "backends.h"
#include "copy_engine.h"

namespace reft::kernels {
namespace {

Status Staged() {
  return Status::Unsupported("host memory is not exported: it is copied by the trainer (staged)");
}

class HostBackend final : public DeviceBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }
  int DeviceCount() const override { return 1; }
  Result<MemoryExport> Export(const void*, uint64_t) override { return Staged(); }
  Result<int> Locate(const void*) override {
    return Status::Unsupported("host memory belongs to no device");
  }
  Status CopyLocalToHost(int, const void* src, void* dst, uint64_t size,
                         const EventExport&) override {
    std::memcpy(dst, src, size);
    return Status::OK();
  }
  Status CopyHostToLocal(int, const void* src, void* dst, uint64_t size, void*) override {
    std::memcpy(dst, src, size);
    return Status::OK();
  }
  Result<std::shared_ptr<ImportedMemory>> Import(const MemoryExport&) override { return Staged(); }
  Result<std::unique_ptr<CopyStream>> CreateStream(int) override { return Staged(); }
  Result<EventExport> RecordReadyEvent(int, void*) override { return RecordHostReadyEvent(); }
  Status WaitEventOnHost(const EventExport& event, int64_t timeout_ms) override {
    return WaitCounterEvent(event, timeout_ms);
  }
  Status PinHost(void*, uint64_t) override { return Status::OK(); }
  Status UnpinHost(void*) override { return Status::OK(); }
  Status CopyToHostAsync(const ImportedMemory&, uint64_t, void*, uint64_t, CopyStream&) override {
    return Staged();
  }
  Status CopyToDeviceAsync(const void*, const ImportedMemory&, uint64_t, uint64_t,
                           CopyStream&) override {
    return Staged();
  }
  Status XorToHostAsync(const ImportedMemory* const*, const uint64_t*, size_t, void*, uint64_t,
                        CopyStream&) override {
    return Status::Unsupported("host memory has no device XOR; use kernels::XorReduce");
  }
};

}  // namespace

DeviceBackend* HostDeviceBackend() {
  static HostBackend backend;
  return &backend;
}

}  // namespace reft::kernels
