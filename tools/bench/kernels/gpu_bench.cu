// GPU figures through reft's real IPC pull path: a child process exports cudaMalloc memory (as
// a trainer does), this process imports it (as reftd does).
//  B1 device_to_host: the IPC pull into pinned shared memory (a memfd pinned by the backend,
//     like a reftd slot) vs cudaMemcpyAsync of a local buffer into cudaMallocHost memory (the
//     pinned peak) and into pageable memory, 1, 2, 4 and 8 streams, same run.
//  B2 device_xor_vs_d2h: reft's XOR kernel over 4 inputs (timed alone with CUDA events, the
//     launch reft uses) and the whole device-parity path (kernel, then D2H of the parity) vs D2H
//     of the same input bytes.
// Each prints one JSON line; "skipped" without a device.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipc_test_util.h"
#include "reft/kernels/device.h"
#include "reft/mapped_memfd.h"
#include "xor_kernel_body.h"

namespace reft::kernels::bench {

namespace {

constexpr int kSources = 4;
constexpr int kStreamCounts[] = {1, 2, 4, 8};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of `reps` timed runs after one warm-up run.
double BestOf(int reps, const std::function<void()>& run) {
  double best = 1e30;
  for (int i = 0; i < reps + 1; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    if (i > 0) best = std::min(best, Seconds(t0));
  }
  return best;
}

// A child process that owns `size` bytes of device memory and exports them over `sock` until
// this process says bye: the trainer's side of the IPC path.
class ExportingChild {
 public:
  static std::unique_ptr<ExportingChild> Start(const char* self, uint64_t size) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return nullptr;
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
      std::string fd = std::to_string(sv[1]), s = std::to_string(size);
      execl("/proc/self/exe", self, "--export-child", fd.c_str(), s.c_str(), nullptr);
      _exit(127);
    }
    close(sv[1]);
    std::unique_ptr<ExportingChild> c(new ExportingChild(sv[0], pid));
    if (!testing::RecvExport(sv[0], &c->exported_)) return nullptr;
    return c;
  }
  ~ExportingChild() {
    testing::SendWithFd(sock_, "bye", -1);
    int ws = 0;
    waitpid(pid_, &ws, 0);
    close(sock_);
  }
  const MemoryExport& exported() const { return exported_; }

 private:
  ExportingChild(int sock, pid_t pid) : sock_(sock), pid_(pid) {}
  int sock_;
  pid_t pid_;
  MemoryExport exported_;
};

bool HaveDevice(const char* bench, DeviceBackend* b) {
  if (b->DeviceCount() > 0) return true;
  std::printf("{\"bench\":\"%s\",\"skipped\":\"no CUDA device\"}\n", bench);
  return false;
}

std::string DeviceName() {
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  return prop.name;
}

// Copies [0, size) of `run_part(i, offset, len, stream_index)` split over `streams` parts.
void SplitOver(int streams, uint64_t size, const std::function<void(uint64_t, uint64_t, int)>& part) {
  const uint64_t per = (size / streams + 4095) & ~uint64_t{4095};
  for (int i = 0; i < streams; ++i) {
    const uint64_t off = per * i;
    if (off >= size) break;
    part(off, std::min(per, size - off), i);
  }
}

}  // namespace

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

