#pragma once
/// \file hyper_codec.h
/// \brief A compact, fixed-size binary form of StepHyper, for trainers to send to reftd over
/// the local socket once per iteration (and for the replay tool's trace files).
///
/// Layout, little-endian, kStepHyperWireSize = 80 bytes:
///
/// | offset | type | field |
/// |---|---|---|
/// | 0  | u8  | version (kStepHyperWireVersion = 1) |
/// | 1  | u8  | flags: bit 0 = skipped, bit 1 = lerp_first_moment; other bits must be 0 |
/// | 2  | u16 | reserved, 0 |
/// | 4  | u32 | reserved, 0 (keeps the doubles 8-byte aligned) |
/// | 8  | u64 | iteration |
/// | 16 | u64 | step |
/// | 24 | f64 | lr |
/// | 32 | f64 | beta1 |
/// | 40 | f64 | beta2 |
/// | 48 | f64 | eps |
/// | 56 | f64 | weight_decay |
/// | 64 | f64 | clip_coef |
/// | 72 | f64 | grad_scale |
///
/// Python: struct.pack("<BBHIQQ7d", 1, flags, 0, 0, iteration, step, lr, beta1, beta2, eps,
/// weight_decay, clip_coef, grad_scale).

#include <array>
#include <cstddef>
#include <cstdint>

#include "reft/aor/step_hyper.h"
#include "reft/result.h"

namespace reft::aor {

inline constexpr size_t kStepHyperWireSize = 80;
inline constexpr uint8_t kStepHyperWireVersion = 1;

/// \brief The wire form of `hyper`. Does not validate (an encoder must be able to forward
/// what it was given; the decoder is the gate).
std::array<uint8_t, kStepHyperWireSize> EncodeStepHyper(const StepHyper& hyper);

/// \brief Parses and validates one record. InvalidArgument naming the problem: wrong size
/// ("expected 80 bytes, got 79"), unsupported version, unknown flag bits, non-zero reserved
/// bytes, or a field out of range (ValidateStepHyper).
Result<StepHyper> DecodeStepHyper(const uint8_t* data, size_t size);

}  // namespace reft::aor
