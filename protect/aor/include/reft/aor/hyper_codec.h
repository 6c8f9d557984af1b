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
/// | 1  | u8  | flags: bit 0 skipped, 1 lerp_first_moment, 2 fma, 3 l2_weight_decay; others 0 |
/// | 2  | u8  | fused_width (0 = not torch's fused kernel) |
/// | 3  | u8  | not_replayable (NotReplayable; 0 = replayable) |
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
/// Python: struct.pack("<BBBBIQQ7d", 1, flags, fused_width, not_replayable, 0, iteration, step,
/// lr, beta1, beta2, eps, weight_decay, clip_coef, grad_scale).
///
/// Compatibility: flag bits 2-3 and bytes 2-3 were reserved (must be 0) in the first form of
/// version 1, so a record of the torch 1.x or portable-kernel forms (all of them 0) is
/// byte-identical to it, and an older reftd refuses a record that needs the newer forms with an
/// InvalidArgument naming the unknown bits instead of replaying it in the wrong form.

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
/// bytes, an unknown not_replayable code, or a field out of range (ValidateStepHyper).
Result<StepHyper> DecodeStepHyper(const uint8_t* data, size_t size);

}  // namespace reft::aor
