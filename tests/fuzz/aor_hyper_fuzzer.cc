// Fuzz target: the AOR step hyper-parameter record (protect/aor hyper_codec.h,
// DecodeStepHyper), which trainers send to reftd once per iteration and the replay tool reads
// from trace files, and the AdamW replay step it drives.
//
// Input: the record (only an input of exactly 80 bytes can decode), optionally followed by up
// to 16 fp32 gradient values. Properties:
//  - an input that is not 80 bytes is refused; every refusal is InvalidArgument with a message;
//  - an accepted record passes ValidateStepHyper and re-encodes to exactly its 80 input bytes
//    (the wire form is canonical: reserved bytes and unknown flags are refused);
//  - AdamWUpdate accepts a decoded record and, for a skipped step, changes nothing.
#include <cstring>
#include <limits>

#include "fuzz_util.h"
#include "reft/aor/adamw.h"
#include "reft/aor/hyper_codec.h"

using namespace reft;
using namespace reft::aor;
using reft::fuzz::Bytes;

namespace {

void CheckRefusal(const Status& s) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument && !s.message().empty(),
             "DecodeStepHyper failed with %s", s.ToString().c_str());
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  StepHyper h;
  h.iteration = 1000;
  h.step = 998;
  h.lr = 3e-4;
  h.weight_decay = 0.01;
  h.clip_coef = 0.5;
  h.grad_scale = 1.0 / 65536;
  auto e = EncodeStepHyper(h);
  Bytes rec(e.begin(), e.end());
  sink("step", rec);
  Bytes with_grads = rec;
  for (float g : {0.5f, -1.25f, 3e-8f, 1e30f}) {
    uint8_t b[4];
    std::memcpy(b, &g, 4);
    with_grads.insert(with_grads.end(), b, b + 4);
  }
  sink("step_with_grads", with_grads);
  StepHyper skipped = h;
  skipped.skipped = true;
  skipped.clip_coef = std::numeric_limits<double>::quiet_NaN();
  e = EncodeStepHyper(skipped);
  sink("skipped_nan_clip", Bytes(e.begin(), e.end()));
  StepHyper fused = h;  // torch's fused CPU kernel with FMAs and Adam's L2 decay
  fused.lerp_first_moment = true;
  fused.fma = true;
  fused.l2_weight_decay = true;
  fused.fused_width = 8;
  e = EncodeStepHyper(fused);
  sink("fused_fma_l2", Bytes(e.begin(), e.end()));
  StepHyper off = h;  // declared not replayable
  off.not_replayable = NotReplayable::kSqrtNotCorrectlyRounded;
  e = EncodeStepHyper(off);
  sink("not_replayable", Bytes(e.begin(), e.end()));
  rec[1] = 0x10;  // unknown flag bit
  sink("unknown_flag", rec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto whole = DecodeStepHyper(data, size);
  if (size != kStepHyperWireSize) {
    FUZZ_CHECK(!whole.ok(), "a record of %zu bytes was accepted", size);
  }
  if (!whole.ok()) CheckRefusal(whole.status());
  if (size < kStepHyperWireSize) return 0;

  auto hyper = DecodeStepHyper(data, kStepHyperWireSize);
  if (!hyper.ok()) {
    CheckRefusal(hyper.status());
    return 0;
  }
  FUZZ_CHECK(ValidateStepHyper(*hyper).ok(), "decoded record fails ValidateStepHyper");
  const auto again = EncodeStepHyper(*hyper);
  FUZZ_CHECK(std::memcmp(again.data(), data, kStepHyperWireSize) == 0,
             "accepted record does not re-encode to its own bytes");

  // Replay one step on a small shard with the gradients that follow the record.
  constexpr size_t kMax = 16;
  const size_t n = std::min(kMax, (size - kStepHyperWireSize) / 4);
  float grad[kMax], param[kMax], m[kMax], v[kMax], before[kMax];
  for (size_t i = 0; i < kMax; ++i) {
    param[i] = before[i] = 0.25f * static_cast<float>(i) - 1.0f;
    m[i] = 0.01f * static_cast<float>(i);
    v[i] = 0.001f * static_cast<float>(i);
  }
  if (n > 0) std::memcpy(grad, data + kStepHyperWireSize, n * 4);
  AdamWState state{param, m, v, n};
  Status s = AdamWUpdate(state, *hyper, n ? grad : nullptr, GradDtype::kFloat32, n, 1);
  FUZZ_CHECK(s.ok(), "AdamWUpdate refused a decoded record: %s", s.ToString().c_str());
  if (hyper->skipped) {
    FUZZ_CHECK(std::memcmp(param, before, sizeof param) == 0, "a skipped step changed params");
  }
  return 0;
}
