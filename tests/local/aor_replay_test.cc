// AOR in reftd against a real store and LocalServer: ZeRO-1 jobs whose trainers update their
// own optimizer shard with aor::AdamWUpdate (the owner) and snapshot every step with the step's
// hyper-parameters; reftd's "aor/<opt>" region of every rank must equal rank dp+1's
// "unique/<opt>" bit for bit, produced by the host replay (the counters say so), with a copy
// only where there was no replica to replay from.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <thread>

#include "aor_client_steps.h"
#include "aor_sim.h"
#include "reft/aor/adamw.h"
#include "reft/aor/hyper_codec.h"
#include "reft/client.h"
#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "server_fixture.h"

using namespace reft;
using reft::aor::testing::GradMode;
using reft::testing::ToOptimizerStep;
using reft::aor::testing::StepInput;
using reft::aor::testing::TrainingLoop;
using reft::testing::ServerFixture;

namespace {

const char* GradDtypeName(GradMode m) {
  switch (m) {
    case GradMode::kFp16:
      return "float16";
    case GradMode::kBf16:
      return "bfloat16";
    default:
      return "float32";
  }
}

local::LocalServerOptions ServerOptions(int dp, uint32_t resync, bool device_optimizers = false) {
  local::LocalServerOptions o;
  o.copy_threads = dp + 1;
  o.aor_resync_steps = resync;
  o.aor_device_optimizers = device_optimizers;  // probation: the default, 3
  o.aor_threads = 2;
  o.peer_copy_timeout_ms = 10000;
  return o;
}

/// One ZeRO-1 trainer rank: replicated parameters, its optimizer shard (the owner's state),
/// the all-reduced gradient (identical on every rank), an RNG state (peer-copied).
struct Rank {
  int dp = 0;
  std::unique_ptr<Client> client;
  std::vector<float> opt;     // 3n: [master | exp_avg | exp_avg_sq]
  std::vector<uint8_t> grad;  // dp·n elements of the gradient dtype
  std::vector<uint8_t> params, rng;
  // Device variant: the optimizer shard and the gradient live in emulated device memory (reftd
  // pulls "unique/opt" and the gradient slice D2H), `opt` and `grad` stay empty.
  std::unique_ptr<EmulatedBuffer> device;
  float* opt_data = nullptr;
  uint8_t* grad_data = nullptr;
};

/// The job: dp ranks on one reftd, n optimizer elements per rank.
struct ZeroJob {
  ZeroJob(ServerFixture& f, int dp, size_t n, GradMode mode, uint64_t seed,
          bool on_device = false)
      : f(f), dp(dp), n(n), mode(mode), loop(mode, n * static_cast<size_t>(dp), 1000, seed) {
    std::vector<float> p, m, v;
    loop.InitialState(&p, &m, &v);  // the flat fp32 master weights of the whole SG
    const size_t esize = mode == GradMode::kFp32 ? 4 : 2;
    const auto params = reft::testing::RandomBytes(70001, seed);
    for (int d = 0; d < dp; ++d) {
      Rank r;
      r.dp = d;
      ClientOptions o;
      o.socket_path = f.socket;
      o.job = "zero1";
      o.dp = d;
      o.layout.dp = dp;
      o.layout.zero = 1;
      o.protection = "arc1+aor";
      auto c = Client::Connect(o);
      INFO(c.status().ToString());
      REQUIRE(c.ok());
      r.client = std::move(*c);
      const uint64_t grad_bytes = n * dp * esize;
      if (on_device) {
        auto dev = EmulatedBuffer::Create(12 * n + 64 + grad_bytes);
        REQUIRE(dev.ok());
        r.device = std::move(*dev);
        r.opt_data = static_cast<float*>(r.device->data());
        r.grad_data = static_cast<uint8_t*>(r.device->data()) + 12 * n + 64;
      } else {
        r.opt.resize(3 * n);
        r.grad.assign(grad_bytes, 0);
        r.opt_data = r.opt.data();
        r.grad_data = r.grad.data();
      }
      std::copy(p.begin() + d * n, p.begin() + (d + 1) * n, r.opt_data);
      std::fill(r.opt_data + n, r.opt_data + 3 * n, 0.0f);
      std::memset(r.grad_data, 0, grad_bytes);
      r.params = params;
      r.rng = reft::testing::RandomBytes(64, seed + 100 + d);
      BufferOptions ob;
      ob.dtype = "uint8";
      REQUIRE(r.client->Register("params", r.params.data(), r.params.size(), ob).ok());
      ob.kind = BufferKind::kUnique;
      ob.dtype = "float32";
      ob.optimizer = true;
      if (on_device) ob.memory = MemoryLocation::kEmulated;
      REQUIRE(r.client->Register("opt", r.opt_data, 12 * n, ob).ok());
      BufferOptions og;
      og.kind = BufferKind::kGradient;
      og.dtype = GradDtypeName(mode);
      if (on_device) og.memory = MemoryLocation::kEmulated;
      REQUIRE(r.client->Register("grad", r.grad_data, grad_bytes, og).ok());
      BufferOptions orng;
      orng.kind = BufferKind::kUnique;
      REQUIRE(r.client->Register("rng", r.rng.data(), r.rng.size(), orng).ok());
      ranks.push_back(std::move(r));
    }
  }

