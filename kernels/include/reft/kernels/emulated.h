#pragma once
/// \file emulated.h
/// \brief The emulated device: host memory in memfds that behaves like GPU memory for the IPC
/// pull path (export as an fd, import by mmap, copies through a copy engine that enforces a
/// configurable bandwidth), so every line of the pull path, fences and scheduler runs in CI.
/// Export/Import/copies/fences go through GetDeviceBackend(MemoryKind::kEmulated) (device.h);
/// each CopyStream is one named worker thread ("reft-emu-copy") executing its queue in order.

#include <cstdint>
#include <memory>

#include "reft/result.h"

namespace reft::kernels {

/// \brief A block of emulated device memory owned by the trainer (memfd + mapping).
class EmulatedAllocation {
 public:
  /// \brief Allocates `size` bytes (zeroed) as a sealed-size memfd mapped read-write.
  /// `exportable` = false makes Export() refuse it the way CUDA refuses VMM (expandable-segment)
  /// memory, so the client's staged fallback for device memory runs in CI.
  static Result<std::unique_ptr<EmulatedAllocation>> Create(uint64_t size, bool exportable = true);
  ~EmulatedAllocation();
  void* data() const;
  uint64_t size() const;
  int fd() const;

 private:
  EmulatedAllocation() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// \brief Sets the emulated copy engine's bandwidth in bytes/s for this process (0 = unlimited,
/// i.e. plain memcpy). Also read from env REFT_EMULATED_BANDWIDTH (e.g. "8G").
void SetEmulatedCopyBandwidth(uint64_t bytes_per_second);
uint64_t EmulatedCopyBandwidth();

}  // namespace reft::kernels
