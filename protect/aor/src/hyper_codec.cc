#include "reft/aor/hyper_codec.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace reft::aor {
namespace {

// Explicit little-endian byte order, independent of the host's.
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void PutF64(uint8_t* p, double d) {
  uint64_t v;
  std::memcpy(&v, &d, sizeof v);
  PutU64(p, v);
}

double GetF64(const uint8_t* p) {
  const uint64_t v = GetU64(p);
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}

constexpr uint8_t kFlagSkipped = 0x01;
constexpr uint8_t kFlagLerpFirstMoment = 0x02;
constexpr uint8_t kFlagFma = 0x04;
constexpr uint8_t kFlagL2WeightDecay = 0x08;
constexpr uint8_t kKnownFlags = kFlagSkipped | kFlagLerpFirstMoment | kFlagFma | kFlagL2WeightDecay;
constexpr size_t kOffFusedWidth = 2;
constexpr size_t kOffNotReplayable = 3;
constexpr size_t kOffReserved = 4;
constexpr size_t kOffIteration = 8;
constexpr size_t kOffStep = 16;
constexpr size_t kOffDoubles = 24;  // lr, beta1, beta2, eps, weight_decay, clip_coef, grad_scale

}  // namespace

std::array<uint8_t, kStepHyperWireSize> EncodeStepHyper(const StepHyper& h) {
  std::array<uint8_t, kStepHyperWireSize> out{};
  out[0] = kStepHyperWireVersion;
  out[1] = static_cast<uint8_t>(
      (h.skipped ? kFlagSkipped : 0) | (h.lerp_first_moment ? kFlagLerpFirstMoment : 0) |
      (h.fma ? kFlagFma : 0) | (h.l2_weight_decay ? kFlagL2WeightDecay : 0));
  out[kOffFusedWidth] = h.fused_width;
  out[kOffNotReplayable] = static_cast<uint8_t>(h.not_replayable);
  PutU64(&out[kOffIteration], h.iteration);
  PutU64(&out[kOffStep], h.step);
  const double d[7] = {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.clip_coef, h.grad_scale};
  for (int i = 0; i < 7; ++i) PutF64(&out[kOffDoubles + 8 * i], d[i]);
  return out;
}

Result<StepHyper> DecodeStepHyper(const uint8_t* data, size_t size) {
  if (size != kStepHyperWireSize) {
    return Status::InvalidArgument("step hyper-parameters: expected " +
                                   std::to_string(kStepHyperWireSize) + " bytes, got " +
                                   std::to_string(size));
  }
  if (data == nullptr) return Status::InvalidArgument("step hyper-parameters: null buffer");
  if (data[0] != kStepHyperWireVersion) {
    return Status::InvalidArgument("step hyper-parameters: unsupported version " +
                                   std::to_string(data[0]) + " (this build reads version " +
                                   std::to_string(kStepHyperWireVersion) + ")");
  }
  if ((data[1] & ~kKnownFlags) != 0) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(data[1]));
    return Status::InvalidArgument(std::string("step hyper-parameters: flags ") + hex +
                                   " has unknown bits (bit 0 = skipped, bit 1 = lerp first moment, "
                                   "bit 2 = fma, bit 3 = L2 weight decay)");
  }
  for (size_t i = kOffReserved; i < kOffIteration; ++i) {
    if (data[i] != 0) {
      return Status::InvalidArgument("step hyper-parameters: reserved byte " + std::to_string(i) +
                                     " is not zero");
    }
  }
  StepHyper h;
  h.skipped = (data[1] & kFlagSkipped) != 0;
  h.lerp_first_moment = (data[1] & kFlagLerpFirstMoment) != 0;
  h.fma = (data[1] & kFlagFma) != 0;
  h.l2_weight_decay = (data[1] & kFlagL2WeightDecay) != 0;
  h.fused_width = data[kOffFusedWidth];
  h.not_replayable = static_cast<NotReplayable>(data[kOffNotReplayable]);
  h.iteration = GetU64(data + kOffIteration);
  h.step = GetU64(data + kOffStep);
  double* fields[7] = {&h.lr,           &h.beta1,     &h.beta2,     &h.eps,
                       &h.weight_decay, &h.clip_coef, &h.grad_scale};
  for (int i = 0; i < 7; ++i) *fields[i] = GetF64(data + kOffDoubles + 8 * i);
  REFT_RETURN_NOT_OK(ValidateStepHyper(h));
  return h;
}

}  // namespace reft::aor
