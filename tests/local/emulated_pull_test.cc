// The device pull path with the emulated device: the daemon imports the trainer's memfd
// allocation once and copies device->host (save) and host->device (restore) on its stream.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>

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

TEST_CASE("snapshot() returns at once; fence() waits for the paced device copy") {
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
