// FaultGuardedRange: a file shrunk under a registered mapping costs zeros and a Damaged() flag,
// not the process; outside a registered range a SIGBUS still kills as before.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "reft/fault_guard.h"

namespace {

constexpr size_t kSize = 4 << 20;

// A shared mapping of a file that another fd then truncates to nothing.
uint8_t* MapThenTruncate(int* fd_out) {
  const int fd = memfd_create("fault-guard-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, kSize) == 0);
  void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 0x5a, kSize);
  *fd_out = fd;
  return static_cast<uint8_t*>(p);
}

}  // namespace

TEST_CASE("a registered mapping survives its file being truncated", "[base][fault_guard]") {
  int fd = -1;
  uint8_t* p = MapThenTruncate(&fd);
  reft::FaultGuardedRange guard(p, kSize);
  REQUIRE(guard.registered());
  CHECK_FALSE(guard.Damaged());
  CHECK(p[kSize - 1] == 0x5a);
  const uint64_t before = reft::RepairedFaults();
  REQUIRE(ftruncate(fd, 0) == 0);
  volatile uint8_t* v = p;
  CHECK(v[kSize / 2] == 0);  // would be a SIGBUS without the guard
  v[10] = 1;                 // writes land in the private replacement
  CHECK(v[10] == 1);
  CHECK(guard.Damaged());
  CHECK(reft::RepairedFaults() == before + 1);
  guard.Reset();
  munmap(p, kSize);
  close(fd);
}

TEST_CASE("a SIGBUS outside every registered range still kills", "[base][fault_guard]") {
  int keep_fd = -1;
  uint8_t* keep = MapThenTruncate(&keep_fd);
  reft::FaultGuardedRange guard(keep, kSize);  // the handler is installed
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int memfd = memfd_create("unguarded", 0);
    if (memfd < 0 || ftruncate(memfd, kSize) != 0) _exit(3);
    void* q = mmap(nullptr, kSize, PROT_READ, MAP_SHARED, memfd, 0);
    if (q == MAP_FAILED || ftruncate(memfd, 0) != 0) _exit(4);
    volatile uint8_t x = static_cast<volatile uint8_t*>(q)[kSize / 2];
    (void)x;
    _exit(0);  // not reached: the access faults and is not ours to repair
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
  guard.Reset();
  munmap(keep, kSize);
  close(keep_fd);
}