  /// One training iteration on every rank: backward (the gradient), the owner's optimizer
  /// step on its own shard, then the snapshot of the iteration unless `snapshot` is false.
  /// `perturb` (rank, lr factor): that owner uses another learning rate (an optimizer that
  /// is not reft's kernel, as far as the replica can tell).
  StepInput Iterate(bool snapshot = true, std::pair<int, double> perturb = {-1, 1.0},
                    aor::NotReplayable declared = aor::NotReplayable::kReplayable) {
    StepInput in = loop.Next();
    in.hyper.not_replayable = declared;
    const size_t esize = aor::GradDtypeSize(in.dtype);
    // Every rank passes its fence before any rank steps: the gradient all-reduce of a real
    // job is that barrier. (Without it a rank could begin step s+1 while its ring predecessor
    // still copies its "unique/rng" of s−1, whose slot the store may then reuse.)
    for (auto& r : ranks) REQUIRE(r.client->Fence().ok());
    for (auto& r : ranks) {
      std::memcpy(r.grad_data, in.grad.data(), in.grad.size());
      aor::StepHyper h = in.hyper;
      if (r.dp == perturb.first) h.lr *= perturb.second;
      aor::AdamWState own{r.opt_data, r.opt_data + n, r.opt_data + 2 * n, n};
      REQUIRE(aor::AdamWUpdate(own, h, in.grad.data() + r.dp * n * esize, in.dtype, n).ok());
      for (auto& b : r.rng) b = static_cast<uint8_t>(b * 31 + 7);
      if (snapshot) {
        Status st = r.client->Snapshot(static_cast<int64_t>(in.hyper.iteration),
                                     ToOptimizerStep(in.hyper));
        INFO(st.ToString());
        REQUIRE(st.ok());
      }
    }
    return in;
  }

  void FenceAndCommit(int64_t step) {
    for (auto& r : ranks) REQUIRE(r.client->Fence().ok());
    for (auto& r : ranks)
      REQUIRE(r.client->WaitCommitted(step, std::chrono::seconds(20)).ValueOr(false));
  }

  std::vector<uint8_t> Region(int d, int64_t step, const std::string& name) {
    auto slot = f.store->Get({"zero1", 0, 0, d}, step);
    REQUIRE(slot.ok());
    auto idx = (*slot)->FindRegion(name);
    REQUIRE(idx.ok());
    const uint8_t* p = (*slot)->region_data(*idx);
    return std::vector<uint8_t>(p, p + (*slot)->region_size(*idx));
  }

  /// Every rank's "aor/opt" equals rank d+1's owner state and its "unique/opt", bit for bit.
  void CheckReplicas(int64_t step) {
    for (int d = 0; d < dp; ++d) {
      const int next = (d + 1) % dp;
      INFO("rank dp" << d << " holds dp" << next << "'s optimizer shard at step " << step);
      const auto aor_region = Region(d, step, "aor/opt");
      const auto unique = Region(next, step, "unique/opt");
      REQUIRE(aor_region.size() == 12 * n);
      CHECK(std::memcmp(aor_region.data(), ranks[next].opt_data, 12 * n) == 0);
      CHECK(aor_region == unique);
      CHECK(Region(d, step, "peer/rng") == ranks[next].rng);
    }
  }

