// XorAccumulator: outputs equal the XOR of their terms' state ranges whatever order and
// threads the pieces come in, and each output group is reported complete exactly once, when
// its last byte arrived. Outputs start as garbage: the first term to reach a byte is copied
// there, so a byte that took its first term as a XOR (or twice as a copy) shows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "reft/mutex.h"
#include "xor_accumulator.h"

using reft::Mutex;
using reft::MutexLock;
using reft::recovery::XorAccumulator;

namespace {

constexpr uint8_t kGarbage = 0xA5;

// The expected outputs: bytes no term covers keep kGarbage, the others are the XOR of the
// state bytes their terms map there.
struct Expected {
  std::vector<uint8_t> bytes;
  std::vector<char> covered;
  explicit Expected(size_t n) : bytes(n, kGarbage), covered(n, 0) {}
  void Add(const std::vector<uint8_t>& state, uint64_t from, uint64_t size, uint64_t at) {
    for (uint64_t i = 0; i < size; ++i) {
      bytes[at + i] = covered[at + i] ? bytes[at + i] ^ state[from + i] : state[from + i];
      covered[at + i] = 1;
    }
  }
};

}  // namespace

TEST_CASE("XOR sums come out the same in any piece order and from several threads",
          "[recovery][xor]") {
  std::mt19937_64 rng(7);
  const uint64_t state_size = 3 << 20;
  std::vector<uint8_t> state(state_size);
  for (auto& b : state) b = static_cast<uint8_t>(rng());
  // Outputs of odd sizes, the largest across several 1 MiB stretches; each sums 2-5 ranges of
  // the state, partly overlapping each other in the output.
  const std::vector<uint64_t> out_size{4099, 65536, 777, (2 << 20) + 12345};
  std::vector<std::vector<uint8_t>> out(out_size.size());
  std::vector<Expected> want;
  XorAccumulator acc;
  for (size_t o = 0; o < out_size.size(); ++o) {
    out[o].assign(out_size[o], kGarbage);
    want.emplace_back(out_size[o]);
    const int terms = 2 + static_cast<int>(o);
    for (int t = 0; t < terms; ++t) {
      const uint64_t at = rng() % (out_size[o] / 2);
      const uint64_t size = 1 + rng() % (out_size[o] - at);
      const uint64_t from = rng() % (state_size - size);
      acc.AddTerm(from, size, out[o].data() + at, o);
      want[o].Add(state, from, size, at);
    }
  }
  // Pieces of uneven sizes covering the state once, shuffled, absorbed by four threads.
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint64_t at = 0; at < state_size;) {
    const uint64_t n = std::min<uint64_t>(1 + rng() % 90000, state_size - at);
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
  for (size_t o = 0; o < out.size(); ++o) CHECK(out[o] == want[o].bytes);
  std::sort(completed.begin(), completed.end());
  CHECK(completed == std::vector<size_t>{0, 1, 2, 3});
}

TEST_CASE("the first term to reach each output byte is copied, in every arrival order",
          "[recovery][xor]") {
  // One output of 64 bytes summing three terms that cover different, partly overlapping parts
  // of it (bytes 0..3 and 60..63 no term covers), fed by six pieces whose boundaries cut the
  // terms, one carrying no term's byte: every one of the 720 arrival orders must give the
  // same bytes.
  std::vector<uint8_t> state(220);
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<uint8_t>(i * 37 + 11);
  struct T {
    uint64_t from, size, at;
  };
  const std::vector<T> terms{{0, 40, 4}, {50, 30, 20}, {100, 46, 14}};
  Expected want(64);
  for (const T& t : terms) want.Add(state, t.from, t.size, t.at);
  const std::vector<std::pair<uint64_t, uint64_t>> pieces{
      {0, 17}, {17, 45}, {62, 50}, {112, 21}, {133, 67}, {200, 20}};
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  int orders = 0;
  do {
    std::vector<uint8_t> out(64, kGarbage);
    XorAccumulator acc;
    for (const T& t : terms) acc.AddTerm(t.from, t.size, out.data() + t.at, 0);
    std::vector<size_t> done;
    for (size_t i = 0; i < order.size(); ++i) {
      const auto& [at, n] = pieces[order[i]];
      REQUIRE(acc.Absorb(at, state.data() + at, n, &done).ok());
      // Complete with the last piece that carries a term's byte, reported once.
      const bool all_terms_in = acc.absorbed() == acc.expected();
      CHECK(done.size() == (all_terms_in ? 1u : 0u));
    }
    CHECK(out == want.bytes);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 720);
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
