// StagedLayers: the bytes a transfer plan staged, served to reshaped restores where they cover
// a request (the gaps passed on), and dropped with the step they belong to.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "reft/recovery/staged_layers.h"

using namespace reft;
using namespace reft::recovery;

namespace {

// A layer of two staged buffers: "w" (tp 0, 100 bytes = 0..99) at offset 0 and "opt" (tp 0, a
// global range of 64 bytes = 200..263) at offset 4096.
MappedMemfd LayerMemory(std::vector<StagedBuffer>* buffers) {
  auto mem = MappedMemfd::Create("staged-test", 8192);
  REQUIRE(mem.ok());
  for (int i = 0; i < 100; ++i) mem->data()[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64; ++i) mem->data()[4096 + i] = static_cast<uint8_t>(200 + i);
  *buffers = {{"w", 0, 0, 100, 0}, {"opt", 0, 0, 64, 4096}};
  return std::move(*mem);
}

void Stage(StagedLayers* staged, const std::string& job, int64_t step, int layer, uint64_t generation = 0) {
  std::vector<StagedBuffer> buffers;
  MappedMemfd memory = LayerMemory(&buffers);
  staged->Put(job, generation, step, layer, std::move(memory), std::move(buffers));
}

RangeRequest Request(const std::string& name, uint64_t begin, uint64_t end, uint8_t* dst,
                     int tp = 0, int pp = -1) {
  RangeRequest r;
  r.name = name;
  r.begin = begin;
  r.end = end;
  r.dst = dst;
  r.tp = tp;
  r.pp = pp;
  return r;
}

}  // namespace

TEST_CASE("staged layers serve what they cover and pass on the rest", "[staged]") {
  StagedLayers staged;
  Stage(&staged, "j", 7, 3);
  CHECK(staged.Staged("j", 0, 7, 3) == uint64_t{100 + 64});
  CHECK_FALSE(staged.Staged("j", 0, 7, 4));
  CHECK_FALSE(staged.Staged("j", 0, 8, 3));
  CHECK(staged.bytes() == 8192);

  std::vector<uint8_t> w(100, 0xee), opt(16, 0xee), other(8, 0xee), per_rank(8, 0xee), tp1(8, 0xee);
  const std::vector<RangeRequest> requests = {
      Request("w", 0, 100, w.data()),
      Request("opt", 40, 56, opt.data()),               // a part of the global range
      Request("other", 0, 8, other.data()),             // not staged
      Request("w", 0, 8, per_rank.data(), 0, /*pp=*/1),  // per rank: never from the stage
      Request("w", 0, 8, tp1.data(), /*tp=*/1),          // another tensor index
  };
  uint64_t served = 0;
  auto rest = staged.Serve("j", 0, 7, requests, &served);
  CHECK(served == 100 + 16);
  std::vector<uint8_t> want_w(100);
  std::iota(want_w.begin(), want_w.end(), 0);
  CHECK(w == want_w);
  for (int i = 0; i < 16; ++i) CHECK(opt[i] == static_cast<uint8_t>(240 + i));
  REQUIRE(rest.size() == 3);
  CHECK(rest[0].name == "other");
  CHECK(rest[1].pp == 1);
  CHECK(rest[2].tp == 1);
  CHECK(per_rank == std::vector<uint8_t>(8, 0xee));

  // A range that leaves the staged one: its staged part is served, the rest passed on with
  // its destination moved along.
  std::vector<uint8_t> beyond(10, 0xee);
  served = 0;
  rest = staged.Serve("j", 0, 7, {Request("opt", 60, 70, beyond.data())}, &served);
  CHECK(served == 4);
  for (int i = 0; i < 4; ++i) CHECK(beyond[i] == static_cast<uint8_t>(260 + i - 256));
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].begin == 64);
  CHECK(rest[0].end == 70);
  CHECK(rest[0].dst == beyond.data() + 4);
  CHECK(beyond[4] == 0xee);
  // Another step of the job is another snapshot: nothing is served from this one.
  served = 0;
  rest = staged.Serve("j", 0, 8, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 0);
  CHECK(rest.size() == 1);
}