  local::SessionInfo Info(int d) {
    for (const auto& s : f.server->Sessions()) {
      if (s.joined && s.rank.dp == d) return s;
    }
    FAIL("no session of dp" << d);
    return {};
  }

  ServerFixture& f;
  int dp;
  size_t n;
  GradMode mode;
  TrainingLoop loop;
  std::vector<Rank> ranks;
};

}  // namespace

TEST_CASE("AOR: reftd replays every rank's neighbour shard bit-exactly and copies only once",
          "[local][aor]") {
  const uint64_t seed = reft::testing::TestSeed(21);
  struct Case {
    int dp;
    GradMode mode;
  };
  for (const Case c :
       {Case{2, GradMode::kFp32}, Case{3, GradMode::kBf16}, Case{4, GradMode::kFp16}}) {
    DYNAMIC_SECTION("dp " << c.dp << " " << GradDtypeName(c.mode) << " gradients") {
      INFO("seed " << seed);
      ServerFixture f(ServerOptions(c.dp, 0));
      const size_t n = 3 * 4096 + 77;  // odd: several replay blocks and threads with tails
      ZeroJob job(f, c.dp, n, c.mode, seed);
      const int iterations = 40;
      bool saw_skip = false, saw_clip = false;
      std::set<double> lrs;
      for (int it = 1; it <= iterations; ++it) {
        const StepInput in = job.Iterate();
        saw_skip |= in.hyper.skipped;
        saw_clip |= !in.hyper.skipped && in.hyper.clip_coef < 1.0;
        lrs.insert(in.hyper.lr);
      }
      job.FenceAndCommit(iterations);
      job.CheckReplicas(iterations);
      for (int d = 0; d < c.dp; ++d) {
        const local::SessionInfo s = job.Info(d);
        INFO("dp" << d << ": last copy: " << s.aor_last_copy);
        CHECK(s.aor_copies == 1);  // the first snapshot of the session
        CHECK(s.aor_replays == iterations - 1);
        CHECK(s.aor_verified == 3);  // probation: the first three replays were compared
        CHECK(s.aor_mismatches == 0);
        CHECK(s.aor_state == "on");
        CHECK(s.peer_copies == iterations);  // "peer/rng" is a copy every step
        CHECK(s.aor_last_copy.find("step 1 'opt': first snapshot of this session") !=
              std::string::npos);
      }
      CHECK(lrs.size() > 30);  // the schedule changes every step
      CHECK(saw_clip);
      if (c.mode == GradMode::kFp16) CHECK(saw_skip);
    }
  }
}

TEST_CASE("AOR: device gradients and optimizer shards are pulled by reftd before the fence",
          "[local][aor]") {
  if (EmulatedBuffer::Create(4096).status().code() == StatusCode::kUnsupported) {
    WARN("this build has no device backends");
    return;
  }
  const uint64_t seed = reft::testing::TestSeed(25);
  INFO("seed " << seed);
  // Device optimizers are replayed only when the operator says so (the next test case).
  ServerFixture f(ServerOptions(2, 0, /*device_optimizers=*/true));
  const size_t n = 4099;
  // Emulated device memory: reftd D2H-copies "unique/opt" and the neighbour's gradient slice
  // into its staging before replying to snapshot_staged (the fence); the trainer overwrites the
  // gradient right after the fence, so a replay reading it later would see the next step's.
  ZeroJob job(f, 2, n, GradMode::kBf16, seed, /*on_device=*/true);
  for (int it = 1; it <= 15; ++it) job.Iterate();
  job.FenceAndCommit(15);
  job.CheckReplicas(15);
  for (int d = 0; d < 2; ++d) {
    CHECK(job.Info(d).aor_copies == 1);
    CHECK(job.Info(d).aor_replays == 14);
  }
}

