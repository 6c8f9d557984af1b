#pragma once
/// \file gpu_compat.h
/// \brief The few names the shared device-kernel bodies need, mapped to CUDA or HIP, so one
/// kernel body (xor_kernel_body.h) compiles under nvcc and hipcc.
#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#define REFT_GPU_GLOBAL __global__
#define REFT_GPU_DEVICE __device__ __forceinline__
#else
#include <cuda_runtime.h>
#define REFT_GPU_GLOBAL __global__
#define REFT_GPU_DEVICE __device__ __forceinline__
#endif
