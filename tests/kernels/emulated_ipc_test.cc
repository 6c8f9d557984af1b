// Emulated device across real processes: a forked trainer exports memfd memory and its ready
// event over a Unix socket (SCM_RIGHTS), the parent (the daemon's role) imports, copies after
// the ready event, writes a marker back and records the done event the child waits on.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ipc_test_util.h"
#include "reft/kernels/device.h"
#include "reft/kernels/emulated.h"
#include "test_support.h"

using namespace reft::kernels;
using namespace reft::kernels::testing;

namespace {

constexpr uint64_t kSize = (3ull << 20) + 17;
constexpr uint64_t kOffset = 4099;  // the buffer starts inside the allocation
constexpr uint64_t kMarker = 0x5245465444304E45ull;

// Child (trainer): returns its exit code. 0 = the done event was observed only after the
// parent's marker had landed in the buffer.
int TrainerChild(int sock, uint64_t seed) {
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  auto alloc = EmulatedAllocation::Create(kOffset + kSize + 100);
  if (!alloc.ok()) return 10;
  auto bytes = reft::testing::RandomBytes(kSize, seed);
  uint8_t* buf = static_cast<uint8_t*>((*alloc)->data()) + kOffset;
  std::memcpy(buf, bytes.data(), kSize);
  auto ex = b->Export(buf, kSize);
  if (!ex.ok() || !SendExport(sock, *ex)) return 11;
  auto ready = b->RecordReadyEvent(0, nullptr);
  if (!ready.ok() || !SendEvent(sock, *ready)) return 12;
  EventExport done;
  if (!RecvEvent(sock, &done)) return 13;
  reft::Status st = b->WaitEventOnHost(done, 20000);
  if (!st.ok()) return 14;
  uint64_t marker;
  std::memcpy(&marker, buf, sizeof(marker));
  if (marker != kMarker) return 15;  // the fence returned before the daemon's write
  close(done.fd);
  return 0;
}

}  // namespace

TEST_CASE("emulated export, import, copy and fences across processes", "[kernels][emulated][ipc]") {
  const uint64_t seed = reft::testing::TestSeed(77);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    _exit(TrainerChild(sv[1], seed));
  }
  close(sv[1]);
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  SetEmulatedCopyBandwidth(64ull << 20);  // slow link: the child really has to wait
  MemoryExport ex;
  REQUIRE(RecvExport(sv[0], &ex));
  REQUIRE(ex.fd >= 0);
  CHECK(ex.offset == kOffset);
  CHECK(ex.size == kSize);
  EventExport ready;
  REQUIRE(RecvEvent(sv[0], &ready));
  REQUIRE(ready.fd >= 0);

  auto mem = b->Import(ex);
  REQUIRE(mem.ok());
  close(ex.fd);  // the import keeps its own mapping
  auto stream = b->CreateStream(0);
  REQUIRE(stream.ok());
  REQUIRE((*stream)->WaitEvent(ready).ok());
  close(ready.fd);
  std::vector<uint8_t> host(kSize);
  REQUIRE(b->CopyToHostAsync(**mem, 0, host.data(), kSize, **stream).ok());
  const uint64_t marker = kMarker;
  REQUIRE(b->CopyToDeviceAsync(&marker, **mem, 0, sizeof(marker), **stream).ok());
  auto done = (*stream)->RecordEvent();
  REQUIRE(done.ok());
  REQUIRE(SendEvent(sv[0], *done));
  REQUIRE((*stream)->Synchronize().ok());
  SetEmulatedCopyBandwidth(0);

  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(host == reft::testing::RandomBytes(kSize, seed));
  close(sv[0]);
}

TEST_CASE("waiting on an event that is never reached times out", "[kernels][emulated][ipc]") {
  auto* b = *GetDeviceBackend(MemoryKind::kEmulated);
  auto stream = b->CreateStream(0);
  REQUIRE(stream.ok());
  auto first = (*stream)->RecordEvent();
  REQUIRE(first.ok());
  REQUIRE((*stream)->Synchronize().ok());
  CHECK(b->WaitEventOnHost(*first, 1000).ok());
  // The next target of the same counter has not been recorded: it cannot complete.
  EventExport future = *first;
  uint64_t target;
  std::memcpy(&target, future.ipc_handle.data(), sizeof(target));
  target += 1;
  std::memcpy(&future.ipc_handle[0], &target, sizeof(target));
  auto t0 = std::chrono::steady_clock::now();
  reft::Status st = b->WaitEventOnHost(future, 150);
  CHECK(st.code() == reft::StatusCode::kTimeout);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(140));
  EventExport bad = *first;
  bad.ipc_handle = "xyz";
  CHECK(b->WaitEventOnHost(bad, 10).code() == reft::StatusCode::kInvalidArgument);
}
