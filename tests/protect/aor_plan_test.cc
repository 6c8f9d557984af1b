// The AOR plan: which optimizer shards are replayed, from which gradient slice, and the clear
// errors for every layout the replay cannot work with.
#include "reft/protect/aor_plan.h"

#include <catch2/catch.hpp>

#include "reft/protect/sharding.h"

using namespace reft;
using namespace reft::protect;

namespace {

BufferSpec Opt(const std::string& name, uint64_t n, const std::string& dtype = "float32") {
  const uint64_t esize = dtype == "float32" || dtype == "fp32" ? 4 : 2;
  return {name, 3 * esize * n, dtype, BufferKind::kUnique, -1, true};
}

AorInput Input(int dp, int rank, uint64_t n) {
  AorInput in;
  in.layout.dp = dp;
  in.layout.zero = 1;
  in.scheme = *Scheme::Parse("arc1+aor");
  in.coord = {0, 0, rank};
  in.buffers = {{"params", 4096, "bf16"}, Opt("opt", n), {"rng", 8, "uint8", BufferKind::kUnique}};
  in.gradients = {{"grad", 4 * n * static_cast<uint64_t>(dp), "float32"}};
  return in;
}

std::string Error(const AorInput& in) {
  auto p = PlanAor(in);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == StatusCode::kInvalidArgument);
  return p.status().message();
}

}  // namespace

TEST_CASE("AOR plan: member d replays member d+1's slice of the full gradient", "[protect][aor]") {
  for (int dp = 2; dp <= 4; ++dp) {
    for (int d = 0; d < dp; ++d) {
      AorInput in = Input(dp, d, 1000);
      auto p = PlanAor(in);
      INFO(p.status().ToString());
      REQUIRE(p.ok());
      REQUIRE(p->bindings.size() == 1);
      const AorBinding& b = p->bindings[0];
      CHECK(b.buffer == "opt");
      CHECK(b.region == "aor/opt");
      CHECK(b.gradient == "grad");
      CHECK(b.elements == 1000);
      CHECK(b.grad_dtype == 0);
      CHECK(b.grad_offset == static_cast<uint64_t>((d + 1) % dp) * 1000 * 4);  // ring wraps
      CHECK(b.grad_bytes == 4000);
      CHECK(p->staging_bytes == 4000);
      // The plan's region is the one the sharding function lays out.
      auto rank = ComputeRankPlan(in.layout, in.scheme, in.coord, in.buffers, 4096);
      REQUIRE(rank.ok());
      bool found = false;
      for (const auto& r : rank->regions) found |= r.name == b.region && r.size == 12000;
      CHECK(found);
    }
  }
}

TEST_CASE("AOR plan: neighbour slices, 16-bit gradients, several groups", "[protect][aor]") {
  AorInput in = Input(3, 2, 500);
  in.buffers.push_back(Opt("opt.nodecay", 40));
  in.gradients = {{"g.decay", 2 * 500, "bf16"}, {"g.nodecay", 2 * 40 * 3, "half"}};
  in.gradient_of = {{"opt", "g.decay"}, {"opt.nodecay", "g.nodecay"}};
  auto p = PlanAor(in);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE(p->bindings.size() == 2);
  CHECK(p->bindings[0].buffer == "opt");
  CHECK(p->bindings[0].grad_dtype == 2);
  CHECK(p->bindings[0].grad_offset == 0);  // n elements: the neighbour's slice itself
  CHECK(p->bindings[0].grad_bytes == 1000);
  CHECK(p->bindings[1].buffer == "opt.nodecay");
  CHECK(p->bindings[1].grad_dtype == 1);
  CHECK(p->bindings[1].grad_offset == 0);        // (2+1) mod 3 = member 0
  CHECK(p->bindings[1].staging_offset == 1024);  // 64-byte aligned after the first slice
  CHECK(p->staging_bytes == 1024 + 80);
}

