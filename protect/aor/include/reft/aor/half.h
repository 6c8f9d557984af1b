#pragma once
/// \file half.h
/// \brief Exact fp16/bf16 → fp32 conversions and round-to-nearest-even fp32 → fp16/bf16.
///
/// Bit manipulation (the only floating-point operation, in HalfToFloat, is exact), so the
/// results do not depend on the rounding mode, FMA contraction or -ffast-math of the including
/// translation unit; inline so the AdamW kernel can convert gradients on the fly. Every fp16 and
/// bf16 value, subnormals included, is exactly representable in fp32, so widening is exact;
/// narrowing rounds to nearest, ties to even (what torch's .half() / .bfloat16() do), overflows to
/// infinity and keeps NaNs NaN (quiet).

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
///
/// Branch-free so that the AdamW kernel's conversion loop vectorises. The one
/// floating-point operation, for subnormals, is exact: an integer below 1024 converted to float
/// and scaled by 2^-24 gives a normal float, whatever the rounding mode or FTZ/DAZ.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;                    // exponent and mantissa
  const uint32_t normal = (em << 13) + 0x38000000u;   // rebias 15 → 127
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;  // keeps the NaN payload
  const uint32_t subnormal =                          // mant · 2^-24 (±0 for mant = 0)
      FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  // Masks rather than ?: so that compilers if-convert and vectorise the loop.
  const uint32_t is_inf_nan = 0u - static_cast<uint32_t>(em >= 0x7c00u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(em < 0x0400u);
  uint32_t bits = (normal & ~is_inf_nan) | (inf_nan & is_inf_nan);
  bits = (bits & ~is_subnormal) | (subnormal & is_subnormal);
  return BitsToFloat(sign | bits);
}

/// \brief Round-to-nearest-even narrowing to binary16.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN (NaN keeps its top payload bits and is made quiet)
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
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
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);  // overflow carries into inf
}

}  // namespace reft::aor
