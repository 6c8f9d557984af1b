#pragma once
/// \file xor_kernel_body.h
/// \brief The device XOR kernel shared by the CUDA and HIP backends: dst = src[0] ^ ... ^ src[n-1].
/// Sources may be mutually misaligned (IPC buffers start at arbitrary offsets), so the kernel
/// takes 16-byte vector loads only when every pointer is 16-byte aligned, else byte loads.

#include <cstdint>

#include "gpu_compat.h"

namespace reft::kernels::gpu {

/// Upper bound of sources per launch; the host side splits larger reductions.
constexpr int kMaxXorSources = 16;

struct XorArgs {
  const uint8_t* src[kMaxXorSources];
  int nsrc;
  uint8_t* dst;
  uint64_t size;
  bool accumulate;  ///< dst ^= ... (second and later launches of a split reduction)
};

/// Threads per block and blocks for `size` bytes on a device with `sms` multiprocessors (0 =
/// unknown: 80 assumed): one 16-byte vector per thread, at most 8 blocks per multiprocessor
/// (the loop strides the rest).
constexpr unsigned kXorThreads = 256;
inline unsigned XorBlocks(uint64_t size, int sms) {
  const uint64_t want = (size / 16 + kXorThreads - 1) / kXorThreads;
  const uint64_t cap = 8ull * static_cast<uint64_t>(sms > 0 ? sms : 80);
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}

// Internal linkage: the CUDA and HIP objects each define their own copy in one binary.
namespace {

REFT_GPU_GLOBAL void XorKernel(XorArgs args) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool aligned = (reinterpret_cast<uintptr_t>(args.dst) & 15) == 0;
  for (int s = 0; s < args.nsrc; ++s)
    aligned &= (reinterpret_cast<uintptr_t>(args.src[s]) & 15) == 0;
  uint64_t head = 0;
  if (aligned) {
    const uint64_t nvec = args.size / 16;
    for (uint64_t i = tid; i < nvec; i += stride) {
      uint4 acc =
          args.accumulate ? reinterpret_cast<const uint4*>(args.dst)[i] : make_uint4(0, 0, 0, 0);
      for (int s = 0; s < args.nsrc; ++s) {
        const uint4 v = reinterpret_cast<const uint4*>(args.src[s])[i];
        acc.x ^= v.x;
        acc.y ^= v.y;
        acc.z ^= v.z;
        acc.w ^= v.w;
      }
      reinterpret_cast<uint4*>(args.dst)[i] = acc;
    }
    head = nvec * 16;
  }
  for (uint64_t i = head + tid; i < args.size; i += stride) {
    uint8_t acc = args.accumulate ? args.dst[i] : 0;
    for (int s = 0; s < args.nsrc; ++s) acc ^= args.src[s][i];
    args.dst[i] = acc;
  }
}

}  // namespace
}  // namespace reft::kernels::gpu
