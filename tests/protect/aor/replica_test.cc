// AOR end to end (docs/protection.md "AOR"): an owner advanced the way a trainer would call the
// library (whole shard, one call, one thread, StepHyper in memory, native gradients) and a
// replica fed the way reftd would be (hyper-parameters through the wire codec, gradients
// re-materialised through the fp16/bf16 converters, the shard cut into uneven chunks each
// replayed by its own AorReplica with 1, 2 and 3 threads) must be bit-identical after 1000
// iterations; a single flipped bit anywhere in the replica's inputs must make them differ or
// be refused. Plus the replica's staleness rules.

#include "reft/aor/replica.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "aor_sim.h"
#include "reft/aor/adamw.h"
#include "reft/aor/half.h"
#include "reft/aor/hyper_codec.h"
#include "test_support.h"

namespace reft::aor {
namespace {

using testing::GradMode;
using testing::StepInput;
using testing::TrainingLoop;

/// Lets a negative test corrupt what the replica receives at one iteration.
struct Mutation {
  /// Applied to the encoded hyper-parameters and the replica's gradient copy; returns whether
  /// it mutated (a mutation fires once, at the first iteration it accepts).
  std::function<bool(uint64_t iteration, uint8_t* hyper, std::vector<uint8_t>* grad,
                     GradDtype dtype)>
      apply;
};

struct RunResult {
  std::vector<float> owner_p, owner_m, owner_v;
  std::vector<float> replica_p, replica_m, replica_v;
  uint64_t owner_step = 0;
  uint64_t skipped = 0;
  Status replica_status;  ///< first failure of any replica chunk
  bool mutated = false;
  std::vector<uint64_t> replica_iteration, replica_step;

