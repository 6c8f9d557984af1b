// RS codec: every erasure pattern up to m is rebuilt bit-exactly; m+1 is Lost; EncodeRow
// equals Encode; odd lengths.

#include "reft/kernels/rs.h"

#include <catch2/catch.hpp>

#include "test_support.h"

namespace reft::kernels {

TEST_CASE("RS decodes every erasure pattern of up to m blocks", "[kernels][rs]") {
  const uint64_t seed = reft::testing::TestSeed(5);
  INFO("seed " << seed);
  for (int k = 1; k <= 7; ++k) {
    for (int m = 1; m <= 3; ++m) {
      const size_t len = 1000 + static_cast<size_t>(k * 13 + m);  // odd lengths, unaligned tails
      auto codec = RsCodec::Create(k, m);
      REQUIRE(codec.ok());
      std::vector<std::vector<uint8_t>> blocks(static_cast<size_t>(k + m),
                                               std::vector<uint8_t>(len));
      for (int i = 0; i < k; ++i) blocks[i] = reft::testing::RandomBytes(len, seed + i);
      std::vector<uint8_t*> ptrs;
      for (auto& b : blocks) ptrs.push_back(b.data());
      REQUIRE((*codec)->Encode(ptrs.data(), ptrs.data() + k, len).ok());
      for (int row = 0; row < m; ++row) {
        std::vector<uint8_t> one(len);
        REQUIRE((*codec)->EncodeRow(row, ptrs.data(), one.data(), len).ok());
        REQUIRE(one == blocks[static_cast<size_t>(k + row)]);
      }
      const auto orig = blocks;
      const int n = k + m;
      for (uint32_t mask = 1; mask < (1u << n); ++mask) {
        const int cnt = __builtin_popcount(mask);
        if (cnt > m + 1) continue;
        std::vector<int> erased;
        for (int i = 0; i < n; ++i) {
          if (mask & (1u << i)) {
            erased.push_back(i);
            std::fill(blocks[i].begin(), blocks[i].end(), 0x5A);
          }
        }
        INFO("k " << k << " m " << m << " mask " << mask);
        const Status st = (*codec)->Decode(ptrs.data(), erased, len);
        if (cnt <= m) {
          REQUIRE(st.ok());
          REQUIRE(blocks == orig);
        } else {
          REQUIRE(st.code() == StatusCode::kLost);
        }
        blocks = orig;
      }
    }
  }
}

TEST_CASE("RS rejects impossible geometries", "[kernels][rs]") {
  REQUIRE(RsCodec::Create(0, 1).status().code() == StatusCode::kInvalidArgument);
  REQUIRE(RsCodec::Create(200, 56).status().code() == StatusCode::kInvalidArgument);
  REQUIRE(RsCodec::Create(200, 55).ok());
}

}  // namespace reft::kernels
