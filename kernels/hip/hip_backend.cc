// HIP backend: the shared GPU implementation (kernels/common/gpu_backend_impl.inc) on the HIP
// runtime. Compiled by hipcc as an external tool (kernels/CMakeLists.txt).
#include <hip/hip_runtime.h>

#include <cstdint>

#include "reft/kernels/device.h"

#define GPU(name) hip##name
#define REFT_GPU_KIND ::reft::kernels::MemoryKind::kHip
#define REFT_GPU_SM_COUNT_ATTR hipDeviceAttributeMultiprocessorCount
#define REFT_GPU_NAME "HIP"

namespace reft::kernels {
namespace {

// The device holding `ptr`; Unsupported when it is not HIP device memory (or no driver).
Status QueryDevice(const void* ptr, int* device) {
  hipPointerAttribute_t attrs{};
  if (hipPointerGetAttributes(&attrs, ptr) != hipSuccess ||
      attrs.memoryType != hipMemoryTypeDevice) {
    (void)hipGetLastError();
    return Status::Unsupported("pointer is not HIP device memory");
  }
  *device = attrs.device;
  return Status::OK();
}

// Allocation base, size and legacy-IPC capability of the allocation holding `ptr`
// (0 for VMM memory from hipMemCreate, which needs hipMemExportToShareableHandle instead).
Status QueryAllocation(const void* ptr, int* device, uintptr_t* base, size_t* size,
                       bool* ipc_capable) {
  REFT_RETURN_NOT_OK(QueryDevice(ptr, device));
  hipDeviceptr_t start = nullptr;
  size_t range = 0;
  if (hipMemGetAddressRange(&start, &range, const_cast<void*>(ptr)) != hipSuccess) {
    (void)hipGetLastError();
    return Status::InvalidArgument("hipMemGetAddressRange failed for the buffer");
  }
  int capable = 1;
  if (hipPointerGetAttribute(&capable, HIP_POINTER_ATTRIBUTE_IS_LEGACY_HIP_IPC_CAPABLE,
                             reinterpret_cast<hipDeviceptr_t>(const_cast<void*>(ptr))) !=
      hipSuccess) {
    (void)hipGetLastError();
    capable = 1;  // older runtimes lack the attribute; IpcGetMemHandle then reports the error
  }
  *base = reinterpret_cast<uintptr_t>(start);
  *size = range;
  *ipc_capable = capable != 0;
  return Status::OK();
}

}  // namespace
}  // namespace reft::kernels

#include "../common/gpu_backend_impl.inc"

namespace reft::kernels {

DeviceBackend* HipDeviceBackend() {
  static GpuBackend backend;
  return &backend;
}

}  // namespace reft::kernels
