// Device XOR (AEC parity on the GPU, then D2H of the parity) vs D2H of the same input bytes,
// through the real IPC pull path: a child process exports cudaMalloc memory, this process
// imports it (issue 7, B2). Prints skipped without a device.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ipc_test_util.h"
#include "reft/kernels/device.h"

namespace reft::kernels::bench {

constexpr int kSources = 4;

int GpuExportChild(int sock, uint64_t size) {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  void* dev = nullptr;
  if (cudaMalloc(&dev, size) != cudaSuccess || cudaMemset(dev, 0x5A, size) != cudaSuccess) return 3;
  if (cudaDeviceSynchronize() != cudaSuccess) return 3;
  auto ex = b->Export(dev, size);
  if (!ex.ok() || !testing::SendExport(sock, *ex)) return 4;
  std::string bye;
  int fd;
  testing::RecvWithFd(sock, &bye, &fd);
  cudaFree(dev);
  return 0;
}

int RunGpuXorBench(uint64_t size, int reps, const char* self) {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  if (b->DeviceCount() == 0) {
    std::printf("{\"bench\":\"device_xor_vs_d2h\",\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  size -= size % kSources;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return 1;
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  pid_t pid = fork();
  if (pid == 0) {
    std::string fd = std::to_string(sv[1]), s = std::to_string(size);
    execl("/proc/self/exe", self, "--export-child", fd.c_str(), s.c_str(), nullptr);
    _exit(127);
  }
  close(sv[1]);
  MemoryExport ex;
  if (!testing::RecvExport(sv[0], &ex)) return 1;
  int rc = 1;
  {
    auto mem = b->Import(ex);
    auto stream = b->CreateStream(ex.device);
    if (mem.ok() && stream.ok()) {
      std::vector<uint8_t> host(size);
      (void)b->PinHost(host.data(), size);
      const uint64_t part = size / kSources;
      std::vector<const ImportedMemory*> srcs(kSources, mem->get());
      std::vector<uint64_t> offs;
      for (int i = 0; i < kSources; ++i) offs.push_back(i * part);
      auto time_it = [&](auto&& enqueue) {
        double best = 1e30;
        for (int i = 0; i < reps + 1; ++i) {  // first run warms up (scratch allocation)
          auto t0 = std::chrono::steady_clock::now();
          enqueue();
          (void)(*stream)->Synchronize();
          double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (i > 0) best = std::min(best, t);
        }
        return best;
      };
      double t_d2h =
          time_it([&] { (void)b->CopyToHostAsync(**mem, 0, host.data(), size, **stream); });
      double t_xor = time_it([&] {
        (void)b->XorToHostAsync(srcs.data(), offs.data(), kSources, host.data(), part, **stream);
      });
      (void)b->UnpinHost(host.data());
      std::printf(
          "{\"bench\":\"device_xor_vs_d2h\",\"device\":\"%s\",\"input_bytes\":%llu,\"sources\":%d,"
          "\"d2h_gbps\":%.3f,\"xor_then_d2h_input_gbps\":%.3f,\"ratio_xor_vs_d2h\":%.3f}\n",
          prop.name, static_cast<unsigned long long>(size), kSources, size / t_d2h / 1e9,
          size / t_xor / 1e9, t_d2h / t_xor);
      rc = 0;
    }
  }
  testing::SendWithFd(sv[0], "bye", -1);
  int ws = 0;
  waitpid(pid, &ws, 0);
  close(sv[0]);
  return rc;
}

}  // namespace reft::kernels::bench
