// Step hyper-parameter codec: the byte layout is pinned by a golden record produced by Python's
// struct.pack("<BBHIQQ7d", ...) (what a trainer sends), round trips are bit-exact, and every
// malformed input is rejected with an InvalidArgument that names the problem.

#include "reft/aor/hyper_codec.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"

namespace reft::aor {
namespace {

// python3 -c "import struct; print(struct.pack('<BBHIQQ7d', 1, 0, 0, 0, 1234567, 1200, 3e-4,
//   0.9, 0.95, 1e-8, 0.1, 0.625, 2.0**-16).hex())"
const uint8_t kGolden[kStepHyperWireSize] = {
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x87, 0xd6, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xb0, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x61, 0x32, 0x55, 0x30, 0x2a, 0xa9, 0x33, 0x3f,
    0xcd, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xec, 0x3f, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0xee, 0x3f,
    0x3a, 0x8c, 0x30, 0xe2, 0x8e, 0x79, 0x45, 0x3e, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe4, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3e};

StepHyper GoldenHyper() {
  StepHyper h;
  h.iteration = 1234567;
  h.step = 1200;
  h.lr = 3e-4;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.clip_coef = 0.625;
  h.grad_scale = std::ldexp(1.0, -16);
  return h;
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void RequireSame(const StepHyper& a, const StepHyper& b) {
  REQUIRE(a.iteration == b.iteration);
  REQUIRE(a.step == b.step);
  REQUIRE(a.skipped == b.skipped);
  REQUIRE(a.lerp_first_moment == b.lerp_first_moment);
  REQUIRE(a.fma == b.fma);
  REQUIRE(a.l2_weight_decay == b.l2_weight_decay);
  REQUIRE(a.fused_width == b.fused_width);
  REQUIRE(a.not_replayable == b.not_replayable);
  REQUIRE(SameBits(a.lr, b.lr));
  REQUIRE(SameBits(a.beta1, b.beta1));
  REQUIRE(SameBits(a.beta2, b.beta2));
  REQUIRE(SameBits(a.eps, b.eps));
  REQUIRE(SameBits(a.weight_decay, b.weight_decay));
  REQUIRE(SameBits(a.clip_coef, b.clip_coef));
  REQUIRE(SameBits(a.grad_scale, b.grad_scale));
}

/// Decodes `bytes` and requires an InvalidArgument whose message contains `needle`.
void RequireRejected(const uint8_t* bytes, size_t size, const std::string& needle) {
  auto r = DecodeStepHyper(bytes, size);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().ToString());
  REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
  REQUIRE(r.status().message().find(needle) != std::string::npos);
}

TEST_CASE("step hyper codec matches the documented layout", "[aor][codec]") {
  const auto enc = EncodeStepHyper(GoldenHyper());
  REQUIRE(std::memcmp(enc.data(), kGolden, kStepHyperWireSize) == 0);
  auto dec = DecodeStepHyper(kGolden, sizeof kGolden);
  REQUIRE(dec.ok());
  RequireSame(*dec, GoldenHyper());
}

TEST_CASE("step hyper codec: the replay forms' fields", "[aor][codec]") {
  // python3 -c "import struct; print(struct.pack('<BBBBIQQ7d', 1, 0x0e, 8, 0, 0, ...)[:8].hex())"
  // (lerp, fma, L2 weight decay, fused kernel of width 8): 010e080000000000, then the golden
  // record's bytes.
  StepHyper h = GoldenHyper();
  h.lerp_first_moment = true;
  h.fma = true;
  h.l2_weight_decay = true;
  h.fused_width = 8;
  auto enc = EncodeStepHyper(h);
  const uint8_t head[8] = {0x01, 0x0e, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00};
  REQUIRE(std::memcmp(enc.data(), head, 8) == 0);
  REQUIRE(std::memcmp(enc.data() + 8, kGolden + 8, kStepHyperWireSize - 8) == 0);
  auto dec = DecodeStepHyper(enc.data(), enc.size());
  REQUIRE(dec.ok());
  RequireSame(*dec, h);
  // A trainer that cannot be replayed still sends its step counts.
  h = GoldenHyper();
  h.not_replayable = NotReplayable::kSqrtNotCorrectlyRounded;
  enc = EncodeStepHyper(h);
  REQUIRE(enc[3] == 1);
  dec = DecodeStepHyper(enc.data(), enc.size());
  REQUIRE(dec.ok());
  RequireSame(*dec, h);
  REQUIRE(NotReplayableText(dec->not_replayable).find("sqrt is not correctly rounded") !=
          std::string::npos);
  REQUIRE(NotReplayableText(static_cast<NotReplayable>(77)) == "unknown reason 77");
}

TEST_CASE("step hyper codec round trips bit-exactly", "[aor][codec]") {
  const uint64_t seed = testing::TestSeed(7);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 10000; ++i) {
    StepHyper h;
    h.iteration = rng();
    h.skipped = (rng() & 7) == 0;
    h.lerp_first_moment = (rng() & 1) != 0;
    h.fma = (rng() & 1) != 0;
    h.l2_weight_decay = (rng() & 1) != 0;
    h.fused_width = h.lerp_first_moment ? static_cast<uint8_t>(rng() % 65) : 0;
    h.not_replayable = static_cast<NotReplayable>(rng() % (kMaxNotReplayable + 1));
    h.step = h.skipped ? rng() : rng() | 1;
    h.lr = unit(rng) * 1e-2;
    h.beta1 = unit(rng);
    h.beta2 = std::nextafter(1.0, 0.0) * unit(rng);
    h.eps = unit(rng) * 1e-6;
    h.weight_decay = unit(rng);
    h.clip_coef = h.skipped && (i & 1) ? std::numeric_limits<double>::quiet_NaN() : unit(rng);
    h.grad_scale = std::ldexp(1.0, -static_cast<int>(rng() % 32));
    REQUIRE(ValidateStepHyper(h).ok());
    const auto enc = EncodeStepHyper(h);
    auto dec = DecodeStepHyper(enc.data(), enc.size());
    REQUIRE(dec.ok());
    RequireSame(*dec, h);
  }
}

TEST_CASE("step hyper codec rejects malformed records", "[aor][codec]") {
  std::vector<uint8_t> buf(kGolden, kGolden + kStepHyperWireSize);

  SECTION("size") {
    RequireRejected(buf.data(), 79, "expected 80 bytes, got 79");
    buf.push_back(0);
    RequireRejected(buf.data(), 81, "expected 80 bytes, got 81");
    RequireRejected(nullptr, 0, "expected 80 bytes, got 0");
    RequireRejected(buf.data(), 8, "got 8");
  }
  SECTION("version") {
    buf[0] = 2;
    RequireRejected(buf.data(), buf.size(), "unsupported version 2");
    buf[0] = 0;
    RequireRejected(buf.data(), buf.size(), "unsupported version 0");
  }
  SECTION("flags and reserved bytes") {
    buf[1] = 0x10;
    RequireRejected(buf.data(), buf.size(), "flags 0x10 has unknown bits");
    buf[1] = 0x81;
    RequireRejected(buf.data(), buf.size(), "flags 0x81");
    buf[1] = 0;
    for (size_t i = 4; i < 8; ++i) {
      buf[i] = 1;
      RequireRejected(buf.data(), buf.size(), "reserved byte " + std::to_string(i));
      buf[i] = 0;
    }
  }
  SECTION("form bytes") {
    buf[2] = 8;  // fused_width without the lerp flag
    RequireRejected(buf.data(), buf.size(), "fused_width = 8 without lerp_first_moment");
    buf[1] = 0x02;
    buf[2] = 65;
    RequireRejected(buf.data(), buf.size(), "fused_width = 65 (must be at most 64)");
    buf[2] = 0;
    buf[3] = kMaxNotReplayable + 1;
    RequireRejected(buf.data(), buf.size(), "not_replayable = 5 (unknown reason)");
  }
  SECTION("field values name the field") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    struct Case {
      double StepHyper::*field;
      double value;
      const char* needle;
    };
    const Case cases[] = {
        {&StepHyper::lr, nan, "lr is NaN"},
        {&StepHyper::lr, -1e-3, "lr = -0.001"},
        {&StepHyper::lr, inf, "lr = inf"},
        {&StepHyper::beta1, 1.0, "beta1 = 1"},
        {&StepHyper::beta1, nan, "beta1 is NaN"},
        {&StepHyper::beta2, -0.5, "beta2 = -0.5"},
        {&StepHyper::eps, inf, "eps = inf"},
        {&StepHyper::eps, -1e-8, "eps = -1e-08"},
        {&StepHyper::weight_decay, nan, "weight_decay is NaN"},
        {&StepHyper::clip_coef, 1.5, "clip_coef = 1.5"},
        {&StepHyper::clip_coef, nan, "clip_coef is NaN"},
        {&StepHyper::grad_scale, 0.0, "grad_scale = 0"},
        {&StepHyper::grad_scale, inf, "grad_scale = inf"},
    };
    for (const Case& c : cases) {
      StepHyper h = GoldenHyper();
      h.*c.field = c.value;
      const auto enc = EncodeStepHyper(h);
      RequireRejected(enc.data(), enc.size(), c.needle);
      REQUIRE_FALSE(ValidateStepHyper(h).ok());
    }
    StepHyper h = GoldenHyper();
    h.step = 0;
    const auto enc = EncodeStepHyper(h);
    RequireRejected(enc.data(), enc.size(), "step = 0");
  }
  SECTION("a skipped step may carry a NaN clip_coef and step 0, nothing else") {
    StepHyper h = GoldenHyper();
    h.skipped = true;
    h.step = 0;
    h.clip_coef = std::numeric_limits<double>::quiet_NaN();
    auto enc = EncodeStepHyper(h);
    auto dec = DecodeStepHyper(enc.data(), enc.size());
    REQUIRE(dec.ok());
    REQUIRE(dec->skipped);
    REQUIRE(std::isnan(dec->clip_coef));
    h.lr = std::numeric_limits<double>::quiet_NaN();
    enc = EncodeStepHyper(h);
    RequireRejected(enc.data(), enc.size(), "lr is NaN");
  }
}

