#include <catch2/catch.hpp>

#include "reft/units.h"

TEST_CASE("ParseByteSize accepts suffixes and rejects garbage", "[base]") {
  CHECK(reft::ParseByteSize("123").value() == 123);
  CHECK(reft::ParseByteSize("64K").value() == 64 * 1024);
  CHECK(reft::ParseByteSize("64KiB").value() == 64 * 1024);
  CHECK(reft::ParseByteSize("2m").value() == 2ull << 20);
  CHECK(reft::ParseByteSize("1.5G").value() == 3ull << 29);
  CHECK(reft::ParseByteSize("1T").value() == 1ull << 40);
  for (const char* bad : {"", "abc", "-1", "12X", "1.5", "99999999999999999999999"}) {
    INFO(bad);
    CHECK(reft::ParseByteSize(bad).status().code() == reft::StatusCode::kInvalidArgument);
  }
  CHECK(reft::FormatBytes(512) == "512 B");
  CHECK(reft::FormatBytes(3ull << 30) == "3.0 GiB");
}