TEST_CASE("AOR: an optimizer shard in device memory is copied, not replayed, by default",
          "[local][aor]") {
  if (EmulatedBuffer::Create(4096).status().code() == StatusCode::kUnsupported) {
    WARN("this build has no device backends");
    return;
  }
  const uint64_t seed = reft::testing::TestSeed(26);
  INFO("seed " << seed);
  ServerFixture f(ServerOptions(2, 0));
  const size_t n = 2051;
  // The emulated device stands in for CUDA/ROCm: the owner's GPU kernels are not what the host
  // replays, so AOR is off from the registration on and the shard is copied every step.
  ZeroJob job(f, 2, n, GradMode::kBf16, seed, /*on_device=*/true);
  for (int d = 0; d < 2; ++d) {
    CHECK(job.Info(d).aor_state == "off: optimizer on emulated device");
    auto state = job.ranks[d].client->AorState();
    REQUIRE(state.ok());
    CHECK(state->state == "off: optimizer on emulated device");
  }
  for (int it = 1; it <= 6; ++it) job.Iterate();
  job.FenceAndCommit(6);
  job.CheckReplicas(6);  // copies are the owner's state too
  for (int d = 0; d < 2; ++d) {
    const local::SessionInfo s = job.Info(d);
    CHECK(s.aor_copies == 6);
    CHECK(s.aor_replays == 0);
    CHECK_THAT(s.aor_last_copy, Catch::EndsWith("AOR off: optimizer on emulated device"));
  }
}

TEST_CASE("AOR: a missed snapshot makes the replica stale, a copy resynchronises it",
          "[local][aor]") {
  const uint64_t seed = reft::testing::TestSeed(22);
  INFO("seed " << seed);
  ServerFixture f(ServerOptions(2, 0));
  const size_t n = 2000;
  ZeroJob job(f, 2, n, GradMode::kFp32, seed);
  for (int it = 1; it <= 12; ++it) job.Iterate(/*snapshot=*/it != 7);  // training goes on at 7
  job.FenceAndCommit(12);
  job.CheckReplicas(12);
  for (int d = 0; d < 2; ++d) {
    const local::SessionInfo s = job.Info(d);
    INFO(s.aor_last_copy);
    CHECK(s.aor_copies == 2);   // step 1, and step 8 after the gap
    CHECK(s.aor_replays == 9);  // 2..6 and 9..12
    CHECK_THAT(s.aor_last_copy, Catch::StartsWith("step 8 'opt': aor replica stale at iteration "
                                                  "6 (missed iterations 7..7)"));
  }
}

TEST_CASE("AOR: a replay that differs from the owner turns AOR off for the shard", "[local][aor]") {
  const uint64_t seed = reft::testing::TestSeed(23);
  // Rank 1's owner deviates once (one fp32 ulp-scale change of its lr), as an optimizer whose
  // rounding is not the declared one would: at step 3, inside rank 0's probation (replays 2..4
  // compared), or at step 6, found by the resync that compares one replay in 4 (step 8).
  const int deviation = GENERATE(3, 6);
  const int found = deviation == 3 ? 3 : 8;
  INFO("seed " << seed << ", owner deviates at step " << deviation);
  ServerFixture f(ServerOptions(2, 4));
  const size_t n = 1500;
  ZeroJob job(f, 2, n, GradMode::kFp32, seed);
  for (int it = 1; it <= 13; ++it) {
    job.Iterate(true, it == deviation ? std::make_pair(1, 1.0 + std::ldexp(1.0, -20))
                                      : std::make_pair(-1, 1.0));
  }
  job.FenceAndCommit(13);
  job.CheckReplicas(13);  // exact: copied from the owner since the mismatch
  const local::SessionInfo s0 = job.Info(0), s1 = job.Info(1);
  INFO(s0.aor_last_copy);
  const std::string off = "off: mismatch at step " + std::to_string(found);
  // Copied at 1 and after the mismatch, replayed at 2..found.
  CHECK(s0.aor_replays == static_cast<uint64_t>(found - 1));
  CHECK(s0.aor_copies == static_cast<uint64_t>(1 + 13 - found));
  CHECK(s0.aor_mismatches == 1);
  CHECK(s0.aor_verified == (deviation == 3 ? 2u : 4u));  // 2, 3; or 2, 3, 4 and 8
  CHECK(s0.aor_state == off);
  CHECK(s0.aor_last_copy == "step 13 'opt': AOR " + off);
  // Rank 1 replays rank 0's owner, which never deviated: probation 2..4, then 8 and 12.
  CHECK(s1.aor_copies == 1);
  CHECK(s1.aor_replays == 12);
  CHECK(s1.aor_verified == 5);
  CHECK(s1.aor_mismatches == 0);
  CHECK(s1.aor_state == "on");
  CHECK(s0.aor_replay_seconds > 0);
  CHECK(s0.aor_copy_seconds > 0);
  // The trainer sees it (AorState), and a restore keeps AOR off and says so.
  auto state = job.ranks[0].client->AorState();
  REQUIRE(state.ok());
  CHECK(state->state == off);
  CHECK(state->mismatches == 1);
  auto step = job.ranks[0].client->Restore();
  REQUIRE(step.ok());
  CHECK(step->value_or(-1) == 13);
  auto report = job.ranks[0].client->LastRestore();
  REQUIRE(report.has_value());
  CHECK(report->aor == off);
  CHECK(job.Info(0).aor_state == off);
}

