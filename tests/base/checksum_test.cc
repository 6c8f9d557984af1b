#include <catch2/catch.hpp>

#include "reft/checksum.h"
#include "test_support.h"

TEST_CASE("Checksum64 is stable, streaming-equivalent and detects a flipped bit", "[base]") {
  auto bytes = reft::testing::RandomBytes(1 << 20, 7);
  uint64_t whole = reft::Checksum64(bytes.data(), bytes.size());
  reft::ChecksumStream stream;
  stream.Update(bytes.data(), 1000);
  stream.Update(bytes.data() + 1000, bytes.size() - 1000);
  CHECK(stream.Digest() == whole);
  bytes[12345] ^= 0x10;
  CHECK(reft::Checksum64(bytes.data(), bytes.size()) != whole);
  CHECK(reft::Checksum64(nullptr, 0) == reft::Checksum64("", 0));
}
