// XorAccumulator: outputs equal the XOR of their terms' state ranges whatever order and
// threads the pieces come in, and each output group is reported complete exactly once, when
// its last byte arrived.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "reft/mutex.h"
#include "xor_accumulator.h"

using reft::Mutex;
using reft::MutexLock;
using reft::recovery::XorAccumulator;

TEST_CASE("XOR sums come out the same in any piece order and from several threads",
          "[recovery][xor]") {
  std::mt19937_64 rng(7);
  const uint64_t state_size = 1 << 20;
  std::vector<uint8_t> state(state_size);
  for (auto& b : state) b = static_cast<uint8_t>(rng());
  // Three outputs of odd sizes; each sums 2-4 ranges of the state, some overlapping each other.
  const std::vector<uint64_t> out_size{4099, 65536, 777};
  std::vector<std::vector<uint8_t>> out(out_size.size()), want(out_size.size());
  XorAccumulator acc;
  for (size_t o = 0; o < out_size.size(); ++o) {
    out[o].assign(out_size[o], 0);
    want[o].assign(out_size[o], 0);
    const int terms = 2 + static_cast<int>(o);
    for (int t = 0; t < terms; ++t) {
      const uint64_t at = rng() % (out_size[o] / 2);
      const uint64_t size = 1 + rng() % (out_size[o] - at);
      const uint64_t from = rng() % (state_size - size);
      acc.AddTerm(from, size, out[o].data() + at, o);
      for (uint64_t i = 0; i < size; ++i) want[o][at + i] ^= state[from + i];
    }
  }
  // Pieces of uneven sizes covering the state once, shuffled, absorbed by four threads.
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint64_t at = 0; at < state_size;) {
    const uint64_t n = std::min<uint64_t>(1 + rng() % 9000, state_size - at);
    pieces.emplace_back(at, n);
    at += n;
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  Mutex mu;
  std::vector<size_t> completed;
  int failures = 0;
  std::vector<std::thread> workers;
  for (size_t w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (size_t p = w; p < pieces.size(); p += 4) {
        std::vector<size_t> done;
        const bool ok = acc.Absorb(pieces[p].first, state.data() + pieces[p].first,
                                   pieces[p].second, &done)
                            .ok();
        MutexLock lock(mu);  // Catch2's assertions are not thread-safe: checked after the join
        failures += ok ? 0 : 1;
        completed.insert(completed.end(), done.begin(), done.end());
      }
    });
  }
  for (auto& t : workers) t.join();
  CHECK(failures == 0);
  CHECK(acc.absorbed() == acc.expected());
  for (size_t o = 0; o < out.size(); ++o) CHECK(out[o] == want[o]);
  std::sort(completed.begin(), completed.end());
  CHECK(completed == std::vector<size_t>{0, 1, 2});
}

TEST_CASE("an output group completes with its last term's last byte, not before",
          "[recovery][xor]") {
  std::vector<uint8_t> state{1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t a = 0, b[2] = {0, 0};
  XorAccumulator acc;
  acc.AddTerm(0, 1, &a, 0);  // a = s0 ^ s7
  acc.AddTerm(7, 1, &a, 0);
  acc.AddTerm(2, 2, b, 1);   // b = s2..s3
  std::vector<size_t> done;
  REQUIRE(acc.Absorb(0, state.data(), 3, &done).ok());  // s0 (a's first term), s2 (b, half)
  CHECK(done.empty());
  REQUIRE(acc.Absorb(3, state.data() + 3, 4, &done).ok());  // s3: b complete
  CHECK(done == std::vector<size_t>{1});
  CHECK(b[0] == 3);
  CHECK(b[1] == 4);
  done.clear();
  REQUIRE(acc.Absorb(7, state.data() + 7, 1, &done).ok());  // s7: a complete
  CHECK(done == std::vector<size_t>{0});
  CHECK(a == (1 ^ 8));
  CHECK(acc.absorbed() == acc.expected());
}
