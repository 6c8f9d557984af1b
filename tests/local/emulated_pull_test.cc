// The device pull path with the emulated device: the daemon imports the trainer's memfd
// allocation once and copies device->host (save) and host->device (restore) on its stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "reft/client.h"
#include "reft/kernels/emulated.h"
#include "server_fixture.h"

using namespace reft;
using reft::testing::RandomBytes;
using reft::testing::ServerFixture;

namespace {
std::unique_ptr<Client> Connect(const ServerFixture& f) {
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "job1";
  auto c = Client::Connect(o);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}
}  // namespace

TEST_CASE("emulated device buffers are pulled by the daemon and round-trip bit-exactly") {
  ServerFixture f;
  const uint64_t alloc_size = (2u << 20) + 4096;
  auto alloc = EmulatedBuffer::Create(alloc_size);
  REQUIRE(alloc.ok());
  auto* base = static_cast<uint8_t*>((*alloc)->data());
  std::vector<uint8_t> pattern = RandomBytes(alloc_size, 21);
  std::memcpy(base, pattern.data(), alloc_size);
  std::vector<uint8_t> host = RandomBytes(777, 22);
  const std::vector<uint8_t> host_want = host;
  auto c = Connect(f);
  BufferOptions dev;
  dev.memory = MemoryLocation::kEmulated;
  // Two buffers inside one allocation at odd offsets: the daemon imports it once.
  Status reg = c->Register("w1", base + 13, 1000001, dev);
  INFO(reg.ToString());
  REQUIRE(reg.ok());
  REQUIRE(c->Register("w2", base + 1000014 + 3, 65537, dev).ok());
  REQUIRE(c->Register("host", host.data(), host.size()).ok());
  REQUIRE(c->Snapshot(4).ok());
  REQUIRE(c->Fence().ok());
  REQUIRE(c->WaitCommitted(4, std::chrono::seconds(10)).ValueOr(false));
  std::memset(base, 0, alloc_size);
  std::memset(host.data(), 0, host.size());
  auto step = c->Restore();
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 4);
  CHECK(std::memcmp(base + 13, pattern.data() + 13, 1000001) == 0);
  CHECK(std::memcmp(base + 1000017, pattern.data() + 1000017, 65537) == 0);
  CHECK(base[12] == 0);  // outside the registered ranges nothing is written
  CHECK(host == host_want);
}

TEST_CASE("snapshot() returns at once, fence() waits for the paced device copy") {
  ServerFixture f;
  const uint64_t size = 8u << 20;
  const uint64_t bandwidth = 80ull << 20;  // 80 MiB/s: the pull takes >= 100 ms
  kernels::SetEmulatedCopyBandwidth(bandwidth);
  auto alloc = EmulatedBuffer::Create(size);
  REQUIRE(alloc.ok());
  std::vector<uint8_t> pattern = RandomBytes(size, 31);
  std::memcpy((*alloc)->data(), pattern.data(), size);
  auto c = Connect(f);
  BufferOptions dev;
  dev.memory = MemoryLocation::kEmulated;
  REQUIRE(c->Register("w", (*alloc)->data(), size, dev).ok());
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(c->Snapshot(1).ok());
  auto t1 = std::chrono::steady_clock::now();
  REQUIRE(c->Fence().ok());
  auto t2 = std::chrono::steady_clock::now();
  kernels::SetEmulatedCopyBandwidth(0);
  using ms = std::chrono::duration<double, std::milli>;
  INFO("snapshot " << ms(t1 - t0).count() << " ms, fence " << ms(t2 - t1).count() << " ms");
  CHECK(ms(t1 - t0).count() < 20.0);
  CHECK(ms(t2 - t0).count() >= 90.0);
  REQUIRE(c->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  std::memset((*alloc)->data(), 0, size);
  REQUIRE(c->Restore().ok());
  CHECK(std::memcmp((*alloc)->data(), pattern.data(), size) == 0);
}

TEST_CASE("device memory the backend will not export is staged by the client, bit-exactly") {
  ServerFixture f;
  const uint64_t size = (3u << 20) + 5;
  auto alloc = EmulatedBuffer::Create(size, /*exportable=*/false);
  REQUIRE(alloc.ok());
  auto* base = static_cast<uint8_t*>((*alloc)->data());
  auto c = Connect(f);
  BufferOptions dev;
  dev.memory = MemoryLocation::kEmulated;
  dev.allow_staging = false;
  CHECK(c->Register("strict", base, size, dev).code() == StatusCode::kUnsupported);
  dev.allow_staging = true;
  REQUIRE(c->Register("w", base, size, dev).ok());
  BufferOptions unique = dev;
  unique.kind = BufferKind::kUnique;
  REQUIRE(c->Register("u", base + 1, 4096, unique).ok());
  CHECK(c->StagedReason("w").ValueOr("").find("not exportable") != std::string::npos);
  CHECK(c->StagedReason("nope").status().code() == StatusCode::kNotFound);
  std::vector<uint8_t> want;
  for (int64_t step = 1; step <= 2; ++step) {
    want = RandomBytes(size, 40 + step);
    std::memcpy(base, want.data(), size);
    REQUIRE(c->Snapshot(step).ok());
    REQUIRE(c->Fence().ok());
    std::memset(base, 0xEE, size);  // the next optimizer step, right after the fence
    REQUIRE(c->WaitCommitted(step, std::chrono::seconds(10)).ValueOr(false));
  }
  auto step = c->Restore();
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 2);
  CHECK(std::memcmp(base, want.data(), size) == 0);
}

TEST_CASE("GateHostCopies: the copy worker reads host buffers only once the gate word is set") {
  ServerFixture f;
  const uint64_t size = 1u << 20;
  std::vector<uint8_t> buf(size, 1);
  alignas(8) uint64_t word = 0;
  auto c = Connect(f);
  REQUIRE(c->Register("staged-by-someone-else", buf.data(), size).ok());
  REQUIRE(c->GateHostCopies(&word, 7).ok());
  REQUIRE(c->Snapshot(1).ok());
  // The "device copy" lands later: the bytes first, then the word (release), as a DMA would.
  std::thread dma([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    std::memset(buf.data(), 2, size);
    __atomic_store_n(&word, 7, __ATOMIC_RELEASE);
  });
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(c->Fence().ok());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  dma.join();
  CHECK(ms >= 100.0);
  REQUIRE(c->WaitCommitted(1, std::chrono::seconds(10)).ValueOr(false));
  // The gate is consumed: the next snapshot does not wait for it.
  REQUIRE(c->Snapshot(2).ok());
  REQUIRE(c->Fence().ok());
  std::memset(buf.data(), 0, size);
  REQUIRE(c->WaitCommitted(2, std::chrono::seconds(10)).ValueOr(false));
  REQUIRE(c->Restore().ok());
  CHECK(std::all_of(buf.begin(), buf.end(), [](uint8_t v) { return v == 2; }));
}
