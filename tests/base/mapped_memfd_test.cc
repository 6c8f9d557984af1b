// MappedMemfd: the size seals hold from creation; after SealFutureWrites() whoever gets the fd
// can only read, while the owner's mapping goes on writing.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "reft/mapped_memfd.h"

using namespace reft;

TEST_CASE("a memfd sealed against future writes is read-only to everyone but its owner") {
  auto mem = MappedMemfd::Create("test", 1 << 20);
  REQUIRE(mem.ok());
  REQUIRE(mem->Populate().ok());
  std::memset(mem->data(), 7, mem->size());
  REQUIRE(mem->SealFutureWrites().ok());
  // What another process would try with the fd: a new writable mapping, a write, a resize.
  errno = 0;
  void* w = ::mmap(nullptr, mem->size(), PROT_READ | PROT_WRITE, MAP_SHARED, mem->fd(), 0);
  CHECK(w == MAP_FAILED);
  CHECK(errno == EPERM);
  const uint8_t byte = 1;
  CHECK(::pwrite(mem->fd(), &byte, 1, 0) < 0);
  CHECK(::ftruncate(mem->fd(), 0) != 0);
  // A read-only view follows what the owner writes through its own mapping.
  void* r = ::mmap(nullptr, mem->size(), PROT_READ, MAP_SHARED, mem->fd(), 0);
  REQUIRE(r != MAP_FAILED);
  CHECK(::mprotect(r, mem->size(), PROT_READ | PROT_WRITE) != 0);
  mem->data()[12345] = 42;
  CHECK(static_cast<const uint8_t*>(r)[12345] == 42);
  CHECK(static_cast<const uint8_t*>(r)[0] == 7);
  ::munmap(r, mem->size());
}
