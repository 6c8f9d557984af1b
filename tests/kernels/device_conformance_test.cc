// Conformance of the device backends built without hardware (host, emulated): copies and the
// XOR path against memcpy / XorReduceRef on random data, sizes 0..several MiB, misaligned
// offsets; plus the emulated copy engine's bandwidth pacing.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <vector>

#include "reft/kernels/device.h"
#include "reft/kernels/emulated.h"
#include "reft/kernels/xor.h"
#include "test_support.h"

using namespace reft::kernels;
using reft::testing::RandomBytes;
using reft::testing::TestSeed;

namespace {

constexpr uint64_t kAlloc = 6ull << 20;
const uint64_t kSizes[] = {
    0, 1, 3, 15, 16, 17, 63, 64, 65, 4095, 4096, 4097, (1ull << 20) + 13, (5ull << 20) + 3};
const uint64_t kOffsets[] = {0, 1, 7, 33};

std::unique_ptr<EmulatedAllocation> RandomAllocation(uint64_t seed) {
  auto alloc = EmulatedAllocation::Create(kAlloc);
  REQUIRE(alloc.ok());
  auto bytes = RandomBytes(kAlloc, seed);
  std::memcpy((*alloc)->data(), bytes.data(), kAlloc);
  return std::move(*alloc);
}

struct BandwidthGuard {
  explicit BandwidthGuard(uint64_t bw) : saved(EmulatedCopyBandwidth()) {
    SetEmulatedCopyBandwidth(bw);
  }
  ~BandwidthGuard() { SetEmulatedCopyBandwidth(saved); }
  uint64_t saved;
};

}  // namespace

TEST_CASE("every memory kind is built and named", "[kernels][device]") {
  auto kinds = BuiltDeviceKinds();
  REQUIRE(kinds.size() >= 2);
  for (MemoryKind k : kinds) {
    auto b = GetDeviceBackend(k);
    REQUIRE(b.ok());
    CHECK((*b)->kind() == k);
    CHECK(std::string(MemoryKindName(k)) != "unknown");
    CHECK((*b)->DeviceCount() >= 0);
  }
}

TEST_CASE("host memory is not exported: the staged path copies it", "[kernels][device]") {
  auto b = GetDeviceBackend(MemoryKind::kHost);
  REQUIRE(b.ok());
  std::vector<uint8_t> buf(64);
  auto ex = (*b)->Export(buf.data(), buf.size());
  REQUIRE_FALSE(ex.ok());
  CHECK(ex.status().code() == reft::StatusCode::kUnsupported);
  // Host fences still work (a trainer with host buffers uses the same API).
  auto ready = (*b)->RecordReadyEvent(0, nullptr);
  REQUIRE(ready.ok());
  CHECK((*b)->WaitEventOnHost(*ready, 1000).ok());
}

TEST_CASE("emulated export rejects foreign pointers and overruns", "[kernels][emulated]") {
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  std::vector<uint8_t> host(64);
  CHECK(b->Export(host.data(), host.size()).status().code() == reft::StatusCode::kUnsupported);
  auto alloc = RandomAllocation(1);
  CHECK_FALSE(b->Export(static_cast<uint8_t*>(alloc->data()) + 10, kAlloc).ok());
  auto ex = b->Export(static_cast<uint8_t*>(alloc->data()) + 10, kAlloc - 10);
  REQUIRE(ex.ok());
  CHECK(ex->offset == 10);
  CHECK(ex->allocation_size == kAlloc);
  MemoryExport bad = *ex;
  bad.allocation_size = kAlloc * 2;  // claims more than the memfd holds
  CHECK_FALSE(b->Import(bad).ok());
  // An unsealed memfd could shrink under the importer (SIGBUS): refused.
  int raw = memfd_create("unsealed", MFD_CLOEXEC);
  REQUIRE(raw >= 0);
  REQUIRE(ftruncate(raw, 4096) == 0);
  MemoryExport unsealed = *ex;
  unsealed.fd = raw;
  unsealed.allocation_size = 4096;
  unsealed.offset = 0;
  unsealed.size = 4096;
  CHECK(b->Import(unsealed).status().code() == reft::StatusCode::kPermissionDenied);
  close(raw);
}