TEST_CASE("step hyper codec: garbage is rejected or canonical", "[aor][codec]") {
  // Random records, and random records with a valid header: decoding never crashes, and
  // anything accepted is valid and re-encodes to the same bytes (no two encodings of a value).
  const uint64_t seed = testing::TestSeed(11);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    uint8_t b[kStepHyperWireSize];
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    if (i % 2) {
      b[0] = kStepHyperWireVersion;
      b[1] &= 1;
      std::memset(b + 2, 0, 6);
      if (i % 4 == 1) {  // the form fields, valid ones
        b[1] |= 0x0e;
        b[2] = static_cast<uint8_t>(rng() % 65);
        b[3] = static_cast<uint8_t>(rng() % (kMaxNotReplayable + 1));
      }
    }
    auto r = DecodeStepHyper(b, sizeof b);
    if (!r.ok()) {
      REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
      REQUIRE(r.status().message().rfind("step hyper-parameters: ", 0) == 0);
      continue;
    }
    ++accepted;
    REQUIRE(ValidateStepHyper(*r).ok());
    const auto enc = EncodeStepHyper(*r);
    REQUIRE(std::memcmp(enc.data(), b, sizeof b) == 0);
  }
  // Sanity of the generator itself: random doubles are out of range almost always.
  REQUIRE(accepted < 200);
}

}  // namespace
}  // namespace reft::aor
