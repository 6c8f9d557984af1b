// Protection planner guarantees against brute force with real encode/decode of bytes.

#include "reft/protect/tolerance.h"

#include <catch2/catch.hpp>
#include <map>

#include "protect_fixture.h"

namespace reft::protect {
namespace {

/// Largest f such that every set of f failed nodes rebuilds every shard bit-exactly, found
/// by decoding real bytes for every node failure set (independent of the analysis shortcuts).
int BruteForceTolerance(const testing::SimSg& sim, const std::vector<std::string>& member_nodes) {
  std::vector<std::string> nodes;
  for (const auto& n : member_nodes) {
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  const int n = static_cast<int>(nodes.size());
  for (int f = 1; f <= n; ++f) {
    for (const auto& set : testing::Subsets(n, f)) {
      std::vector<int> dead;
      for (size_t d = 0; d < member_nodes.size(); ++d) {
        for (int i : set) {
          if (member_nodes[d] == nodes[static_cast<size_t>(i)]) dead.push_back(static_cast<int>(d));
        }
      }
      auto r = sim.Rebuild(dead);
      if (!r.ok()) return f - 1;
      for (int d : dead) {
        if ((*r)[static_cast<size_t>(d)] != sim.canonical_shards[static_cast<size_t>(d)])
          return -100;  // wrong bytes
      }
    }
  }
  return n;
}

}  // namespace

TEST_CASE("Planner tolerance equals brute force over failure sets", "[protect][planner]") {
  const auto specs = testing::MixedBuffers(25);
  for (const char* text : {"none", "arc1", "arc2", "aec", "rs1", "rs2", "rs3", "arc1+aec",
                           "arc2+aec", "aec+rs2", "arc1+rs2"}) {
    const Scheme scheme = *Scheme::Parse(text);
    for (int m = 2; m <= 6; ++m) {
      if (scheme.arc >= m || scheme.rs >= m) continue;
      for (int shared = 0; shared < 2; ++shared) {
        INFO(text << " m=" << m << " shared=" << shared);
        ShardingInput in;
        in.layout.dp = m;
        for (int d = 0; d < m; ++d)
          in.placement.push_back("n" + std::to_string(shared && d == 1 ? 0 : d));
        in.scheme = scheme;
        in.chunk = 16;
        in.buffers = specs;
        auto rep = PlanProtection(in);
        REQUIRE(rep.ok());
        REQUIRE(rep->groups.size() == 1);
        REQUIRE(rep->groups[0].exact);
        REQUIRE(rep->sharding.warnings.size() == static_cast<size_t>(shared));
        auto sim = testing::MakeSim(m, scheme, specs, 16, 99 + m);
        const int brute = BruteForceTolerance(sim, rep->sharding.groups[0].member_nodes);
        REQUIRE(rep->groups[0].node_failures == brute);
        REQUIRE(rep->node_failures == brute);
      }
    }
  }
}

TEST_CASE("Planner separates unique buffers' single ring copy from replicated tolerance",
          "[protect][planner]") {
  ShardingInput in;
  in.layout.dp = 5;
  in.layout.zero = 1;
  in.scheme = *Scheme::Parse("rs3+aor");
  in.buffers = {{"p", 1 << 16, "bf16"}, {"optim", 4096, "fp32", BufferKind::kUnique, -1, true}};
  auto rep = *PlanProtection(in);
  REQUIRE(rep.groups[0].node_failures == 1);
  REQUIRE(rep.groups[0].replicated_node_failures == 3);
  REQUIRE(rep.groups[0].first_fatal_loss.find("unique dp") != std::string::npos);
}

TEST_CASE("Scheme recommendation follows the rule of docs/protection.md", "[protect][planner]") {
  ShardingInput in;
  in.layout.dp = 4;
  in.layout.zero = 1;
  in.buffers = {{"p", 400, "uint8"}, {"optim", 64, "fp32", BufferKind::kUnique, -1, true}};
  // W/m = 100: ARC needs 200 B, AEC 100 + 400/12 = 133.3 B.
  REQUIRE(RecommendScheme(in, 100, 2.0)->scheme.ToString() == "arc1+aor");
  REQUIRE(RecommendScheme(in, 100, 1.5)->scheme.ToString() == "aec+aor");
  auto slow = *RecommendScheme(in, 100, 0.5);
  REQUIRE(slow.scheme.ToString() == "aec+aor");
  REQUIRE(slow.reason.find("every 3 iterations") != std::string::npos);
  REQUIRE(RecommendScheme(in, 0, 1.0).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("Planner reports arc1+aec as one failure with the fatal pair", "[protect][planner]") {
  ShardingInput in;
  in.layout.dp = 5;
  in.scheme = *Scheme::Parse("arc1+aec");
  in.buffers = {{"p", 1 << 20, "fp32"}};
  auto rep = *PlanProtection(in);
  REQUIRE(rep.groups[0].node_failures == 1);
  REQUIRE(rep.groups[0].first_fatal.size() == 2);
  REQUIRE(rep.groups[0].first_fatal_loss.find("p[") != std::string::npos);
}

}  // namespace reft::protect