TEST_CASE("unexportable emulated memory: located, refused like VMM, copied by its owner",
          "[kernels][emulated]") {
  BandwidthGuard unlimited(0);
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  auto alloc = EmulatedAllocation::Create(kAlloc, /*exportable=*/false);
  REQUIRE(alloc.ok());
  auto* base = static_cast<uint8_t*>((*alloc)->data());
  auto ex = b->Export(base + 3, 100);
  CHECK(ex.status().code() == reft::StatusCode::kUnsupported);
  CHECK(ex.status().message().find("not exportable") != std::string::npos);
  // Locate claims every byte of a live allocation, and nothing else.
  CHECK(b->Locate(base).ValueOr(-1) == 0);
  CHECK(b->Locate(base + kAlloc - 1).ValueOr(-1) == 0);
  CHECK_FALSE(b->Locate(base + kAlloc).ok());
  std::vector<uint8_t> host(64);
  CHECK_FALSE(b->Locate(host.data()).ok());
  CHECK_FALSE((*GetDeviceBackend(MemoryKind::kHost))->Locate(host.data()).ok());

  // The staged fallback: this process copies its own device memory to host and back.
  auto want = RandomBytes(kAlloc - 7, TestSeed(12));
  std::memcpy(base + 7, want.data(), want.size());
  auto ready = b->RecordReadyEvent(0, nullptr);
  REQUIRE(ready.ok());
  std::vector<uint8_t> got(want.size());
  REQUIRE(b->CopyLocalToHost(0, base + 7, got.data(), got.size(), *ready).ok());
  CHECK(got == want);
  std::reverse(got.begin(), got.end());
  REQUIRE(b->CopyHostToLocal(0, got.data(), base + 7, got.size(), nullptr).ok());
  CHECK(std::memcmp(base + 7, got.data(), got.size()) == 0);
  alloc->reset();
  CHECK_FALSE(b->Locate(base).ok());  // freed allocations are forgotten
}

TEST_CASE("the owner's staged copy is paced like the device link", "[kernels][emulated]") {
  const uint64_t size = 4u << 20;
  BandwidthGuard slow(64ull << 20);  // 64 MiB/s: >= 62 ms
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  auto alloc = EmulatedAllocation::Create(size, false);
  REQUIRE(alloc.ok());
  std::vector<uint8_t> host(size);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(b->CopyLocalToHost(0, (*alloc)->data(), host.data(), size, EventExport{}).ok());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  CHECK(ms >= 60.0);
}

TEST_CASE("emulated copies match memcpy for every size and misalignment", "[kernels][emulated]") {
  BandwidthGuard unlimited(0);
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  const uint64_t seed = TestSeed(11);
  auto alloc = RandomAllocation(seed);
  auto stream = b->CreateStream(0);
  REQUIRE(stream.ok());
  for (uint64_t export_off : {0ull, 5ull}) {
    auto ex = b->Export(static_cast<uint8_t*>(alloc->data()) + export_off, kAlloc - export_off);
    REQUIRE(ex.ok());
    auto mem = b->Import(*ex);
    REQUIRE(mem.ok());
    for (uint64_t size : kSizes) {
      for (uint64_t off : kOffsets) {
        INFO("export_off=" << export_off << " size=" << size << " off=" << off << " seed=" << seed);
        std::vector<uint8_t> dst(size + 64, 0xAB), want(size + 64, 0xAB);
        const uint64_t dst_off = off % 13;
        std::memcpy(want.data() + dst_off, static_cast<uint8_t*>(alloc->data()) + export_off + off,
                    size);
        REQUIRE(b->CopyToHostAsync(**mem, off, dst.data() + dst_off, size, **stream).ok());
        REQUIRE((*stream)->Synchronize().ok());
        REQUIRE(dst == want);
        // Host->device (restore) of fresh bytes, read back through the exporter's mapping.
        auto fresh = RandomBytes(size, seed + size + off);
        REQUIRE(b->CopyToDeviceAsync(fresh.data(), **mem, off, size, **stream).ok());
        REQUIRE((*stream)->Synchronize().ok());
        REQUIRE(std::memcmp(static_cast<uint8_t*>(alloc->data()) + export_off + off, fresh.data(),
                            size) == 0);
      }
    }
    CHECK_FALSE(b->CopyToHostAsync(**mem, (*mem)->size(), nullptr, 1, **stream).ok());
  }
}

