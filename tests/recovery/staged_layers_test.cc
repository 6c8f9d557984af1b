// StagedLayers: the bytes a transfer plan staged, served to reshaped restores where they cover
// a request (the gaps passed on), only for the commit they were staged for (its timeline
// stamp), and dropped with it, on another timeline, or after the grace time.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "reft/recovery/staged_layers.h"
#include "test_support.h"

using namespace reft;
using namespace reft::recovery;

namespace {

using Stamp = coord::TimelineStamp;

// The stamp of a commit of generation `generation` (restore epoch 5, layout revision 3).
Stamp Commit(uint64_t generation = 0, int64_t epoch = 5, int64_t layout = 3) {
  return Stamp{generation, epoch, layout, 0};
}

// No background thread: the grace time runs on the test's own clock.
StagedLayersOptions ManualExpiry(std::chrono::milliseconds grace = std::chrono::minutes(15)) {
  StagedLayersOptions o;
  o.grace = grace;
  o.expire_in_background = false;
  return o;
}

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

bool Stage(StagedLayers* staged, const std::string& job, int64_t step, int layer,
           const Stamp& stamp = Commit()) {
  std::vector<StagedBuffer> buffers;
  MappedMemfd memory = LayerMemory(&buffers);
  return staged->Put(job, stamp, step, layer, std::move(memory), std::move(buffers));
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
  StagedLayers staged(ManualExpiry());
  Stage(&staged, "j", 7, 3);
  CHECK(staged.Staged("j", Commit(0), 7, 3) == uint64_t{100 + 64});
  CHECK_FALSE(staged.Staged("j", Commit(0), 7, 4));
  CHECK_FALSE(staged.Staged("j", Commit(0), 8, 3));
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
  auto rest = staged.Serve("j", Commit(0), 7, requests, &served);
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
  rest = staged.Serve("j", Commit(0), 7, {Request("opt", 60, 70, beyond.data())}, &served);
  CHECK(served == 4);
  for (int i = 0; i < 4; ++i) CHECK(beyond[i] == static_cast<uint8_t>(260 + i - 256));
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].begin == 64);
  CHECK(rest[0].end == 70);
  CHECK(rest[0].dst == beyond.data() + 4);
  CHECK(beyond[4] == 0xee);
  // Another step of the job is another snapshot: nothing is served from this one.
  served = 0;
  rest = staged.Serve("j", Commit(0), 8, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 0);
  CHECK(rest.size() == 1);
}

TEST_CASE("staged layers go when the job commits a newer step, staging again replaces", "[staged]") {
  StagedLayers staged(ManualExpiry());
  Stage(&staged, "j", 7, 0);
  Stage(&staged, "j", 7, 0);  // a retried move
  Stage(&staged, "k", 3, 0);
  CHECK(staged.bytes() == 2 * 8192);
  staged.DropBefore("j", 7);
  CHECK(staged.Staged("j", Commit(0), 7, 0));
  staged.DropBefore("j", 8);
  CHECK_FALSE(staged.Staged("j", Commit(0), 7, 0));
  CHECK(staged.Staged("k", Commit(0), 3, 0));  // another job's stay
  CHECK(staged.bytes() == 8192);
  // Staging a newer step of a job drops its older ones.
  Stage(&staged, "k", 4, 1);
  CHECK_FALSE(staged.Staged("k", Commit(0), 3, 0));
  CHECK(staged.bytes() == 8192);
}

TEST_CASE("staged pieces of one buffer leave gaps a restore reads from its own slots", "[staged]") {
  // What a node stages of a buffer it holds part of: the other members' shards, here bytes
  // [0, 30) and [60, 90) of "w" (the node holds [30, 60) and [90, 100) itself).
  auto mem = MappedMemfd::Create("staged-gaps", 8192);
  REQUIRE(mem.ok());
  for (int i = 0; i < 30; ++i) mem->data()[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 30; ++i) mem->data()[4096 + i] = static_cast<uint8_t>(60 + i);
  StagedLayers staged(ManualExpiry());
  staged.Put("j", Commit(), 7, 0, std::move(*mem), {{"w", 0, 60, 90, 4096}, {"w", 0, 0, 30, 0}});
  CHECK(staged.Staged("j", Commit(0), 7, 0) == uint64_t{60});

  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  auto rest = staged.Serve("j", Commit(0), 7, {Request("w", 10, 100, w.data())}, &served);
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
  StagedLayers staged(ManualExpiry());
  Stage(&staged, "j", 7, 3, Commit(0));
  CHECK(staged.Staged("j", Commit(0), 7, 3));
  CHECK_FALSE(staged.Staged("j", Commit(1), 7, 3));
  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  auto rest = staged.Serve("j", Commit(1), 7, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 0);
  CHECK(rest.size() == 1);
  CHECK(w == std::vector<uint8_t>(100, 0xee));
  // The job moved to generation 1: what generation 0 staged goes.
  Stage(&staged, "k", 2, 0, Commit(0));
  staged.DropOtherGenerations("j", 1);
  CHECK_FALSE(staged.Staged("j", Commit(0), 7, 3));
  CHECK(staged.Staged("k", Commit(0), 2, 0));  // another job's stay
  // Staging in generation 1 drops any generation-0 layer of the job that is left.
  Stage(&staged, "m", 7, 3, Commit(0));
  Stage(&staged, "m", 7, 4, Commit(1));
  CHECK_FALSE(staged.Staged("m", Commit(0), 7, 3));
  CHECK(staged.Staged("m", Commit(1), 7, 4));
  CHECK(staged.bytes() == 2 * 8192);
}

