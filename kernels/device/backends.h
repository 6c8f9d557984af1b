#pragma once
/// \file backends.h
/// \brief Internal: the factories registry.cc calls. Explicit calls, no static
/// self-registration (the linker drops unreferenced objects from static archives).

#include "reft/kernels/device.h"

namespace reft::kernels {

DeviceBackend* HostDeviceBackend();
DeviceBackend* EmulatedDeviceBackend();
#ifdef REFT_HAVE_CUDA
DeviceBackend* CudaDeviceBackend();
#endif
#ifdef REFT_HAVE_HIP
DeviceBackend* HipDeviceBackend();
#endif

}  // namespace reft::kernels