int RunDeviceToHostBench(uint64_t size, int reps, const char* self) {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  if (!HaveDevice("device_to_host", b)) return 0;
  auto child = ExportingChild::Start(self, size);
  if (!child) return 1;
  auto mem = b->Import(child->exported());
  auto slot = MappedMemfd::Create("b1-slot", size);  // a reftd slot: shared memory, pinned
  if (!mem.ok() || !slot.ok() || !b->PinHost(slot->data(), size).ok()) return 1;
  std::vector<std::unique_ptr<CopyStream>> reft_streams;
  std::vector<cudaStream_t> raw_streams(8);
  for (auto& s : raw_streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int i = 0; i < 8; ++i) {
    auto s = b->CreateStream(child->exported().device);
    if (!s.ok()) return 1;
    reft_streams.push_back(std::move(*s));
  }
  void* local = nullptr;
  void* pinned = nullptr;
  if (cudaMalloc(&local, size) != cudaSuccess || cudaMallocHost(&pinned, size) != cudaSuccess) return 1;
  std::vector<uint8_t> pageable(size);
  std::memset(pageable.data(), 0, size);  // fault the pages in before timing
  cudaMemset(local, 0x5A, size);
  cudaDeviceSynchronize();
  const std::string device = DeviceName();
  int rc = 0;
  for (int streams : kStreamCounts) {
    const double t_ipc = BestOf(reps, [&] {
      SplitOver(streams, size, [&](uint64_t off, uint64_t len, int i) {
        if (!b->CopyToHostAsync(**mem, off, slot->data() + off, len, *reft_streams[i]).ok()) rc = 1;
      });
      for (int i = 0; i < streams; ++i) (void)reft_streams[i]->Synchronize();
    });
    auto raw = [&](uint8_t* dst) {
      return BestOf(reps, [&] {
        SplitOver(streams, size, [&](uint64_t off, uint64_t len, int i) {
          cudaMemcpyAsync(dst + off, static_cast<uint8_t*>(local) + off, len,
                          cudaMemcpyDeviceToHost, raw_streams[i]);
        });
        for (int i = 0; i < streams; ++i) cudaStreamSynchronize(raw_streams[i]);
      });
    };
    const double t_pinned = raw(static_cast<uint8_t*>(pinned));
    const double t_pageable = raw(pageable.data());
    const bool ok = std::memcmp(slot->data(), pageable.data(), 4096) == 0 &&
                    slot->data()[size - 1] == 0x5A;
    std::printf(
        "{\"bench\":\"device_to_host\",\"device\":\"%s\",\"bytes\":%llu,\"streams\":%d,"
        "\"ipc_pull_pinned_shm_gbps\":%.2f,\"cudamemcpy_pinned_gbps\":%.2f,"
        "\"cudamemcpy_pageable_gbps\":%.2f,\"ratio_ipc_vs_pinned\":%.3f,\"bytes_match\":%s}\n",
        device.c_str(), static_cast<unsigned long long>(size), streams, size / t_ipc / 1e9,
        size / t_pinned / 1e9, size / t_pageable / 1e9, t_pinned / t_ipc, ok ? "true" : "false");
    if (!ok) rc = 1;
  }
  (void)b->UnpinHost(slot->data());
  cudaFreeHost(pinned);
  cudaFree(local);
  for (auto s : raw_streams) cudaStreamDestroy(s);
  return rc;
}

int RunGpuXorBench(uint64_t size, int reps, const char* self) {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  if (!HaveDevice("device_xor_vs_d2h", b)) return 0;
  size -= size % kSources;
  auto child = ExportingChild::Start(self, size);
  if (!child) return 1;
  auto mem = b->Import(child->exported());
  auto stream = b->CreateStream(child->exported().device);
  if (!mem.ok() || !stream.ok()) return 1;
  std::vector<uint8_t> host(size);
  (void)b->PinHost(host.data(), size);
  const uint64_t part = size / kSources;
  std::vector<const ImportedMemory*> srcs(kSources, mem->get());
  std::vector<uint64_t> offs;
  for (int i = 0; i < kSources; ++i) offs.push_back(i * part);
  const double t_d2h = BestOf(reps, [&] {
    (void)b->CopyToHostAsync(**mem, 0, host.data(), size, **stream);
    (void)(*stream)->Synchronize();
  });
  const double t_xor = BestOf(reps, [&] {  // the warm-up run allocates the kernel's scratch
    (void)b->XorToHostAsync(srcs.data(), offs.data(), kSources, host.data(), part, **stream);
    (void)(*stream)->Synchronize();
  });
  // 4 equal inputs of 0x5A XOR to zero: the parity is checked, not only timed.
  const bool ok = std::all_of(host.begin(), host.begin() + part, [](uint8_t v) { return v == 0; });
  // The kernel alone, launched as XorToHostAsync launches it, on the imported memory.
  gpu::XorArgs args{};
  args.nsrc = kSources;
  for (int i = 0; i < kSources; ++i) args.src[i] = static_cast<const uint8_t*>((*mem)->data()) + offs[i];
  args.size = part;
  void* scratch = nullptr;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best_ms = 1e30f;
  if (cudaMalloc(&scratch, part) == cudaSuccess) {
    args.dst = static_cast<uint8_t*>(scratch);
    for (int i = 0; i < reps + 1; ++i) {
      cudaEventRecord(e0);
      gpu::XorKernel<<<gpu::XorBlocks(part, sms), gpu::kXorThreads>>>(args);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i > 0) best_ms = std::min(best_ms, ms);
    }
    cudaFree(scratch);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double t_kernel = best_ms / 1e3;
  (void)b->UnpinHost(host.data());
  std::printf(
      "{\"bench\":\"device_xor_vs_d2h\",\"device\":\"%s\",\"input_bytes\":%llu,\"sources\":%d,"
      "\"d2h_gbps\":%.3f,\"xor_kernel_input_gbps\":%.1f,\"ratio_kernel_vs_d2h\":%.2f,"
      "\"xor_then_d2h_input_gbps\":%.3f,\"ratio_xor_then_d2h_vs_d2h\":%.3f,\"parity_correct\":%s}\n",
      DeviceName().c_str(), static_cast<unsigned long long>(size), kSources, size / t_d2h / 1e9,
      size / t_kernel / 1e9, t_d2h / t_kernel, size / t_xor / 1e9, t_d2h / t_xor,
      ok ? "true" : "false");
  return ok ? 0 : 1;
}

}  // namespace reft::kernels::bench
