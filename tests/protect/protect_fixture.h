#pragma once
/// \file protect_fixture.h
/// \brief Simulates one SG for protection tests: every member encodes its slot from its own
/// copy of the replicated buffers, then failure sets are decoded from the survivors' regions.

#include <map>
#include <string>
#include <vector>

#include "reft/protect/codec.h"
#include "reft/protect/sharding.h"
#include "test_support.h"

namespace reft::protect::testing {

/// fp32, fp16 and bf16 buffers with odd element counts (unaligned tails), random bit patterns.
inline std::vector<BufferSpec> MixedBuffers(uint64_t scale) {
  return {{"w.fp32", 4 * (scale * 7 + 3), "fp32", BufferKind::kReplicated, 0, false},
          {"b.fp16", 2 * (scale * 3 + 1), "fp16", BufferKind::kReplicated, 0, false},
          {"a.bf16", 2 * (scale * 5 + 5), "bf16", BufferKind::kReplicated, 1, false}};
}

struct SimSg {
  SgGeometry geometry;
  Scheme scheme;
  std::map<std::string, std::vector<uint8_t>> buffers;             ///< the replicated content
  std::vector<std::vector<uint8_t>> canonical_shards;              ///< truth
  std::vector<std::map<std::string, std::vector<uint8_t>>> slots;  ///< per member, by region

  /// Rebuild with the members in `dead` lost.
  Result<std::vector<std::vector<uint8_t>>> Rebuild(const std::vector<int>& dead) const {
    std::vector<MemberRegions> views(slots.size());
    std::vector<const MemberRegions*> ptrs(slots.size());
    for (size_t d = 0; d < slots.size(); ++d) {
      for (const auto& [name, bytes] : slots[d])
        views[d][name] = ConstSpan{bytes.data(), bytes.size()};
      ptrs[d] = &views[d];
    }
    for (int d : dead) ptrs[static_cast<size_t>(d)] = nullptr;
    return RebuildShards(geometry, scheme, ptrs);
  }
};

/// Builds and encodes an SG of m members; REQUIREs success.
inline SimSg MakeSim(int m, const Scheme& scheme, const std::vector<BufferSpec>& specs,
                     uint64_t chunk, uint64_t seed) {
  SimSg sim;
  sim.scheme = scheme;
  auto g = BuildGeometry(m, specs, chunk, scheme);
  REQUIRE(g.ok());
  sim.geometry = *g;
  ReplicatedSource src;
  uint64_t s = seed;
  for (const auto& b : specs) {
    sim.buffers[b.name] = reft::testing::RandomBytes(b.size, s++);
  }
  for (const auto& [name, bytes] : sim.buffers) src[name] = ConstSpan{bytes.data(), bytes.size()};
  std::vector<uint8_t> flat;
  for (const auto& e : sim.geometry.buffers) {
    const auto& bytes = sim.buffers[e.name];
    flat.insert(flat.end(), bytes.begin(), bytes.end());
  }
  JobLayout layout;
  layout.dp = m;
  for (int d = 0; d < m; ++d) {
    sim.canonical_shards.emplace_back(
        flat.begin() + static_cast<std::ptrdiff_t>(sim.geometry.shard_begin[d]),
        flat.begin() + static_cast<std::ptrdiff_t>(sim.geometry.shard_begin[d + 1]));
    auto plan = ComputeRankPlan(layout, scheme, RankCoord{0, 0, d}, specs, chunk);
    REQUIRE(plan.ok());
    std::map<std::string, std::vector<uint8_t>> slot;
    std::map<std::string, MutableSpan> spans;
    for (const auto& r : plan->regions) {
      // Fill with garbage so an encoder that leaves bytes unwritten is caught.
      slot[r.name] = reft::testing::RandomBytes(r.size, 1000 + static_cast<uint64_t>(d));
    }
    for (auto& [name, bytes] : slot) spans[name] = MutableSpan{bytes.data(), bytes.size()};
    const Status st = EncodeMember(sim.geometry, scheme, d, src, spans, d % 2 + 1);
    INFO(st.ToString());
    REQUIRE(st.ok());
    REQUIRE(slot[kRegionShard] == sim.canonical_shards[static_cast<size_t>(d)]);
    sim.slots.push_back(std::move(slot));
  }
  return sim;
}

/// All subsets of {0..m-1} of size f.
inline std::vector<std::vector<int>> Subsets(int m, int f) {
  std::vector<std::vector<int>> out;
  for (uint32_t mask = 0; mask < (1u << m); ++mask) {
    if (__builtin_popcount(mask) != f) continue;
    std::vector<int> s;
    for (int d = 0; d < m; ++d) {
      if (mask & (1u << d)) s.push_back(d);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace reft::protect::testing