  bool Identical() const {
    const size_t bytes = owner_p.size() * sizeof(float);
    return std::memcmp(owner_p.data(), replica_p.data(), bytes) == 0 &&
           std::memcmp(owner_m.data(), replica_m.data(), bytes) == 0 &&
           std::memcmp(owner_v.data(), replica_v.data(), bytes) == 0;
  }
};

/// The replica's copy of an iteration's gradient: 16-bit gradients alternate between being
/// widened to fp32 (exact) and being widened then narrowed back to their own dtype (identity),
/// so the replica never sees the owner's bytes unchanged through the same dtype path.
std::vector<uint8_t> ReplicaGradient(const StepInput& in, size_t n, GradDtype* dtype) {
  *dtype = in.dtype;
  if (in.dtype == GradDtype::kFloat32) return in.grad;
  const bool fp16 = in.dtype == GradDtype::kFloat16;
  std::vector<uint16_t> src(n);
  std::memcpy(src.data(), in.grad.data(), 2 * n);
  std::vector<uint8_t> out;
  if (in.hyper.iteration % 2 == 0) {
    out.resize(4 * n);
    for (size_t i = 0; i < n; ++i) {
      const float f = fp16 ? HalfToFloat(src[i]) : BFloat16ToFloat(src[i]);
      std::memcpy(&out[4 * i], &f, 4);
    }
    *dtype = GradDtype::kFloat32;
  } else {
    out.resize(2 * n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b =
          fp16 ? FloatToHalf(HalfToFloat(src[i])) : FloatToBFloat16(BFloat16ToFloat(src[i]));
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

RunResult Run(GradMode mode, size_t n, int iterations, uint64_t seed,
              const Mutation* mutation = nullptr) {
  TrainingLoop loop(mode, n, iterations, seed);
  RunResult r;
  loop.InitialState(&r.owner_p, &r.owner_m, &r.owner_v);
  r.replica_p = r.owner_p;
  r.replica_m = r.owner_m;
  r.replica_v = r.owner_v;
  const AdamWState owner{r.owner_p.data(), r.owner_m.data(), r.owner_v.data(), n};

  // Uneven chunks, none a multiple of the kernel's 16-element alignment or block size.
  const size_t cut[4] = {0, n / 3 - 5, 2 * n / 3 + 7, n};
  std::vector<AorReplica> replicas;
  for (int c = 0; c < 3; ++c) {
    const size_t off = cut[c], len = cut[c + 1] - cut[c];
    replicas.emplace_back(AdamWState{r.replica_p.data() + off, r.replica_m.data() + off,
                                     r.replica_v.data() + off, len},
                          /*iteration=*/0, /*step=*/0, /*threads=*/c + 1);
  }

  for (int it = 0; it < iterations; ++it) {
    const StepInput in = loop.Next();
    // Owner: what a trainer's optimizer step does, one call over its whole shard.
    const Status os = AdamWUpdate(owner, in.hyper, in.grad.data(), in.dtype, n, 1);
    REQUIRE(os.ok());
    r.skipped += in.hyper.skipped;

    // Replica: bytes from the socket, gradients re-materialised, chunked and threaded.
    auto wire = EncodeStepHyper(in.hyper);
    GradDtype dtype;
    std::vector<uint8_t> grad = ReplicaGradient(in, n, &dtype);
    if (mutation && !r.mutated)
      r.mutated = mutation->apply(in.hyper.iteration, wire.data(), &grad, dtype);
    for (int c = 0; c < 3; ++c) {
      const uint8_t* g = grad.data() + cut[c] * GradDtypeSize(dtype);
      const Status st =
          replicas[c].ApplyEncoded(wire.data(), wire.size(), g, dtype, cut[c + 1] - cut[c]);
      if (!st.ok() && r.replica_status.ok()) r.replica_status = st;
    }
  }
  r.owner_step = loop.step();
  for (const auto& rep : replicas) {
    r.replica_iteration.push_back(rep.iteration());
    r.replica_step.push_back(rep.step());
  }
  return r;
}

TEST_CASE("AOR replica is bit-identical to the owner after 1000 iterations", "[aor][replica]") {
  const GradMode mode =
      GENERATE(GradMode::kFp32, GradMode::kFp16, GradMode::kBf16, GradMode::kMixed);
  const uint64_t seed = reft::testing::TestSeed(20240601);
  INFO("mode " << GradModeName(mode) << " seed " << seed);
  const size_t n = 12345;
  const int iterations = 1000;
  const RunResult r = Run(mode, n, iterations, seed);
  INFO("replica status " << r.replica_status.ToString());
  REQUIRE(r.replica_status.ok());

  // The run exercised what it claims: skipped steps, and a state that moved a long way from
  // its start and stayed finite.
  INFO("skipped " << r.skipped);
  REQUIRE(r.skipped >= 5);
  REQUIRE(r.skipped <= iterations / 4);
  REQUIRE(r.owner_step == iterations - r.skipped);
  for (size_t c = 0; c < 3; ++c) {
    REQUIRE(r.replica_iteration[c] == static_cast<uint64_t>(iterations));
    REQUIRE(r.replica_step[c] == r.owner_step);
  }
  size_t nonzero_v = 0;
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(std::isfinite(r.owner_p[i]));
    REQUIRE(std::isfinite(r.owner_m[i]));
    REQUIRE(std::isfinite(r.owner_v[i]));
    nonzero_v += r.owner_v[i] > 0;
  }
  REQUIRE(nonzero_v > n * 9 / 10);

  REQUIRE(std::memcmp(r.owner_p.data(), r.replica_p.data(), n * 4) == 0);
  REQUIRE(std::memcmp(r.owner_m.data(), r.replica_m.data(), n * 4) == 0);
  REQUIRE(std::memcmp(r.owner_v.data(), r.replica_v.data(), n * 4) == 0);
}

/// Flips `bit` of the little-endian u64/f64 at `offset` of the first non-skipped record at or
/// after iteration `from` (for clip_coef, one below 1 so the flipped value stays in range).
Mutation FlipHyperBit(size_t offset, int bit, uint64_t from = 500) {
  return Mutation{[=](uint64_t it, uint8_t* wire, std::vector<uint8_t>*, GradDtype) {
    if (it < from || (wire[1] & 1)) return false;
    if (offset == 64) {  // clip_coef
      double clip;
      std::memcpy(&clip, wire + 64, 8);
      if (!(clip < 1.0)) return false;
    }
    wire[offset + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    return true;
  }};
}

TEST_CASE("AOR: one flipped bit in the replica's inputs is never silently absorbed",
          "[aor][replica]") {
  const uint64_t seed = reft::testing::TestSeed(99);
  INFO("seed " << seed);
  const size_t n = 3001;
  const int iterations = 1000;
  SECTION("control: the unmutated run with this seed is identical") {
    // So any difference in the other sections comes from the flipped bit alone.
    REQUIRE(Run(GradMode::kMixed, n, iterations, seed).Identical());
  }
  SECTION("one bit of each floating-point field: accepted, and the states differ") {
    struct Field {
      const char* name;
      size_t offset;
    };
    // Bit 45 of a double is significant in fp32 (the kernel's precision) and keeps the value
    // in range (the exponent is untouched).
    const Field fields[] = {{"lr", 24},           {"beta1", 32},     {"beta2", 40},     {"eps", 48},
                            {"weight_decay", 56}, {"clip_coef", 64}, {"grad_scale", 72}};
    for (const Field& f : fields) {
      INFO("field " << f.name);
      const Mutation mut = FlipHyperBit(f.offset, 45);
      const RunResult r = Run(GradMode::kMixed, n, iterations, seed, &mut);
      REQUIRE(r.mutated);
      INFO(r.replica_status.ToString());
      REQUIRE(r.replica_status.ok());  // a plausible value: accepted...
      REQUIRE(std::memcmp(r.owner_p.data(), r.replica_p.data(), n * 4) != 0);  // ...and visible
    }
  }
  SECTION("lowest fp32-significant bit of lr (bit 29): one ulp of the step size") {
    const Mutation mut = FlipHyperBit(24, 29);
    const RunResult r = Run(GradMode::kMixed, n, iterations, seed, &mut);
    REQUIRE(r.mutated);
    REQUIRE(r.replica_status.ok());
    REQUIRE_FALSE(r.Identical());
  }
  SECTION("skipped flag, iteration and step counters: refused, replica stale") {
    for (size_t offset : {size_t{1}, size_t{8}, size_t{16}}) {
      INFO("byte offset " << offset);
      const Mutation mut{[=](uint64_t it, uint8_t* wire, std::vector<uint8_t>*, GradDtype) {
        if (it < 500 || (wire[1] & 1)) return false;
        wire[offset] ^= 1;
        return true;
      }};
      const RunResult r = Run(GradMode::kMixed, n, iterations, seed, &mut);
      REQUIRE(r.mutated);
      REQUIRE_FALSE(r.replica_status.ok());
      // A duplicate iteration (bit 0 of an odd iteration) is refused as InvalidArgument; the
      // next message is then a gap. Every other case is a gap or a step mismatch: kLost.
      REQUIRE((r.replica_status.code() == StatusCode::kLost ||
               r.replica_status.code() == StatusCode::kInvalidArgument));
    }
  }
  SECTION("one bit of one gradient element") {
    // The top mantissa bit of a non-zero element (a lower bit can legitimately vanish in the
    // rounding of m and v: 0.1·g next to m).
    const Mutation mut{[](uint64_t it, uint8_t* wire, std::vector<uint8_t>* grad, GradDtype dtype) {
      if (it < 500 || (wire[1] & 1)) return false;
      const size_t es = GradDtypeSize(dtype), n = grad->size() / es;
      const int bit = dtype == GradDtype::kFloat32 ? 22 : dtype == GradDtype::kFloat16 ? 9 : 6;
      for (size_t i = n / 2; i < n; ++i) {
        uint8_t* e = grad->data() + i * es;
        if (std::all_of(e, e + es, [](uint8_t b) { return b == 0 || b == 0x80; })) continue;
        e[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        return true;
      }
      return false;
    }};
    const RunResult r = Run(GradMode::kMixed, n, iterations, seed, &mut);
    REQUIRE(r.mutated);
    REQUIRE(r.replica_status.ok());
    REQUIRE_FALSE(r.Identical());
  }
}

// ---- staleness and argument rules -------------------------------------------------------

struct Small {
  static constexpr size_t kN = 37;
  std::vector<float> p = std::vector<float>(kN, 1.0f), m = std::vector<float>(kN, 0.0f),
                     v = std::vector<float>(kN, 0.0f);
  std::vector<float> g = std::vector<float>(kN, 0.25f);
  AdamWState state() { return {p.data(), m.data(), v.data(), kN}; }
};

StepHyper Hyper(uint64_t iteration, uint64_t step, bool skipped = false) {
  StepHyper h;
  h.iteration = iteration;
  h.step = step;
  h.lr = 1e-3;
  h.weight_decay = 0.01;
  h.skipped = skipped;
  return h;
}

TEST_CASE("AOR replica ApplyInto moves the state between slots like Apply", "[aor][replica]") {
  Small a, b;  // a: in place; b: the replica ping-pongs between two "slots"
  Small other;
  AorReplica in_place(a.state(), 10, 8, 1);
  AorReplica slots(b.state(), 10, 8, 2);
  REQUIRE(in_place.Apply(Hyper(11, 9), a.g.data(), GradDtype::kFloat32, Small::kN).ok());
  const auto b_before = b.p;
  REQUIRE(slots.ApplyInto(other.state(), Hyper(11, 9), b.g.data(), GradDtype::kFloat32, Small::kN)
              .ok());
  REQUIRE(b.p == b_before);  // the previous slot is untouched
  REQUIRE(slots.state().param == other.p.data());
  REQUIRE(other.p == a.p);
  REQUIRE(other.m == a.m);
  REQUIRE(other.v == a.v);
  REQUIRE(slots.iteration() == 11);
  REQUIRE(slots.step() == 9);
  // A gap: stale, nothing written into the destination, the views stay.
  const auto dest_before = b.p;
  Status st = slots.ApplyInto(b.state(), Hyper(13, 10), b.g.data(), GradDtype::kFloat32, Small::kN);
  REQUIRE(st.code() == StatusCode::kLost);
  REQUIRE(b.p == dest_before);
  REQUIRE(slots.state().param == other.p.data());
  // Back in the other direction after a resync.
  slots.Resynchronized(13, 10);
  REQUIRE(slots.ApplyInto(b.state(), Hyper(14, 11), b.g.data(), GradDtype::kFloat32, Small::kN)
              .ok());
  REQUIRE(slots.state().param == b.p.data());
}

TEST_CASE("AOR replica staleness", "[aor][replica]") {
  Small s;
  AorReplica rep(s.state(), /*iteration=*/10, /*step=*/8, /*threads=*/2);
  REQUIRE(rep.Apply(Hyper(11, 9), s.g.data(), GradDtype::kFloat32, Small::kN).ok());
  REQUIRE(rep.iteration() == 11);
  REQUIRE(rep.step() == 9);

  SECTION("a skipped iteration advances the iteration only and touches nothing") {
    const auto before = s.p;
    std::vector<float> poison(Small::kN, std::numeric_limits<float>::quiet_NaN());
    REQUIRE(rep.Apply(Hyper(12, 9, true), poison.data(), GradDtype::kFloat32, Small::kN).ok());
    REQUIRE(rep.iteration() == 12);
    REQUIRE(rep.step() == 9);
    REQUIRE(s.p == before);
    REQUIRE(rep.Apply(Hyper(13, 10), s.g.data(), GradDtype::kFloat32, Small::kN).ok());
  }
  SECTION("a duplicate is refused without harm") {
    const auto before = s.p;
    Status st = rep.Apply(Hyper(11, 9), s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kInvalidArgument);
    REQUIRE(st.message().find("already applied") != std::string::npos);
    REQUIRE_FALSE(rep.stale());
    REQUIRE(s.p == before);
    REQUIRE(rep.Apply(Hyper(12, 10), s.g.data(), GradDtype::kFloat32, Small::kN).ok());
  }
  SECTION("a gap makes it stale until resynchronised") {
    const auto before = s.p;
    Status st = rep.Apply(Hyper(13, 10), s.g.data(), GradDtype::kFloat32, Small::kN);
    INFO(st.ToString());
    REQUIRE(st.code() == StatusCode::kLost);
    REQUIRE(st.message().find("missed iterations 12..12") != std::string::npos);
    REQUIRE(st.message().find("resynchronise from the owner") != std::string::npos);
    REQUIRE(rep.stale());
    REQUIRE(s.p == before);
    // Even the message it was waiting for is refused now: the state is no longer trusted.
    st = rep.Apply(Hyper(12, 10), s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kLost);
    REQUIRE(s.p == before);
    // The daemon copies the owner's snapshot in, then:
    rep.Resynchronized(20, 17);
    REQUIRE_FALSE(rep.stale());
    REQUIRE(rep.Apply(Hyper(21, 18), s.g.data(), GradDtype::kFloat32, Small::kN).ok());
    REQUIRE(rep.iteration() == 21);
  }
  SECTION("a step count that disagrees with the owner's makes it stale") {
    Status st = rep.Apply(Hyper(12, 11), s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kLost);
    REQUIRE(st.message().find("carries optimizer step 11, replica expected 10") !=
            std::string::npos);
    REQUIRE(rep.stale());
  }
  SECTION("a skipped message that advances the step count makes it stale") {
    REQUIRE(rep.Apply(Hyper(12, 10, true), s.g.data(), GradDtype::kFloat32, Small::kN).code() ==
            StatusCode::kLost);
  }
  SECTION("back-pressure: the caller dropped an update") {
    rep.MarkStale("queue full at iteration 12");
    rep.MarkStale("second reason is ignored");
    Status st = rep.Apply(Hyper(12, 10), s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kLost);
    REQUIRE(st.message().find("queue full at iteration 12") != std::string::npos);
    REQUIRE(rep.stale_reason() == "queue full at iteration 12");
  }
  SECTION("bad arguments are refused without making it stale") {
    const auto before = s.p;
    REQUIRE(rep.Apply(Hyper(12, 10), s.g.data(), GradDtype::kFloat32, Small::kN - 1).code() ==
            StatusCode::kInvalidArgument);
    REQUIRE(rep.Apply(Hyper(12, 10), nullptr, GradDtype::kFloat32, Small::kN).code() ==
            StatusCode::kInvalidArgument);
    StepHyper bad = Hyper(12, 10);
    bad.lr = std::numeric_limits<double>::quiet_NaN();
    Status st = rep.Apply(bad, s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kInvalidArgument);
    REQUIRE(st.message().find("lr is NaN") != std::string::npos);
    const uint8_t junk[12] = {1};
    st = rep.ApplyEncoded(junk, sizeof junk, s.g.data(), GradDtype::kFloat32, Small::kN);
    REQUIRE(st.code() == StatusCode::kInvalidArgument);
    REQUIRE_FALSE(rep.stale());
    REQUIRE(s.p == before);
    REQUIRE(rep.Apply(Hyper(12, 10), s.g.data(), GradDtype::kFloat32, Small::kN).ok());
  }
}

}  // namespace
}  // namespace reft::aor
