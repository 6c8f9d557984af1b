#pragma once
/// \file device.h
/// \brief Device memory as the daemon and the client see it: export on the trainer side,
/// import + copy on the daemon side, with one implementation per memory kind (host, emulated,
/// CUDA, HIP). No vendor header is visible here; CUDA/HIP live in kernels/cuda, kernels/hip.
///
/// Save path (docs/data-paths.md "Save", IPC pull): the trainer Export()s each registered buffer once and
/// sends the MemoryExport to its daemon; the daemon Import()s it once (cached by the caller,
/// keyed by exporter pid + allocation_id) and copies device->host into its pinned slot with
/// CopyToHostAsync on its own stream.
///
/// Fence protocol (every kind, same calls):
///   trainer, in snapshot():  ready = backend->RecordReadyEvent(device, current_stream);
///                            send `ready` (fd, if >= 0, with SCM_RIGHTS) with the request
///   daemon:                  stream->WaitEvent(ready); CopyToHostAsync(...) per buffer;
///                            done = stream->RecordEvent(); send `done` back (fd likewise)
///   trainer, before writing the buffers again:  backend->WaitEventOnHost(done, timeout_ms)
/// Emulated/host events are a 64-bit counter in a small memfd (fd + 8-byte target), CUDA/HIP
/// events are interprocess events (fd = -1, ipc_handle = device + event handle). A received
/// fd is owned by the receiver (WaitEvent/WaitEventOnHost dup what they keep), so close it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/result.h"

namespace reft::kernels {

enum class MemoryKind : uint32_t {
  kHost = 0,      ///< ordinary CPU memory: staged path (the trainer copies into its slot)
  kEmulated = 1,  ///< memfd-backed "device" with a bandwidth-limited copy engine (CI)
  kCuda = 2,
  kHip = 3,
};

/// \brief "host", "emulated", "cuda", "hip".
const char* MemoryKindName(MemoryKind kind);

/// \brief What a trainer sends to describe one registered device buffer. Plain data, so the
/// local channel can serialise it; `fd` travels out of band with SCM_RIGHTS.
struct MemoryExport {
  MemoryKind kind = MemoryKind::kHost;
  int32_t device = 0;            ///< device ordinal (CUDA/HIP); 0 for emulated
  std::string ipc_handle;        ///< opaque handle bytes of the allocation *base* (CUDA/HIP)
  int fd = -1;                   ///< emulated: memfd of the allocation; -1 otherwise
  uint64_t allocation_id = 0;    ///< exporter-unique id of the allocation (cache key)
  uint64_t allocation_size = 0;  ///< bytes of the whole allocation the handle refers to
  uint64_t offset = 0;           ///< offset of the buffer inside the allocation
  uint64_t size = 0;             ///< bytes of the buffer
};

/// \brief What names a device the same way in every process: ordinals do not (CUDA_VISIBLE_DEVICES
/// and ROCR_VISIBLE_DEVICES renumber them per process).
struct DeviceIdentity {
  std::string uuid;        ///< e.g. "GPU-8c6e...", as nvidia-smi -L prints it
  std::string pci_bus_id;  ///< e.g. "0000:3b:00.0"
};

/// \brief An event the other process can wait on (IPC event for CUDA/HIP; a shared counter
/// for emulated). Exported as opaque bytes plus an optional fd.
struct EventExport {
  std::string ipc_handle;
  int fd = -1;
};

/// \brief Daemon-side mapping of an exported allocation. Lives as long as any copy uses it;
/// the importer closes it when the last reference goes (docs/data-paths.md "Rules for device memory": never close a mapping
/// a snapshot still reads).
class ImportedMemory {
 public:
  virtual ~ImportedMemory() = default;
  virtual MemoryKind kind() const = 0;
  /// Base of the buffer (allocation base + export offset) in the importer's address space;
  /// a device pointer for CUDA/HIP, a host pointer for emulated.
  virtual void* data() const = 0;
  virtual uint64_t size() const = 0;
};

/// \brief An ordered queue of copies (a CUDA/HIP stream, or a copy-engine queue for emulated).
class CopyStream {
 public:
  virtual ~CopyStream() = default;
  /// \brief Blocks until every copy queued so far has finished; returns the first error.
  virtual Status Synchronize() = 0;
  /// \brief Makes later copies on this stream wait until `event` (exported by the other
  /// process) has completed. A null/empty event is a no-op.
  virtual Status WaitEvent(const EventExport& event) = 0;
  /// \brief Records a completion point after everything queued so far; returns it exported
  /// so the other process can wait on it (the fence).
  virtual Result<EventExport> RecordEvent() = 0;
};

/// \brief One memory kind's implementation. Thread-safe.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual MemoryKind kind() const = 0;
  /// \brief Number of usable devices now (0 when the driver or the GPU is missing).
  virtual int DeviceCount() const = 0;
  /// \brief The stable identity of device `ordinal` of this process; Unsupported for kinds
  /// without devices (host).
  virtual Result<DeviceIdentity> Identify(int ordinal) const {
    (void)ordinal;
    return Status::Unsupported("this memory kind has no devices");
  }
  /// \brief `event` (exported by another process) with the device it belongs to renamed to
  /// this process's ordinal `device` (the exporter numbered it its own way). Unchanged for
  /// kinds whose events name no device.
  virtual EventExport ForDevice(const EventExport& event, int device) const {
    (void)device;
    return event;
  }

