#pragma once
/// \file half.h
/// \brief Exact fp16/bf16 → fp32 conversions and round-to-nearest-even fp32 → fp16/bf16.
///
/// Integer-only bit manipulation (no floating-point arithmetic, so no dependence on the
/// rounding mode, FMA contraction or -ffast-math of the including translation unit), inline
/// so the AdamW kernel can convert gradients on the fly. Every fp16 and bf16 value, subnormals
/// included, is exactly representable in fp32, so widening is exact; narrowing rounds to
/// nearest, ties to even (what torch's .half() / .bfloat16() do), overflows to infinity and
/// keeps NaNs NaN (quiet).

#include <cstdint>
#include <cstring>

namespace reft::aor {

/// \brief Bit pattern of `f`.
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// \brief The float whose bit pattern is `u`.
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// \brief Exact widening of an IEEE binary16 bit pattern.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);  // ±0
    // Subnormal: value = mant · 2^-24. Normalise: shift the leading one up to the implicit
    // bit (0x400, which has 21 leading zeros in 32 bits) and lower the exponent to match.
    const uint32_t shift = static_cast<uint32_t>(__builtin_clz(mant)) - 21u;  // 1..10
    mant = (mant << shift) & 0x3ffu;
    exp = 1u - shift;
  }
  // Rebias 15 → 127. For subnormals exp = 1 − shift wraps below zero as an unsigned value; the
  // sum is computed modulo 2^32 and lands in range (103..112).
  return BitsToFloat(sign | ((exp + (127u - 15u)) << 23) | (mant << 13));
}

/// \brief Round-to-nearest-even narrowing to binary16.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN (NaN keeps its top payload bits and is made quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {  // normal binary16 range (>= 2^-14)
    const uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000000u + 0xfffu + mant_odd;  // rebias 127 → 15 (mod 2^32), round half to even
    return static_cast<uint16_t>(sign | (ax >> 13));
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 (a tie with 0) → ±0
  // Subnormal binary16: value = m · 2^(e-150) = (m >> shift) units of 2^-24.
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | r);
}

/// \brief Exact widening of a bfloat16 bit pattern.
inline float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

/// \brief Round-to-nearest-even narrowing to bfloat16.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);  // overflow carries into inf
}

}  // namespace reft::aor
