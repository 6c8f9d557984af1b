// GPU backends on a real device: a child process (fork+exec, so it gets a fresh CUDA context)
// exports cudaMalloc memory and a ready event; this process imports it, copies D2H, runs the
// XOR kernel (more sources than one launch takes, mutually misaligned), writes a marker back
// and records the done event the child waits on. Exits 77 (CTest: skipped) without a device.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ipc_test_util.h"
#include "reft/kernels/device.h"
#include "reft/kernels/xor.h"
#include "test_support.h"

using namespace reft::kernels;
using namespace reft::kernels::testing;

namespace {

constexpr uint64_t kAlloc = (8ull << 20) + 4096;
constexpr uint64_t kOffset = 4099;  // buffer starts inside the allocation: base + offset export
constexpr uint64_t kSize = (7ull << 20) + 5;
constexpr uint64_t kMarker = 0x5245465447505521ull;
std::string g_self;

int Child(int sock, uint64_t seed) {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  if (b->DeviceCount() == 0) return 20;
  uint8_t* dev = nullptr;
  if (cudaMalloc(&dev, kAlloc) != cudaSuccess) return 21;
  auto bytes = reft::testing::RandomBytes(kSize, seed);
  if (cudaMemcpy(dev + kOffset, bytes.data(), kSize, cudaMemcpyHostToDevice) != cudaSuccess)
    return 22;
  auto ex = b->Export(dev + kOffset, kSize);
  if (!ex.ok()) {
    std::fprintf(stderr, "child export: %s\n", ex.status().ToString().c_str());
    return 23;
  }
  if (ex->offset != kOffset || !SendExport(sock, *ex)) return 24;
  auto ready = b->RecordReadyEvent(0, nullptr);
  if (!ready.ok() || !SendEvent(sock, *ready)) return 25;
  EventExport done;
  if (!RecvEvent(sock, &done)) return 26;
  if (!b->WaitEventOnHost(done, 30000).ok()) return 27;
  uint64_t marker = 0;
  if (cudaMemcpy(&marker, dev + kOffset, sizeof(marker), cudaMemcpyDeviceToHost) != cudaSuccess)
    return 28;
  if (marker != kMarker) return 29;  // the done fence returned before the daemon's write
  // Wait for the importer to close its mapping before freeing (docs/data-paths.md "Rules for device memory").
  std::string bye;
  int fd;
  RecvWithFd(sock, &bye, &fd);
  cudaFree(dev);
  return 0;
}

pid_t SpawnChild(int sock, uint64_t seed) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string fd = std::to_string(sock), s = std::to_string(seed);
    execl(g_self.c_str(), g_self.c_str(), "--export-child", fd.c_str(), s.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

}  // namespace

TEST_CASE("CUDA IPC pull, XOR kernel and fences across processes", "[kernels][gpu][cuda]") {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  const uint64_t seed = reft::testing::TestSeed(99);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);  // child end inherited through exec
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  pid_t pid = SpawnChild(sv[1], seed);
  REQUIRE(pid > 0);
  close(sv[1]);
  MemoryExport ex;
  REQUIRE(RecvExport(sv[0], &ex));
  EventExport ready;
  REQUIRE(RecvEvent(sv[0], &ready));
  const auto want = reft::testing::RandomBytes(kSize, seed);
  {
    auto mem = b->Import(ex);
    REQUIRE(mem.ok());
    auto again = b->Import(ex);  // refcounted: same mapping
    REQUIRE(again.ok());
    CHECK((*again)->data() == (*mem)->data());
    again->reset();
    auto stream = b->CreateStream(ex.device);
    REQUIRE(stream.ok());
    REQUIRE((*stream)->WaitEvent(ready).ok());

    std::vector<uint8_t> host(kSize + 64, 0);
    REQUIRE(b->PinHost(host.data(), host.size()).ok());
    for (uint64_t size :
         std::vector<uint64_t>{0ull, 1ull, 17ull, 4097ull, (1ull << 20) + 3, kSize - 9}) {
      for (uint64_t off : std::vector<uint64_t>{0ull, 3ull, 9ull}) {
        if (off + size > kSize) continue;
        INFO("copy size=" << size << " off=" << off);
        std::fill(host.begin(), host.end(), 0xCD);
        REQUIRE(b->CopyToHostAsync(**mem, off, host.data() + 1, size, **stream).ok());
        REQUIRE((*stream)->Synchronize().ok());
        REQUIRE(std::memcmp(host.data() + 1, want.data() + off, size) == 0);
        REQUIRE(host[size + 1] == 0xCD);
      }
    }
    for (size_t nsrc : std::vector<size_t>{1, 2, 5, 16, 20}) {
      for (uint64_t size : std::vector<uint64_t>{1ull, 15ull, 4096ull, (3ull << 20) + 7}) {
        INFO("xor nsrc=" << nsrc << " size=" << size);
        std::vector<const ImportedMemory*> srcs(nsrc, mem->get());
        std::vector<uint64_t> offs;
        std::vector<const void*> ref;
        for (size_t i = 0; i < nsrc; ++i) {
          offs.push_back(i * 4099 % 65536);  // mutually misaligned
          ref.push_back(want.data() + offs.back());
        }
        std::vector<uint8_t> expect(size);
        XorReduceRef(expect.data(), ref.data(), nsrc, size);
        REQUIRE(
            b->XorToHostAsync(srcs.data(), offs.data(), nsrc, host.data(), size, **stream).ok());
        REQUIRE((*stream)->Synchronize().ok());
        REQUIRE(std::memcmp(host.data(), expect.data(), size) == 0);
      }
    }
    const uint64_t marker = kMarker;
    REQUIRE(b->CopyToDeviceAsync(&marker, **mem, 0, sizeof(marker), **stream).ok());
    auto done = (*stream)->RecordEvent();
    REQUIRE(done.ok());
    REQUIRE(SendEvent(sv[0], *done));
    REQUIRE((*stream)->Synchronize().ok());
    REQUIRE(b->UnpinHost(host.data()).ok());
  }
  REQUIRE(SendWithFd(sv[0], "bye", -1));  // mapping closed: the child may free
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  close(sv[0]);
}