TEST_CASE("AOR: a trainer that declares its update not replayable is copied", "[local][aor]") {
  const uint64_t seed = reft::testing::TestSeed(27);
  INFO("seed " << seed);
  ServerFixture f(ServerOptions(2, 0));
  const size_t n = 1024;
  ZeroJob job(f, 2, n, GradMode::kFp32, seed);
  // The trainer found its sqrt is not IEEE's from step 3 on (as reft.OptimizerStep.from_torch
  // says for torch's MKL sqrt): never silently inexact.
  for (int it = 1; it <= 6; ++it) {
    job.Iterate(
        true, {-1, 1.0},
        it >= 3 ? aor::NotReplayable::kSqrtNotCorrectlyRounded : aor::NotReplayable::kReplayable);
  }
  job.FenceAndCommit(6);
  job.CheckReplicas(6);
  for (int d = 0; d < 2; ++d) {
    const local::SessionInfo s = job.Info(d);
    CHECK(s.aor_replays == 1);  // step 2
    CHECK(s.aor_copies == 5);
    CHECK(s.aor_mismatches == 0);
    CHECK_THAT(s.aor_state, Catch::StartsWith("off: the owner's sqrt is not correctly rounded"));
  }
}

TEST_CASE("AOR: a restarted trainer restores its own shard, the gradient is not restored",
          "[local][aor]") {
  const uint64_t seed = reft::testing::TestSeed(24);
  ServerFixture f(ServerOptions(2, 0));
  const size_t n = 1000;
  ZeroJob job(f, 2, n, GradMode::kBf16, seed);
  for (int it = 1; it <= 5; ++it) job.Iterate();
  job.FenceAndCommit(5);
  const auto want = job.ranks[1].opt;
  REQUIRE(want.size() == 3 * n);
  // Rank 1's trainer restarts: the same buffers, the gradient included (it need not be).
  REQUIRE(job.ranks[1].client->Close().ok());
  std::fill(job.ranks[1].opt.begin(), job.ranks[1].opt.end(), 0.0f);
  std::fill(job.ranks[1].grad.begin(), job.ranks[1].grad.end(), 0xAB);
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "zero1";
  o.dp = 1;
  o.layout.dp = 2;
  o.layout.zero = 1;
  o.protection = "arc1+aor";
  auto c = Client::Connect(o);
  REQUIRE(c.ok());
  Rank& r = job.ranks[1];
  r.client = std::move(*c);
  BufferOptions ob;
  REQUIRE(r.client->Register("params", r.params.data(), r.params.size(), ob).ok());
  ob.kind = BufferKind::kUnique;
  ob.dtype = "float32";
  ob.optimizer = true;
  REQUIRE(r.client->Register("opt", r.opt.data(), 4 * r.opt.size(), ob).ok());
  BufferOptions og;
  og.kind = BufferKind::kGradient;
  og.dtype = "bf16";
  REQUIRE(r.client->Register("grad", r.grad.data(), r.grad.size(), og).ok());
  BufferOptions orng;
  orng.kind = BufferKind::kUnique;
  REQUIRE(r.client->Register("rng", r.rng.data(), r.rng.size(), orng).ok());
  auto step = r.client->Restore();
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  REQUIRE(step->value_or(-1) == 5);
  CHECK(r.opt == want);
  CHECK(std::all_of(r.grad.begin(), r.grad.end(), [](uint8_t b) { return b == 0xAB; }));
  // Training goes on; the new session's first snapshot resynchronises by copy, then replays.
  for (int it = 6; it <= 9; ++it) job.Iterate();
  job.FenceAndCommit(9);
  job.CheckReplicas(9);
  const local::SessionInfo s1 = job.Info(1);
  CHECK(s1.aor_copies == 1);
  CHECK(s1.aor_replays == 3);
  const local::SessionInfo s0 = job.Info(0);  // rank 0 never stopped replaying
  CHECK(s0.aor_copies == 1);
  CHECK(s0.aor_replays == 8);
}

