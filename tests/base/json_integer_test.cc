#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "reft/json_integer.h"

using nlohmann::json;

TEST_CASE("JsonInteger takes integral numbers that fit the field", "[base]") {
  int32_t i = 0;
  CHECK(reft::JsonInteger(json::parse("-7"), &i));
  CHECK(i == -7);
  uint64_t u = 0;
  CHECK(reft::JsonInteger(json::parse("18446744073709551615"), &u));
  CHECK(u == UINT64_MAX);
  int64_t s = 0;
  CHECK(reft::JsonInteger(json::parse("-9223372036854775808"), &s));
  CHECK(s == INT64_MIN);
}

TEST_CASE("JsonInteger refuses floats, other types and values out of range", "[base]") {
  uint64_t u = 42;
  // A float out of range was undefined behaviour through get<uint64_t>() (a fuzzer finding).
  for (const char* bad : {"1048E41", "1.5", "1e3", "-1", "\"12\"", "true", "null", "[1]", "{}"}) {
    INFO(bad);
    CHECK_FALSE(reft::JsonInteger(json::parse(bad), &u));
  }
  CHECK(u == 42);  // untouched
  int32_t i = 5;
  CHECK_FALSE(reft::JsonInteger(json::parse("2147483648"), &i));
  CHECK_FALSE(reft::JsonInteger(json::parse("-2147483649"), &i));
  CHECK_FALSE(reft::JsonInteger(json::parse("18446744073709551615"), &i));
  uint8_t b = 0;
  CHECK_FALSE(reft::JsonInteger(json::parse("256"), &b));
  CHECK(reft::JsonInteger(json::parse("255"), &b));
  CHECK(b == 255);
  CHECK(i == 5);
}
