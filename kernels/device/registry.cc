#include "backends.h"

namespace reft::kernels {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kEmulated:
      return "emulated";
    case MemoryKind::kCuda:
      return "cuda";
    case MemoryKind::kHip:
      return "hip";
  }
  return "unknown";
}

Result<DeviceBackend*> GetDeviceBackend(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return HostDeviceBackend();
    case MemoryKind::kEmulated:
      return EmulatedDeviceBackend();
    case MemoryKind::kCuda:
#ifdef REFT_HAVE_CUDA
      return CudaDeviceBackend();
#else
      break;
#endif
    case MemoryKind::kHip:
#ifdef REFT_HAVE_HIP
      return HipDeviceBackend();
#else
      break;
#endif
  }
  return Status::Unsupported(std::string("memory kind '") + MemoryKindName(kind) +
                             "' is not built into this binary");
}

#ifndef REFT_HAVE_CUDA
CudaVersions GetCudaVersions() { return {}; }
#endif

std::vector<MemoryKind> BuiltDeviceKinds() {
  std::vector<MemoryKind> kinds = {MemoryKind::kHost, MemoryKind::kEmulated};
#ifdef REFT_HAVE_CUDA
  kinds.push_back(MemoryKind::kCuda);
#endif
#ifdef REFT_HAVE_HIP
  kinds.push_back(MemoryKind::kHip);
#endif
  return kinds;
}

}  // namespace reft::kernels