TEST_CASE("emulated XOR matches XorReduceRef", "[kernels][emulated][xor]") {
  BandwidthGuard unlimited(0);
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  const uint64_t seed = TestSeed(23);
  std::vector<std::unique_ptr<EmulatedAllocation>> allocs;
  std::vector<std::shared_ptr<ImportedMemory>> mems;
  for (int i = 0; i < 5; ++i) {
    allocs.push_back(RandomAllocation(seed + i));
    auto ex = b->Export(allocs.back()->data(), kAlloc);
    REQUIRE(ex.ok());
    auto mem = b->Import(*ex);
    REQUIRE(mem.ok());
    mems.push_back(*mem);
  }
  auto stream = b->CreateStream(0);
  REQUIRE(stream.ok());
  for (size_t nsrc = 1; nsrc <= mems.size(); ++nsrc) {
    for (uint64_t size : kSizes) {
      INFO("nsrc=" << nsrc << " size=" << size << " seed=" << seed);
      std::vector<const ImportedMemory*> srcs;
      std::vector<uint64_t> offs;
      std::vector<const void*> ref_srcs;
      for (size_t i = 0; i < nsrc; ++i) {
        srcs.push_back(mems[i].get());
        offs.push_back(kOffsets[i % 4] + i);  // mutually misaligned sources
        ref_srcs.push_back(static_cast<uint8_t*>(allocs[i]->data()) + offs.back());
      }
      std::vector<uint8_t> want(size + 1), got(size + 1, 0x5A);
      XorReduceRef(want.data(), ref_srcs.data(), nsrc, size);
      REQUIRE(
          b->XorToHostAsync(srcs.data(), offs.data(), nsrc, got.data() + 1, size, **stream).ok());
      REQUIRE((*stream)->Synchronize().ok());
      REQUIRE(got[0] == 0x5A);
      REQUIRE(std::memcmp(got.data() + 1, want.data(), size) == 0);
    }
  }
  CHECK_FALSE(b->XorToHostAsync(nullptr, nullptr, 0, nullptr, 0, **stream).ok());
}

TEST_CASE("emulated copy engine enforces the configured bandwidth", "[kernels][emulated][pacing]") {
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  const uint64_t size = 24ull << 20;
  auto alloc = EmulatedAllocation::Create(size);
  REQUIRE(alloc.ok());
  std::memset((*alloc)->data(), 0x11, size);
  auto mem = b->Import(*b->Export((*alloc)->data(), size));
  REQUIRE(mem.ok());
  auto stream = b->CreateStream(0);
  REQUIRE(stream.ok());
  std::vector<uint8_t> dst(size);
  auto timed_copy = [&] {
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(b->CopyToHostAsync(**mem, 0, dst.data(), size, **stream).ok());
    REQUIRE((*stream)->Synchronize().ok());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double paced;
  {
    BandwidthGuard bw(100ull << 20);  // 100 MiB/s: 24 MiB take 0.24 s
    paced = timed_copy();
  }
  CHECK(paced >= 0.24 * 0.95);
  CHECK(paced <= 0.24 * 3);  // generous: a loaded 2-core CI machine
  double unlimited;
  {
    BandwidthGuard bw(0);
    unlimited = timed_copy();
  }
  CHECK(unlimited < paced / 2);
  CHECK(dst[size - 1] == 0x11);
}