TEST_CASE("AOR: clear errors for layouts the replay cannot work with", "[local][aor]") {
  ServerFixture f(ServerOptions(2, 0));
  ClientOptions o;
  o.socket_path = f.socket;
  o.job = "bad";
  o.layout.dp = 2;
  o.protection = "arc1+aor";
  // ZeRO stage 0 with aor.
  auto c0 = Client::Connect(o);
  REQUIRE(c0.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(c0.status().message(), Catch::Contains("ZeRO stage is 0 (must be 1"));
  o.layout.zero = 1;
  auto c = Client::Connect(o);
  REQUIRE(c.ok());
  const size_t n = 100;
  std::vector<float> opt(3 * n);
  std::vector<float> grad(2 * n - 1);  // one element short of dp·n
  BufferOptions ob;
  ob.kind = BufferKind::kUnique;
  ob.dtype = "float32";
  ob.optimizer = true;
  REQUIRE((*c)->Register("opt", opt.data(), 4 * opt.size(), ob).ok());
  BufferOptions og;
  og.kind = BufferKind::kGradient;
  og.dtype = "float32";
  REQUIRE((*c)->Register("grad", grad.data(), 4 * grad.size(), og).ok());
  OptimizerStep hs;
  hs.step = 1;
  hs.lr = 1e-3;
  Status st = (*c)->Snapshot(1, hs);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(),
             Catch::Contains("199 float32 elements") && Catch::Contains("dp·n = 200"));
  // A right-sized gradient, but no hyper-parameters.
  std::vector<float> grad2(2 * n);
  og.dtype = "float32";
  BufferOptions o2 = ob;
  o2.gradient = "grad2";
  std::vector<float> opt2(3 * n);
  REQUIRE((*c)->Register("grad2", grad2.data(), 4 * grad2.size(), og).ok());
  REQUIRE((*c)->Register("opt2", opt2.data(), 4 * opt2.size(), o2).ok());
  st = (*c)->Snapshot(1, hs);  // 'opt' has two gradients to choose from now
  CHECK_THAT(st.message(), Catch::Contains("2 gradient buffers are registered"));
  // A gradient under a protection without aor is refused at once.
  ClientOptions plain = o;
  plain.job = "plain";
  plain.protection = "arc1";
  auto p = Client::Connect(plain);
  REQUIRE(p.ok());
  st = (*p)->Register("grad", grad2.data(), 4 * grad2.size(), og);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("read only by protection 'aor'"));

  // Missing and bad hyper-parameters, on a valid job.
  ClientOptions good = o;
  good.job = "good";
  auto g = Client::Connect(good);
  REQUIRE(g.ok());
  REQUIRE((*g)->Register("opt", opt.data(), 4 * opt.size(), ob).ok());
  REQUIRE((*g)->Register("grad", grad2.data(), 4 * grad2.size(), og).ok());
  st = (*g)->Snapshot(1);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("replays optimizer shard 'opt'") &&
                               Catch::Contains("pass them with the snapshot"));
  OptimizerStep bad = hs;
  bad.beta2 = 1.0;
  st = (*g)->Snapshot(1, bad);
  CHECK_THAT(st.message(), Catch::Contains("beta2 = 1"));
  st = (*g)->Snapshot(1, std::map<std::string, OptimizerStep>{{"nope", hs}});
  CHECK_THAT(st.message(), Catch::Contains("'nope', which is not a registered optimizer buffer"));
  st = (*g)->Snapshot(1, std::map<std::string, OptimizerStep>{});
  CHECK_THAT(st.message(), Catch::Contains("replays optimizer shard 'opt'"));
}

