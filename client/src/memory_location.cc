// reft::LocateMemory / BuiltMemoryLocations: which device backend of this libreft owns a
// pointer. Language bindings that get a bare device pointer (`__cuda_array_interface__`) ask
// here which memory kind to register it as.
#include "reft/client.h"
#include "reft/kernels/device.h"

namespace reft {

std::pair<MemoryLocation, int> LocateMemory(const void* ptr) {
  for (kernels::MemoryKind kind : kernels::BuiltDeviceKinds()) {
    if (kind == kernels::MemoryKind::kHost) continue;
    auto backend = kernels::GetDeviceBackend(kind);
    if (!backend.ok()) continue;
    auto device = (*backend)->Locate(ptr);
    if (device.ok()) return {static_cast<MemoryLocation>(kind), *device};
  }
  return {MemoryLocation::kHost, 0};
}

std::pair<int, int> CudaRuntimeAndDriver() {
  const kernels::CudaVersions v = kernels::GetCudaVersions();
  return {v.runtime, v.driver};
}

std::vector<MemoryLocation> BuiltMemoryLocations() {
  std::vector<MemoryLocation> out;
  for (kernels::MemoryKind kind : kernels::BuiltDeviceKinds()) {
    out.push_back(static_cast<MemoryLocation>(kind));
  }
  return out;
}

}  // namespace reft
