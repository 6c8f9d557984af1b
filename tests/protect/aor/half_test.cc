// fp16/bf16 conversions: widening checked against an independent ldexp formula for all 65536
// patterns; narrowing checked at every rounding boundary (each midpoint between two adjacent
// representable values, and its float neighbours), overflow and NaN.

#include "reft/aor/half.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

namespace reft::aor {
namespace {

/// Value of a binary16 pattern from its definition, in double.
double HalfReference(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25);
}

bool IsEvenPattern(uint16_t h) { return (h & 1) == 0; }

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_CASE("fp16 widening is exact for every pattern", "[aor][half]") {
  for (uint32_t u = 0; u < 0x10000; ++u) {
    const auto h = static_cast<uint16_t>(u);
    const float f = HalfToFloat(h);
    const int exp = (h >> 10) & 0x1f;
    INFO("pattern 0x" << std::hex << u);
    if (exp == 0x1f) {
      if (h & 0x3ff) {
        REQUIRE(std::isnan(f));
      } else {
        REQUIRE(std::isinf(f));
        REQUIRE(std::signbit(f) == bool(h & 0x8000));
      }
      continue;
    }
    REQUIRE(static_cast<double>(f) == HalfReference(h));
    REQUIRE(std::signbit(f) == bool(h & 0x8000));  // -0 stays -0
    REQUIRE(FloatToHalf(f) == h);                  // narrowing inverts widening
  }
}

TEST_CASE("fp16 narrowing rounds to nearest, ties to even", "[aor][half]") {
  for (uint32_t a = 0; a < 0x7bff; ++a) {  // every pair of adjacent finite positive values
    const auto lo = static_cast<uint16_t>(a), hi = static_cast<uint16_t>(a + 1);
    const float flo = HalfToFloat(lo), fhi = HalfToFloat(hi);
    const float mid = (flo + fhi) / 2;  // exact: needs 12 significant bits, float has 24
    REQUIRE(static_cast<double>(mid) == (HalfReference(lo) + HalfReference(hi)) / 2);
    INFO("between 0x" << std::hex << a << " and 0x" << a + 1);
    REQUIRE(FloatToHalf(mid) == (IsEvenPattern(lo) ? lo : hi));
    REQUIRE(FloatToHalf(std::nextafter(mid, 0.0f)) == lo);
    REQUIRE(FloatToHalf(std::nextafter(mid, kInf)) == hi);
    REQUIRE(FloatToHalf(-mid) == ((IsEvenPattern(lo) ? lo : hi) | 0x8000));
  }
  // Below the smallest subnormal: 2^-25 is a tie with 0 (even), anything above rounds up.
  REQUIRE(FloatToHalf(std::ldexp(1.0f, -25)) == 0);
  REQUIRE(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 1);
  REQUIRE(FloatToHalf(std::ldexp(1.0f, -30)) == 0);
  REQUIRE(FloatToHalf(-std::ldexp(1.0f, -30)) == 0x8000);
  // Overflow: 65504 is the largest; 65520 (the midpoint to 65536) rounds to even = inf.
  REQUIRE(FloatToHalf(65504.0f) == 0x7bff);
  REQUIRE(FloatToHalf(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  REQUIRE(FloatToHalf(65520.0f) == 0x7c00);
  REQUIRE(FloatToHalf(1e10f) == 0x7c00);
  REQUIRE(FloatToHalf(-1e10f) == 0xfc00);
  REQUIRE(FloatToHalf(std::numeric_limits<float>::infinity()) == 0x7c00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  REQUIRE((nan & 0x7c00) == 0x7c00);
  REQUIRE((nan & 0x3ff) != 0);
  // A signalling NaN whose payload sits in the bits narrowing drops must stay NaN.
  REQUIRE((FloatToHalf(BitsToFloat(0x7f800001u)) & 0x3ff) != 0);
}

TEST_CASE("bf16 widening and narrowing", "[aor][half]") {
  for (uint32_t u = 0; u < 0x10000; ++u) {
    const auto b = static_cast<uint16_t>(u);
    const float f = BFloat16ToFloat(b);
    REQUIRE(FloatBits(f) == u << 16);
    if (!std::isnan(f)) REQUIRE(FloatToBFloat16(f) == b);
  }
  for (uint32_t a = 0; a < 0x7f7f; ++a) {
    const auto lo = static_cast<uint16_t>(a), hi = static_cast<uint16_t>(a + 1);
    const float flo = BFloat16ToFloat(lo), fhi = BFloat16ToFloat(hi);
    const float mid = flo + (fhi - flo) / 2;  // exact (9 bits), and no overflow near FLT_MAX
    INFO("between 0x" << std::hex << a << " and 0x" << a + 1);
    REQUIRE(FloatToBFloat16(mid) == (IsEvenPattern(lo) ? lo : hi));
    REQUIRE(FloatToBFloat16(std::nextafter(mid, 0.0f)) == lo);
    REQUIRE(FloatToBFloat16(std::nextafter(mid, kInf)) == hi);
  }
  // Largest finite bf16 plus half an ulp rounds to even = inf.
  REQUIRE(FloatToBFloat16(BitsToFloat(0x7f7f8000u)) == 0x7f80);
  REQUIRE(FloatToBFloat16(BitsToFloat(0x7f7f7fffu)) == 0x7f7f);
  REQUIRE(std::isnan(BFloat16ToFloat(FloatToBFloat16(BitsToFloat(0x7f800001u)))));
  REQUIRE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace reft::aor