TEST_CASE("AOR plan: bf16 optimizer state (torch's Adam over bf16 parameters)", "[protect][aor]") {
  AorInput in = Input(2, 0, 100);
  in.buffers[1] = Opt("opt", 100, "bf16");  // 600 bytes: [bf16 master | exp_avg | exp_avg_sq]
  in.gradients = {{"grad", 2 * 2 * 100, "bf16"}};
  auto p = PlanAor(in);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE(p->bindings.size() == 1);
  CHECK(p->bindings[0].elements == 100);
  CHECK(p->bindings[0].state_dtype == 2);
  CHECK(p->bindings[0].grad_offset == 200);  // member 1's slice of 100 bf16 elements
  in.buffers[1] = Opt("opt", 100, "float32");
  p = PlanAor(in);
  REQUIRE(p.ok());
  CHECK(p->bindings[0].state_dtype == 0);
}

TEST_CASE("AOR plan: nothing to replay without aor regions", "[protect][aor]") {
  AorInput in = Input(1, 0, 100);  // dp 1: no neighbour
  auto p = PlanAor(in);
  REQUIRE(p.ok());
  CHECK(p->bindings.empty());
  in = Input(2, 0, 100);
  in.buffers[1].kind = BufferKind::kReplicated;  // ZeRO-0-style replicated optimizer state
  in.gradients.clear();
  p = PlanAor(in);
  REQUIRE(p.ok());
  CHECK(p->bindings.empty());
}

TEST_CASE("AOR plan: clear errors", "[protect][aor]") {
  AorInput in = Input(2, 0, 100);
  in.layout.zero = 0;
  CHECK_THAT(Error(in), Catch::Contains("ZeRO stage is 0 (must be 1"));
  CHECK(CheckAorLayout(in.layout, in.scheme).code() == StatusCode::kInvalidArgument);
  CHECK(CheckAorLayout(in.layout, *Scheme::Parse("arc1")).ok());

  in = Input(2, 0, 100);
  in.gradients[0].size -= 4;
  CHECK_THAT(Error(in), Catch::Contains("gradient buffer 'grad' has 199 float32 elements") &&
                            Catch::Contains("dp·n = 200") && Catch::Contains("n = 100"));

  in = Input(2, 0, 100);
  in.gradients.clear();
  CHECK_THAT(Error(in), Catch::Contains("no gradient buffer is registered"));

  in = Input(2, 0, 100);
  in.gradients.push_back({"grad2", 800, "fp32"});
  CHECK_THAT(Error(in), Catch::Contains("2 gradient buffers are registered ('grad', 'grad2')"));
  in.gradient_of["opt"] = "grad";
  CHECK_THAT(Error(in), Catch::Contains("'grad2' is not the gradient of any optimizer shard"));
  in.gradient_of["opt"] = "nope";
  CHECK_THAT(Error(in), Catch::Contains("names gradient 'nope', which is not registered"));

  in = Input(2, 0, 100);
  in.gradient_of["rng"] = "grad";
  CHECK_THAT(Error(in), Catch::Contains("buffer 'rng' names gradient 'grad'"));

  in = Input(2, 0, 100);
  in.buffers[1] = Opt("opt", 100, "float16");
  CHECK_THAT(Error(in),
             Catch::Contains("must be float32 or bfloat16") && Catch::Contains("it is float16"));
  in.buffers[1] = {"opt", 1000, "float32", BufferKind::kUnique, -1, true};
  CHECK_THAT(Error(in), Catch::Contains("1000 bytes: not 3·n float32 elements"));
  in.buffers[1] = {"opt", 1000, "bf16", BufferKind::kUnique, -1, true};
  CHECK_THAT(Error(in), Catch::Contains("1000 bytes: not 3·n bfloat16 elements"));

  in = Input(2, 0, 100);
  in.gradients[0].dtype = "float64";
  CHECK_THAT(Error(in), Catch::Contains("gradient dtype 'float64'"));

  in = Input(2, 0, 100);
  in.scheme = *Scheme::Parse("arc1");
  CHECK_THAT(Error(in), Catch::Contains("read only by protection 'aor'"));
}
