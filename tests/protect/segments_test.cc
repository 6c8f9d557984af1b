// Segment plans (the backend-neutral description of parity work): they tile the output and
// every source stays inside one buffer; replaying them with the reference XOR loop gives the
// same parity as EncodeMember.

#include "reft/protect/segments.h"

#include <catch2/catch.hpp>

#include "protect_fixture.h"
#include "reft/kernels/xor.h"

namespace reft::protect {

TEST_CASE("AEC and RS segment plans tile the output within buffer bounds", "[protect][segments]") {
  const Scheme scheme = *Scheme::Parse("aec+rs2");
  for (int m = 3; m <= 8; ++m) {
    auto sim = testing::MakeSim(m, scheme, testing::MixedBuffers(90 + m), 32, 5 + m);
    const auto& g = sim.geometry;
    for (int dp = 0; dp < m; ++dp) {
      std::vector<std::vector<CodingSegment>> plans = {AecSegments(g, dp)};
      for (int q = 0; q < 2; ++q) plans.push_back(RsSegments(g, dp, q));
      for (size_t p = 0; p < plans.size(); ++p) {
        uint64_t next = 0;
        for (const auto& s : plans[p]) {
          REQUIRE(s.out_offset == next);
          REQUIRE(s.size > 0);
          next += s.size;
          for (const auto& src : s.sources) {
            if (src.buffer >= 0)
              REQUIRE(src.offset + s.size <= g.buffers[static_cast<size_t>(src.buffer)].size);
          }
        }
        REQUIRE(next == (p == 0 ? g.aec_sub : g.rs_sub));
      }
      // Replay the AEC plan with the reference loop.
      std::vector<uint8_t> parity(g.aec_sub, 0xCC);
      for (const auto& s : plans[0]) {
        std::vector<const void*> srcs;
        for (const auto& src : s.sources) {
          if (src.buffer >= 0)
            srcs.push_back(sim.buffers.at(g.buffers[static_cast<size_t>(src.buffer)].name).data() +
                           src.offset);
        }
        if (srcs.empty()) {
          std::fill_n(parity.begin() + static_cast<std::ptrdiff_t>(s.out_offset), s.size, 0);
        } else {
          kernels::XorReduceRef(parity.data() + s.out_offset, srcs.data(), srcs.size(), s.size);
        }
      }
      REQUIRE(parity == sim.slots[static_cast<size_t>(dp)].at(kRegionAec));
    }
  }
}

}  // namespace reft::protect