TEST_CASE("staged layers go when the job commits a newer step; staging again replaces", "[staged]") {
  StagedLayers staged;
  Stage(&staged, "j", 7, 0);
  Stage(&staged, "j", 7, 0);  // a retried move
  Stage(&staged, "k", 3, 0);
  CHECK(staged.bytes() == 2 * 8192);
  staged.DropBefore("j", 7);
  CHECK(staged.Staged("j", 0, 7, 0));
  staged.DropBefore("j", 8);
  CHECK_FALSE(staged.Staged("j", 0, 7, 0));
  CHECK(staged.Staged("k", 0, 3, 0));  // another job's stay
  CHECK(staged.bytes() == 8192);
  // Staging a newer step of a job drops its older ones.
  Stage(&staged, "k", 4, 1);
  CHECK_FALSE(staged.Staged("k", 0, 3, 0));
  CHECK(staged.bytes() == 8192);
}

TEST_CASE("staged pieces of one buffer leave gaps a restore reads from its own slots", "[staged]") {
  // What a node stages of a buffer it holds part of: the other members' shards, here bytes
  // [0, 30) and [60, 90) of "w" (the node holds [30, 60) and [90, 100) itself).
  auto mem = MappedMemfd::Create("staged-gaps", 8192);
  REQUIRE(mem.ok());
  for (int i = 0; i < 30; ++i) mem->data()[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 30; ++i) mem->data()[4096 + i] = static_cast<uint8_t>(60 + i);
  StagedLayers staged;
  staged.Put("j", 0, 7, 0, std::move(*mem), {{"w", 0, 60, 90, 4096}, {"w", 0, 0, 30, 0}});
  CHECK(staged.Staged("j", 0, 7, 0) == uint64_t{60});

  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  auto rest = staged.Serve("j", 0, 7, {Request("w", 10, 100, w.data())}, &served);
  CHECK(served == 20 + 30);
  for (int i = 10; i < 30; ++i) CHECK(w[i - 10] == i);
  for (int i = 60; i < 90; ++i) CHECK(w[i - 10] == i);
  REQUIRE(rest.size() == 2);  // [30, 60) and [90, 100), in order, each at its own destination
  CHECK((rest[0].begin == 30 && rest[0].end == 60 && rest[0].dst == w.data() + 20));
  CHECK((rest[1].begin == 90 && rest[1].end == 100 && rest[1].dst == w.data() + 80));
  CHECK(w[20] == 0xee);
  CHECK(w[80] == 0xee);
}

// After a fall-back to the tier, generation g+1 restarts from a persisted step and commits its
// own step X again: bytes of generation g's X staged here are another state and are never
// served for it; staging in the new generation (or the generation change itself) drops them.
TEST_CASE("staged layers are served only in the generation they were staged in", "[staged]") {
  StagedLayers staged;
  Stage(&staged, "j", 7, 3, /*generation=*/0);
  CHECK(staged.Staged("j", 0, 7, 3));
  CHECK_FALSE(staged.Staged("j", 1, 7, 3));
  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  auto rest = staged.Serve("j", 1, 7, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 0);
  CHECK(rest.size() == 1);
  CHECK(w == std::vector<uint8_t>(100, 0xee));
  // The job moved to generation 1: what generation 0 staged goes.
  Stage(&staged, "k", 2, 0, 0);
  staged.DropOtherGenerations("j", 1);
  CHECK_FALSE(staged.Staged("j", 0, 7, 3));
  CHECK(staged.Staged("k", 0, 2, 0));  // another job's stay
  // Staging in generation 1 drops any generation-0 layer of the job that is left.
  Stage(&staged, "j", 7, 3, 0);
  Stage(&staged, "j", 7, 4, 1);
  CHECK_FALSE(staged.Staged("j", 0, 7, 3));
  CHECK(staged.Staged("j", 1, 7, 4));
  CHECK(staged.bytes() == 2 * 8192);
}
