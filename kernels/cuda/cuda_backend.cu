// CUDA backend: the shared GPU implementation (kernels/common/gpu_backend_impl.inc) on the CUDA
// runtime. The driver API (range start, IPC capability) is reached through
// cudaGetDriverEntryPointByVersion instead of linking libcuda, so binaries still start on a
// machine without the driver (DeviceCount() is then 0).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "reft/kernels/device.h"

#define GPU(name) cuda##name
#define REFT_GPU_KIND ::reft::kernels::MemoryKind::kCuda
#define REFT_GPU_SM_COUNT_ATTR cudaDevAttrMultiProcessorCount
#define REFT_GPU_NAME "CUDA"

namespace reft::kernels {
CudaVersions GetCudaVersions() {
  CudaVersions v;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;  // 0 also: no driver
  (void)cudaGetLastError();
  return v;
}

namespace {

using PointerGetAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

// The device holding `ptr`; Unsupported when it is not CUDA device memory (or no driver).
Status QueryDevice(const void* ptr, int* device) {
  cudaPointerAttributes attrs{};
  if (cudaPointerGetAttributes(&attrs, ptr) != cudaSuccess || attrs.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return Status::Unsupported("pointer is not CUDA device memory");
  }
  *device = attrs.device;
  return Status::OK();
}

// Allocation base, size and legacy-IPC capability of the allocation holding `ptr`.
// IS_LEGACY_CUDA_IPC_CAPABLE is 0 for VMM memory (cuMemCreate, PyTorch expandable segments).
Status QueryAllocation(const void* ptr, int* device, uintptr_t* base, size_t* size,
                       bool* ipc_capable) {
  REFT_RETURN_NOT_OK(QueryDevice(ptr, device));
  static PointerGetAttributeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PointerGetAttributeFn>(f);
  }();
  if (!fn)
    return Status::Unsupported("CUDA driver entry point cuPointerGetAttribute not available");
  const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr start = 0;
  size_t range = 0;
  int capable = 0;
  if (fn(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) != CUDA_SUCCESS ||
      fn(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS) {
    return Status::InvalidArgument("cuPointerGetAttribute(RANGE_START/SIZE) failed for the buffer");
  }
  if (fn(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p) != CUDA_SUCCESS) capable = 0;
  *base = static_cast<uintptr_t>(start);
  *size = range;
  *ipc_capable = capable != 0;
  return Status::OK();
}

}  // namespace
}  // namespace reft::kernels

#include "../common/gpu_backend_impl.inc"

namespace reft::kernels {

DeviceBackend* CudaDeviceBackend() {
  static GpuBackend backend;
  return &backend;
}

}  // namespace reft::kernels