// One step number, two commits of it in one generation: a job released and started again under
// its name commits its own step 7 (another restore epoch, another layout record). What was
// staged for the first commit is never served for the second, and learning of the second drops
// it. The restart a plan asks for commits nothing: the step's stamp, and the layers, stay.
TEST_CASE("staged layers are served only for the commit they were staged for", "[staged]") {
  StagedLayers staged(ManualExpiry());
  const Stamp first = Commit(0, /*epoch=*/5, /*layout=*/3), second = Commit(0, 0, 40);
  Stage(&staged, "j", 7, 3, first);
  CHECK_FALSE(staged.Staged("j", second, 7, 3));
  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  auto rest = staged.Serve("j", second, 7, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 0);
  CHECK(rest.size() == 1);
  CHECK(w == std::vector<uint8_t>(100, 0xee));
  rest = staged.Serve("j", first, 7, {Request("w", 0, 100, w.data())}, &served);
  CHECK(served == 100);
  CHECK(rest.empty());
  staged.DropOtherTimelines("j", second);  // a staging for the second commit starts
  CHECK_FALSE(staged.Staged("j", first, 7, 3));
  CHECK(staged.bytes() == 0);
  CHECK(Stage(&staged, "j", 7, 3, second));
  CHECK(staged.Staged("j", second, 7, 3));
}

// A fall-back while a staging fetches its bytes: the node drops the job's layers of the old
// generation before the staging keeps its own. Those would never be served (their stamp is
// over) but would stay until the grace time; they are not kept.
TEST_CASE("a staging that ends after the job moved to another timeline keeps nothing", "[staged]") {
  StagedLayers staged(ManualExpiry());
  staged.DropOtherTimelines("j", Commit(0));  // the staging starts: the commit of step 7 in g0
  staged.DropOtherGenerations("j", 1);        // the job falls back while the bytes are fetched
  CHECK_FALSE(Stage(&staged, "j", 7, 3, Commit(0)));
  CHECK_FALSE(staged.Staged("j", Commit(0), 7, 3));
  CHECK(staged.bytes() == 0);
  // The new generation's commit stages again.
  CHECK(Stage(&staged, "j", 7, 3, Commit(1)));
  CHECK(staged.bytes() == 8192);
}

// A node whose ranks never come (a newer decision placed them elsewhere) never sees the job
// commit again: its layers go once neither staged nor served for the grace time, job by job.
TEST_CASE("staged layers nobody uses go after the grace time", "[staged]") {
  using Clock = StagedLayers::Clock;
  const Clock::time_point t0{};
  Clock::time_point now = t0;
  StagedLayersOptions o = ManualExpiry(std::chrono::minutes(10));
  o.now = [&] { return now; };
  StagedLayers staged(o);
  Stage(&staged, "j", 7, 3);
  Stage(&staged, "k", 3, 0);
  now = t0 + std::chrono::minutes(9);
  std::vector<uint8_t> w(100, 0xee);
  uint64_t served = 0;
  (void)staged.Serve("k", Commit(), 3, {Request("w", 0, 100, w.data())}, &served);
  REQUIRE(served == 100);
  CHECK(staged.DropIdle(t0 + std::chrono::minutes(9)) == 0);
  CHECK(staged.DropIdle(t0 + std::chrono::minutes(10)) == 8192);  // j: staged 10 min ago
  CHECK_FALSE(staged.Staged("j", Commit(), 7, 3));
  CHECK(staged.Staged("k", Commit(), 3, 0));  // k: served 1 min ago
  CHECK(staged.DropIdle(t0 + std::chrono::minutes(19)) == 8192);
  CHECK(staged.bytes() == 0);
}

TEST_CASE("staged layers expire on their own thread", "[staged]") {
  StagedLayersOptions o;
  o.grace = std::chrono::milliseconds(20);
  StagedLayers staged(o);
  Stage(&staged, "j", 7, 3);
  CHECK(reft::testing::Eventually([&] { return staged.bytes() == 0; }, std::chrono::seconds(10)));
}