  // ---- exporter side (trainer process) ----
  /// \brief Describes [ptr, ptr+size) for another process: finds the allocation base (CUDA:
  /// cuMemGetAddressRange), makes its IPC handle, and the offset. Unsupported when the memory
  /// cannot be exported (e.g. VMM/expandable segments); the client then falls back to staged.
  virtual Result<MemoryExport> Export(const void* ptr, uint64_t size) = 0;
  /// \brief The device ordinal holding `ptr` when it is this kind's memory (CUDA/HIP: a pointer
  /// attribute query; emulated: the allocation registry); Unsupported otherwise. Lets a client
  /// tell which backend owns memory it was handed as a bare pointer.
  virtual Result<int> Locate(const void* ptr) = 0;
  /// \brief Staged fallback for memory Export() refuses: copies `size` bytes of this process's
  /// memory at `src` (on `device`) to host `dst` once `ready` completed (an event this process's
  /// RecordReadyEvent returned for `device`), on a stream of the backend's own, and blocks until
  /// the bytes are on the host. Never waits for work queued after `ready`.
  virtual Status CopyLocalToHost(int device, const void* src, void* dst, uint64_t size,
                                 const EventExport& ready) = 0;
  /// \brief Restore of a staged buffer: copies host `src` into this process's memory at `dst`,
  /// queued on `native_stream` (ordered after the work already there; nullptr = the legacy
  /// default stream), and blocks until it completed.
  virtual Status CopyHostToLocal(int device, const void* src, void* dst, uint64_t size,
                                 void* native_stream) = 0;

  // ---- fences (either side; docs/data-paths.md "Save") ----
  /// \brief Records a completion point after the work queued so far on `native_stream` of
  /// `device` (CUDA/HIP: a cudaStream_t/hipStream_t, nullptr = the legacy default stream; an
  /// interprocess event re-recorded each call). Emulated/host: the host writes that precede the
  /// call are complete, so the event is signalled at once. The trainer calls it in snapshot()
  /// ("ready"), sends the EventExport (fd with SCM_RIGHTS), and the daemon's stream WaitEvent()s
  /// it.
  virtual Result<EventExport> RecordReadyEvent(int device, void* native_stream) = 0;
  /// \brief Blocks the calling thread until `event` (recorded by either process) completed;
  /// Timeout after `timeout_ms` (< 0: forever). The trainer waits on the daemon's "done" event
  /// (from CopyStream::RecordEvent) before it modifies the buffers again.
  virtual Status WaitEventOnHost(const EventExport& event, int64_t timeout_ms) = 0;

  // ---- importer side (daemon) ----
  virtual Result<std::shared_ptr<ImportedMemory>> Import(const MemoryExport& exported) = 0;
  virtual Result<std::unique_ptr<CopyStream>> CreateStream(int device) = 0;
  /// \brief Page-locks host memory (a shm slot) so device copies run at full speed; a no-op
  /// for host/emulated. Idempotent per range.
  virtual Status PinHost(void* ptr, uint64_t size) = 0;
  virtual Status UnpinHost(void* ptr) = 0;
  /// \brief Queues a device->host copy of [offset, offset+size) of `src` into `dst`.
  virtual Status CopyToHostAsync(const ImportedMemory& src, uint64_t offset, void* dst,
                                 uint64_t size, CopyStream& stream) = 0;
  /// \brief Queues a host->device copy (restore).
  virtual Status CopyToDeviceAsync(const void* src, const ImportedMemory& dst, uint64_t offset,
                                   uint64_t size, CopyStream& stream) = 0;
  /// \brief dst = XOR of `nsrc` ranges of `size` bytes, all on the device, result copied to host
  /// `dst_host`. Runs the XOR kernel on the GPU before the D2H copy (AEC "in bubbles").
  /// Unsupported for kinds without a device kernel (the caller then XORs on the host).
  virtual Status XorToHostAsync(const ImportedMemory* const* srcs, const uint64_t* offsets,
                                size_t nsrc, void* dst_host, uint64_t size, CopyStream& stream) = 0;
};

/// \brief The backend for `kind`, or Unsupported when that kind was not built in.
/// Host and emulated are always present; CUDA/HIP when compiled (REFT_HAVE_CUDA/HIP).
Result<DeviceBackend*> GetDeviceBackend(MemoryKind kind);

/// \brief Kinds built into this binary.
std::vector<MemoryKind> BuiltDeviceKinds();

/// \brief CUDA versions as cudaRuntimeGetVersion/cudaDriverGetVersion report them (e.g. 13000):
/// the runtime this binary was built with and the installed driver's (0: no driver). Both 0 when
/// the CUDA backend is not built in.
struct CudaVersions {
  int runtime = 0;
  int driver = 0;
};
CudaVersions GetCudaVersions();

}  // namespace reft::kernels