TEST_CASE("CUDA export of host memory is refused", "[kernels][gpu][cuda]") {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  std::vector<uint8_t> host(64);
  CHECK(b->Export(host.data(), host.size()).status().code() == reft::StatusCode::kUnsupported);
}

TEST_CASE("CUDA staged fallback: Locate, local copies after the ready event, device kept",
          "[kernels][gpu][cuda]") {
  auto* b = *GetDeviceBackend(MemoryKind::kCuda);
  const int last = b->DeviceCount() - 1;
  REQUIRE(cudaSetDevice(last) == cudaSuccess);
  uint8_t* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, kAlloc) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the trainer's current device is someone else's
  auto located = b->Locate(dev + kOffset);
  REQUIRE(located.ok());
  CHECK(*located == last);
  std::vector<uint8_t> host(64);
  CHECK(b->Locate(host.data()).status().code() == reft::StatusCode::kUnsupported);

  // Work queued on a stream before the ready event must land before the staged copy reads.
  cudaStream_t trainer;
  REQUIRE(cudaSetDevice(last) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&trainer, cudaStreamNonBlocking) == cudaSuccess);
  auto want = reft::testing::RandomBytes(kSize, 77);
  REQUIRE(cudaMemsetAsync(dev, 0, kAlloc, trainer) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(dev + kOffset, want.data(), kSize, cudaMemcpyHostToDevice, trainer) ==
          cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  auto ready = b->RecordReadyEvent(last, trainer);
  REQUIRE(ready.ok());
  std::vector<uint8_t> got(kSize);
  REQUIRE(b->CopyLocalToHost(last, dev + kOffset, got.data(), kSize, *ready).ok());
  CHECK(got == want);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);  // exporter-side calls leave the caller's current device alone

  std::reverse(got.begin(), got.end());
  REQUIRE(b->CopyHostToLocal(last, got.data(), dev + kOffset, kSize, trainer).ok());
  std::vector<uint8_t> back(kSize);
  REQUIRE(cudaMemcpy(back.data(), dev + kOffset, kSize, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == got);
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  (void)cudaStreamDestroy(trainer);
  (void)cudaFree(dev);
}

int main(int argc, char** argv) {
  g_self = "/proc/self/exe";
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) g_self.assign(path, static_cast<size_t>(n));
  if (argc == 4 && std::string(argv[1]) == "--export-child") {
    return Child(std::stoi(argv[2]), std::stoull(argv[3]));
  }
  auto backend = GetDeviceBackend(MemoryKind::kCuda);
  if (!backend.ok() || (*backend)->DeviceCount() == 0) {
    std::printf("no CUDA device: GPU tests skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
