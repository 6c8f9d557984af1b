// Sharding function: canonical order, chunk-aligned ranges, slot layouts, byte formulas,
// placement checks and input validation.

#include "reft/protect/sharding.h"

#include <catch2/catch.hpp>

#include "reft/protect/json_io.h"

namespace reft::protect {

TEST_CASE("Shards tile the canonical vector in name order, chunk-aligned", "[protect][sharding]") {
  std::vector<BufferSpec> bufs = {{"z", 1000, "fp32"}, {"a", 302, "fp16"}, {"m", 4096, "uint8"}};
  JobLayout layout;
  layout.dp = 3;
  uint64_t prev_end = 0;
  for (int d = 0; d < 3; ++d) {
    auto p = ComputeRankPlan(layout, Scheme{}, {0, 0, d}, bufs, 256);
    REQUIRE(p.ok());
    REQUIRE(p->shard_begin == prev_end);
    REQUIRE(p->shard_begin % 256 == 0);
    prev_end = p->shard_end;
    uint64_t covered = 0;
    for (const auto& piece : p->pieces) {
      REQUIRE(piece.shard_offset == covered);
      covered += piece.size;
    }
    REQUIRE(covered == p->shard_end - p->shard_begin);
    if (d == 0) REQUIRE(p->pieces.front().buffer == "a");  // sorted by name, not registration
    REQUIRE(p->regions.front().name == kRegionShard);
  }
  REQUIRE(prev_end == 5398);
}

TEST_CASE("Bytes per rank follow the formulas up to chunk padding", "[protect][sharding]") {
  const uint64_t w = 3 * 1000 * 1000 + 17;
  const uint64_t chunk = 4096;
  std::vector<BufferSpec> bufs = {{"p", w, "uint8"}};
  for (int m = 2; m <= 8; ++m) {
    JobLayout layout;
    layout.dp = m;
    const double wm = static_cast<double>(w) / m;
    for (int r = 1; r < m && r <= 3; ++r) {
      Scheme arc;
      arc.arc = r;
      for (int d = 0; d < m; ++d) {
        auto p = *ComputeRankPlan(layout, arc, {0, 0, d}, bufs, chunk);
        REQUIRE(std::abs(static_cast<double>(p.total_bytes) - (1 + r) * wm) <= (1 + r) * chunk);
      }
      Scheme rs;
      rs.rs = r;
      auto p = *ComputeRankPlan(layout, rs, {0, 0, 0}, bufs, chunk);
      REQUIRE(std::abs(static_cast<double>(p.total_bytes) - (wm + r * wm / (m - r))) <=
              2.0 * chunk + r);
    }
    Scheme aec;
    aec.aec = true;
    for (int d = 0; d < m; ++d) {
      auto p = *ComputeRankPlan(layout, aec, {0, 0, d}, bufs, chunk);
      const double formula = wm + static_cast<double>(w) / (m * (m - 1.0));
      REQUIRE(std::abs(static_cast<double>(p.total_bytes) - formula) <= 2.0 * chunk);
      REQUIRE(p.regions.size() == 2);
      REQUIRE(p.regions[1].name == kRegionAec);
    }
  }
}

TEST_CASE("Slot layout lists unique buffers and their neighbour replicas", "[protect][sharding]") {
  JobLayout layout;
  layout.dp = 2;
  layout.zero = 1;
  std::vector<BufferSpec> bufs = {{"params", 100, "fp16"},
                                  {"optim", 64, "fp32", BufferKind::kUnique, -1, true},
                                  {"rng", 8, "uint8", BufferKind::kUnique}};
  auto p = *ComputeRankPlan(layout, *Scheme::Parse("arc1+aor"), {0, 0, 1}, bufs, 16);
  std::vector<std::string> names;
  for (const auto& r : p.regions) names.push_back(r.name);
  REQUIRE(names == std::vector<std::string>{"rep/shard", "rep/arc+1", "unique/optim", "unique/rng",
                                            "aor/optim", "peer/rng"});
  REQUIRE(p.redundancy_bytes == p.regions[1].size + 64 + 8);
}

TEST_CASE("SG members sharing a node are reported by name", "[protect][sharding]") {
  ShardingInput in;
  in.layout.dp = 3;
  in.layout.tp = 2;
  // Megatron order: tp fastest. (pp0, tp0) members are ranks 0, 2, 4.
  in.placement = {"n0", "n0", "n0", "n1", "n2", "n2"};
  in.scheme = *Scheme::Parse("arc1");
  in.buffers = {{"p", 1000, "uint8"}};
  auto plan = PlanSharding(in);
  REQUIRE(plan.ok());
  REQUIRE(plan->warnings.size() == 1);
  REQUIRE(plan->warnings[0].find("SG pp0-tp0: members dp0 dp1 share node 'n0'") !=
          std::string::npos);
  in.strict_placement = true;
  auto strict = PlanSharding(in);
  REQUIRE(strict.status().code() == StatusCode::kInvalidArgument);
  REQUIRE(strict.status().message().find("dp0 dp1") != std::string::npos);
}

TEST_CASE("Invalid inputs are rejected with the bad field named", "[protect][sharding]") {
  JobLayout layout;
  layout.dp = 2;
  auto odd = ComputeRankPlan(layout, Scheme{}, {0, 0, 0}, {{"x", 3, "fp16"}}, 16);
  REQUIRE(odd.status().message().find("'x'") != std::string::npos);
  layout.zero = 3;
  auto z3 = ComputeRankPlan(layout, Scheme{}, {0, 0, 0}, {{"x", 4, "fp16"}}, 16);
  REQUIRE(z3.status().message().find("ZeRO stage 3") != std::string::npos);
  layout.zero = 0;
  auto arc = ComputeRankPlan(layout, *Scheme::Parse("arc2"), {0, 0, 0}, {{"x", 4, "fp16"}}, 16);
  REQUIRE(arc.status().message().find("arc2 needs dp >= 3") != std::string::npos);
  REQUIRE(Scheme::Parse("arc1+xyz").status().message().find("'xyz'") != std::string::npos);
  REQUIRE(Scheme::Parse("Arc + AEC")->ToString() == "arc1+aec");
  auto j = ShardingInputFromJson(nlohmann::json::parse(
      R"({"layout":{"dp":2},"buffers":[{"name":"a","size":"1KiB","kind":"weird"}]})"));
  REQUIRE(j.status().message().find("buffers[0].kind") != std::string::npos);
  auto k = ShardingInputFromJson(nlohmann::json::parse(R"({"layout":{"dp":2,"nodes":["a"]}})"));
  REQUIRE(k.status().message().find("layout: nodes has 1 entries") != std::string::npos);
}

TEST_CASE("protection strings follow the DESIGN grammar", "[protect][scheme]") {
  CHECK(Scheme::Parse("none")->empty());
  auto p = Scheme::Parse("arc2+aec+rs1+aor");
  REQUIRE(p.ok());
  CHECK(p->arc == 2);
  CHECK(p->aec);
  CHECK(p->rs == 1);
  CHECK(p->aor);
  CHECK(p->ToString() == "arc2+aec+rs1+aor");
  CHECK(Scheme::Parse("arc")->arc == 1);
  CHECK(Scheme::Parse("rs16")->rs == 16);
  for (const char* bad : {"", "arc0", "arc17", "rs123", "aec+aec", "none+aec", "raid5", "arc1+",
                          "+aec", "rsx", "aor+aor"}) {
    INFO(bad);
    CHECK(Scheme::Parse(bad).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(Scheme::Parse(std::string(65, 'a')).status().message().find("longer than 64") !=
        std::string::npos);
}

}  // namespace reft::protect
