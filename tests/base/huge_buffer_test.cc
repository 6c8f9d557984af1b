// HugeBuffer: zeroed, 2 MiB-aligned memory advised for huge pages, owned and unmapped once.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "reft/huge_buffer.h"

using reft::HugeBuffer;

namespace {

// The VmFlags line of the mapping of /proc/self/smaps that contains `p`.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a huge buffer is zeroed, aligned to a huge page and advised for huge pages", "[base]") {
  const uint64_t size = (uint64_t{5} << 20) + 123;  // not a multiple of any page size
  auto b = HugeBuffer::Allocate(size, "the test");
  REQUIRE(b.ok());
  REQUIRE(b->size() == size);
  CHECK(reinterpret_cast<uintptr_t>(b->data()) % (uintptr_t{2} << 20) == 0);
  uint64_t nonzero = 0;
  for (uint64_t i = 0; i < size; i += 4096) nonzero += b->data()[i] != 0;
  CHECK(nonzero == 0);
  CHECK(b->data()[size - 1] == 0);
  b->data()[0] = 1;
  b->data()[size - 1] = 2;  // the last byte is writable
  // "hg": the kernel recorded MADV_HUGEPAGE for the range, whatever its THP mode.
  CHECK_THAT(VmFlagsOf(b->data()), Catch::Contains(" hg"));
}

TEST_CASE("a huge buffer moves its mapping and unmaps it once", "[base]") {
  auto a = HugeBuffer::Allocate(4096, "the test");
  REQUIRE(a.ok());
  uint8_t* p = a->data();
  p[10] = 7;
  HugeBuffer moved = std::move(*a);
  CHECK(a->data() == nullptr);
  CHECK(a->size() == 0);
  CHECK(moved.data() == p);
  CHECK(moved.data()[10] == 7);
  HugeBuffer other;
  other = std::move(moved);
  CHECK(other.data() == p);
  CHECK_FALSE(VmFlagsOf(p).empty());
  other = HugeBuffer();  // unmapped now
  CHECK(VmFlagsOf(p).empty());
}

TEST_CASE("an empty huge buffer maps nothing", "[base]") {
  auto b = HugeBuffer::Allocate(0, "the test");
  REQUIRE(b.ok());
  CHECK(b->data() == nullptr);
  CHECK(b->size() == 0);
}
