// reft_bench_kernels: JSON lines, ratios against the reference measured in the same run.
//  1. emulated-device copy (import + copy engine, bandwidth 0 = unlimited) vs single-thread
//     memcpy of the same bytes into the same destination;
//  2. (GPU only) device->host through the IPC pull vs cudaMemcpy into pinned and pageable
//     memory, 1-8 streams; device XOR (kernel + D2H of the parity) vs D2H of the same bytes.
// Usage: reft_bench_kernels [--size BYTES] [--reps N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reft/kernels/device.h"
#include "reft/kernels/emulated.h"
#include "reft/units.h"

using namespace reft::kernels;

namespace reft::kernels::bench {
int RunGpuXorBench(uint64_t size, int reps, const char* self);
int RunDeviceToHostBench(uint64_t size, int reps, const char* self);
int GpuExportChild(int sock, uint64_t size);
}  // namespace reft::kernels::bench

namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

template <typename F>
double BestOf(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, Seconds(std::chrono::steady_clock::now() - t0));
  }
  return best;
}

int EmulatedCopyBench(uint64_t size, int reps) {
  SetEmulatedCopyBandwidth(0);
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  auto alloc = EmulatedAllocation::Create(size);
  if (!alloc.ok()) {
    std::fprintf(stderr, "%s\n", alloc.status().ToString().c_str());
    return 1;
  }
  std::memset((*alloc)->data(), 0x3C, size);
  auto mem = b->Import(*b->Export((*alloc)->data(), size));
  auto stream = b->CreateStream(0);
  if (!mem.ok() || !stream.ok()) return 1;
  std::vector<uint8_t> dst(size);
  std::memset(dst.data(), 1, size);  // fault the destination in before timing either side
  double t_memcpy = 0, t_emulated = 0;
  // Interleave so both see the same machine state (2 shared cores).
  for (int i = 0; i < reps; ++i) {
    double m = BestOf(1, [&] { std::memcpy(dst.data(), (*alloc)->data(), size); });
    double e = BestOf(1, [&] {
      (void)b->CopyToHostAsync(**mem, 0, dst.data(), size, **stream);
      (void)(*stream)->Synchronize();
    });
    t_memcpy = i == 0 ? m : std::min(t_memcpy, m);
    t_emulated = i == 0 ? e : std::min(t_emulated, e);
  }
  std::printf(
      "{\"bench\":\"emulated_copy_unlimited\",\"bytes\":%llu,\"reps\":%d,\"memcpy_gbps\":%.3f,"
      "\"emulated_gbps\":%.3f,\"ratio_vs_memcpy\":%.3f}\n",
      static_cast<unsigned long long>(size), reps, size / t_memcpy / 1e9, size / t_emulated / 1e9,
      t_memcpy / t_emulated);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--export-child") {
#ifdef REFT_BENCH_CUDA
    return reft::kernels::bench::GpuExportChild(std::stoi(argv[2]), std::stoull(argv[3]));
#else
    return 2;
#endif
  }
  uint64_t size = 256ull << 20;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      auto parsed = reft::ParseByteSize(argv[++i]);
      if (!parsed.ok()) {
        std::fprintf(stderr, "--size: %s\n", parsed.status().ToString().c_str());
        return 2;
      }
      size = *parsed;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--size BYTES] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  int rc = EmulatedCopyBench(size, reps);
#ifdef REFT_BENCH_CUDA
  rc |= reft::kernels::bench::RunDeviceToHostBench(size, reps, argv[0]);
  rc |= reft::kernels::bench::RunGpuXorBench(size, reps, argv[0]);
#else
  std::printf("{\"bench\":\"device_to_host\",\"skipped\":\"built without CUDA\"}\n");
  std::printf("{\"bench\":\"device_xor_vs_d2h\",\"skipped\":\"built without CUDA\"}\n");
#endif
  return rc;
}