TEST_CASE("AOR: reftd checks what a client sends, whatever the client library checked",
          "[local][aor]") {
  using namespace reft::local_proto;
  ServerFixture f(ServerOptions(2, 0));
  auto sock = ConnectSeqpacket(f.socket);
  REQUIRE(sock.ok());
  const int fd = sock->get();
  Limits l;
  uint32_t id = 0;
  auto call = [&](MessageType t, const std::vector<uint8_t>& payload) {
    REQUIRE(SendFrame(fd, t, ++id, payload).ok());
    auto r = RecvFrame(fd, l, 5000);
    REQUIRE(r.ok());
    return std::move(*r);
  };
  auto error = [&](const Frame& r) {
    REQUIRE(r.header.type == MessageType::kError);
    ErrorReply e;
    REQUIRE(Decode(r.payload, l, &e).ok());
    return ToStatus(e);
  };
  Hello h;
  h.job = "raw";
  h.layout = {2, 1, 1, 0};
  h.protection = "aor";
  Status st = error(call(MessageType::kHello, Encode(h)));
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("ZeRO stage is 0"));
  h.layout.zero = 1;
  REQUIRE(call(MessageType::kHello, Encode(h)).header.type == MessageType::kHelloReply);
  Register r;
  r.name = "opt";
  r.kind = local_proto::BufferKind::kUnique;
  r.dtype = "float32";
  r.optimizer = true;
  r.size = 12 * 64;
  REQUIRE(call(MessageType::kRegister, Encode(r)).header.type == MessageType::kRegisterReply);
  Register g;
  g.name = "grad";
  g.kind = local_proto::BufferKind::kGradient;
  g.dtype = "float64";
  g.size = 8 * 128;
  st = error(call(MessageType::kRegister, Encode(g)));
  CHECK_THAT(st.message(), Catch::Contains("gradient dtype 'float64'"));
  g.dtype = "fp16";
  g.size = 2 * 128;
  REQUIRE(call(MessageType::kRegister, Encode(g)).header.type == MessageType::kRegisterReply);
  // No hyper-parameters.
  SnapshotBegin b;
  b.step = 3;
  st = error(call(MessageType::kSnapshotBegin, Encode(b)));
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("replays optimizer shard 'opt'") &&
                               Catch::Contains("none came with this snapshot"));
  // A record of another iteration, one for a buffer without an aor region, a broken record.
  aor::StepHyper hy;
  hy.iteration = 2;
  hy.step = 1;
  hy.lr = 1e-3;
  OptimizerHyper rec;
  rec.buffer_index = 0;
  auto wire = aor::EncodeStepHyper(hy);
  std::copy(wire.begin(), wire.end(), rec.record.begin());
  b.optimizer = {rec};
  st = error(call(MessageType::kSnapshotBegin, Encode(b)));
  CHECK_THAT(st.message(), Catch::Contains("are of iteration 2"));
  b.optimizer[0].buffer_index = 1;
  st = error(call(MessageType::kSnapshotBegin, Encode(b)));
  CHECK_THAT(st.message(), Catch::Contains("buffer 'grad', which has no 'aor/' region"));
  hy.iteration = 3;
  wire = aor::EncodeStepHyper(hy);
  std::copy(wire.begin(), wire.end(), b.optimizer[0].record.begin());
  b.optimizer[0].buffer_index = 0;
  b.optimizer[0].record[0] = 9;  // version
  st = error(call(MessageType::kSnapshotBegin, Encode(b)));
  CHECK_THAT(st.message(), Catch::Contains("optimizer hyper-parameters of 'opt'"));
  // A good one is accepted: the slot comes back with the gradient staging for the client.
  b.optimizer[0].record[0] = aor::kStepHyperWireVersion;
  Frame ok = call(MessageType::kSnapshotBegin, Encode(b));
  REQUIRE(ok.header.type == MessageType::kSnapshotBeginReply);
  SlotReply slot;
  REQUIRE(Decode(ok.payload, l, &slot).ok());
  REQUIRE(slot.gradients.size() == 1);
  CHECK(slot.gradients[0].name == "opt");
  CHECK(slot.gradients[0].size == 2 * 64);  // dp+1's slice: n = 64 fp16 elements
  CHECK(ok.fds.size() == 2);
  (void)call(MessageType::kSnapshotAbort, Encode(StepMessage{3}));
}
