// Host XOR conformance: XorReduce against the plain reference loop, sizes 0..several MiB,
// misaligned and mutually misaligned pointers, many sources, in-place accumulate, threads.

#include <catch2/catch.hpp>
#include <cstring>

#include "reft/kernels/xor.h"
#include "test_support.h"

namespace reft::kernels {

TEST_CASE("XorReduce matches the reference on every size and alignment", "[kernels][xor]") {
  const uint64_t seed = reft::testing::TestSeed(11);
  INFO("seed " << seed);
  const size_t sizes[] = {0, 1, 7, 31, 32, 63, 64, 65, 127, 200, 4095, 4096, 65537, (3u << 20) + 5};
  for (size_t size : sizes) {
    for (size_t nsrc : {size_t{1}, size_t{2}, size_t{3}, size_t{8}, size_t{65}}) {
      if (size > 100000 && nsrc > 8) continue;
      for (int align_case = 0; align_case < 3; ++align_case) {
        for (int threads : {1, 3}) {
          INFO("size " << size << " nsrc " << nsrc << " align " << align_case << " threads "
                       << threads);
          std::vector<std::vector<uint8_t>> bufs;
          std::vector<const void*> srcs;
          for (size_t s = 0; s < nsrc; ++s) {
            bufs.push_back(reft::testing::RandomBytes(size + 64, seed + s));
            // 0: all 64-aligned; 1: all misaligned by 5; 2: mutually different misalignments.
            const size_t off = align_case == 0 ? 0 : align_case == 1 ? 5 : (s * 3) % 17;
            srcs.push_back(bufs.back().data() + off);
          }
          const size_t doff = align_case == 2 ? 9 : (align_case == 1 ? 5 : 0);
          std::vector<uint8_t> want(size + 64, 0xAB), got(size + 64, 0xAB);
          XorReduceRef(want.data() + doff, srcs.data(), nsrc, size);
          REQUIRE(XorReduce(got.data() + doff, srcs.data(), nsrc, size, threads).ok());
          REQUIRE(got == want);  // includes the guard bytes around the destination
        }
      }
    }
  }
}

TEST_CASE("XorReduce splits large inputs across threads bit-identically", "[kernels][xor]") {
  // Above 4 MiB per thread the work is split; sizes and offsets make uneven, misaligned pieces.
  const size_t size = (9u << 20) + 13;
  for (size_t off : {size_t{0}, size_t{3}}) {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<const void*> srcs;
    for (size_t s = 0; s < 3; ++s) {
      bufs.push_back(reft::testing::RandomBytes(size + 8, 40 + s));
      srcs.push_back(bufs.back().data() + off + s);  // mutually misaligned when off != 0
    }
    if (off == 0) {
      for (size_t s = 0; s < 3; ++s) srcs[s] = bufs[s].data();
    }
    std::vector<uint8_t> want(size), got(size);
    XorReduceRef(want.data(), srcs.data(), srcs.size(), size);
    for (int threads : {2, 3, 8}) {
      std::fill(got.begin(), got.end(), 0);
      REQUIRE(XorReduce(got.data(), srcs.data(), srcs.size(), size, threads).ok());
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("XorReduce accumulates in place when dst aliases srcs[0]", "[kernels][xor]") {
  // 192 and 65600 leave a 64-byte remainder inside xor_gen (len % 128 == 64).
  for (size_t size : {size_t{0}, size_t{100}, size_t{192}, size_t{65600}, (size_t{1} << 20) + 77}) {
    auto a = reft::testing::RandomBytes(size, 1);
    auto b = reft::testing::RandomBytes(size, 2);
    auto c = reft::testing::RandomBytes(size, 3);
    std::vector<uint8_t> want(size);
    const void* ref_srcs[] = {a.data(), b.data(), c.data()};
    XorReduceRef(want.data(), ref_srcs, 3, size);
    REQUIRE(XorReduce(a.data(), ref_srcs, 3, size).ok());
    REQUIRE(a == want);
  }
}

TEST_CASE("XorReduce rejects no sources", "[kernels][xor]") {
  uint8_t d[4];
  REQUIRE(XorReduce(d, nullptr, 0, 4).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("XorReduceRef is XOR", "[kernels][xor]") {
  const uint8_t a[3] = {0x0F, 0xFF, 0x00};
  const uint8_t b[3] = {0xF0, 0x0F, 0x00};
  const void* s[] = {a, b};
  uint8_t d[3];
  XorReduceRef(d, s, 2, 3);
  REQUIRE(d[0] == 0xFF);
  REQUIRE(d[1] == 0xF0);
  REQUIRE(d[2] == 0x00);
}

}  // namespace reft::kernels
