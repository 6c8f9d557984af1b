// Streamed restores through REFT-load over real nodes: the bytes a trainer is sent are its
// state, a lost AEC shard decoded from the passing pieces is bit-exact, a replacement's slot
// captured from them (copies and AEC parity) equals the one the save path wrote, a restore
// that needs RS decoding never opens the stream, and a stream whose reader fails ends the
// restore with that error and leaves no partial slot.
#include <catch2/catch.hpp>

#include <cstring>

#include "collecting_sink.h"
#include "recovery_fixture.h"
#include "reft/mapped_memfd.h"
#include "reft/mutex.h"
#include "reft/recovery/reft_load.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using reft::recovery::test::CollectingSink;

namespace {

struct LostNode {
  Cluster c{4};
  JobSpec spec;
  std::map<std::string, size_t> place, where;  // before and after node 1's loss
  size_t replacement = 0;

  explicit LostNode(const std::string& scheme, uint64_t scale = 1) {
    c.Converge();
    spec = MakeJob(/*dp=*/4, /*tp=*/1, /*pp=*/2, scheme, /*with_unique=*/true, scale);
    place = RotatedPlacement(spec, 4);
    c.WriteStep(spec, place, 1);
    c.WriteStep(spec, place, 2);
    c.KillAndWipe(1);
    replacement = c.Add("r1");
    c.Converge();
    where = place;
    for (auto& [rank, node] : where) {
      if (node == 1) node = replacement;
    }
  }

  Result<local::RestoredState> Restore(const RankCoord& rc, CollectingSink* sink) {
    TestNode& n = c.node(where.at(rc.ToString()));
    ReftLoad load(n.store.get(), n.peer.get(), RecoveryAgreement::Of(n.peer->coordinator()),
                  TestOptions());
    RestoreStats stats;
    local::RestoreRequest request;
    request.sink = sink;
    return load.Restore(spec.Meta(rc), &stats, nullptr, request);
  }
};

}  // namespace

TEST_CASE("ARC copies stream: every rank gets its state and the replacement captures its slot",
          "[recovery]") {
  LostNode x("arc1");
  for (const auto& rc : x.spec.Ranks()) {
    INFO("restoring " << x.spec.Key(rc).ToString());
    CollectingSink sink;
    auto st = x.Restore(rc, &sink);
    REQUIRE(st.ok());
    CHECK(st->streamed);
    CHECK_FALSE(st->fd.valid());
    CHECK(sink.complete());
    CHECK_FALSE(sink.out_of_range());
    CHECK(sink.borrowed() > 0);  // pieces read straight into the memory the sink lent
    CHECK_THAT(st->detail, Catch::Contains("streamed"));
    CheckRestored(sink.AsMemfd(*st), x.spec, rc, 2);
    if (x.place.at(rc.ToString()) == 1) {
      CHECK_THAT(st->detail, Catch::Contains("slot regenerated on this node"));
      // Captured piece by piece, it equals region by region what the save path wrote.
      CheckSlotEqualsOriginal(x.c.node(x.replacement).store.get(), x.spec, rc, 2);
    }
  }
}

namespace {

// Restores `rc` of `x` as a stream and checks every byte; `decodes`: whether the restore must say
// it rebuilt a lost shard from AEC parity.
void RestoreStreamed(LostNode& x, const RankCoord& rc, bool decodes) {
  INFO("restoring " << x.spec.Key(rc).ToString());
  CollectingSink sink;
  auto st = x.Restore(rc, &sink);
  if (!st.ok()) FAIL(st.status().ToString());
  CHECK(st->streamed);
  CHECK(sink.complete());
  CHECK_FALSE(sink.out_of_range());
  CHECK((st->detail.find("rebuilt from AEC parity") != std::string::npos) == decodes);
  CheckRestored(sink.AsMemfd(*st), x.spec, rc, 2);
}

}  // namespace

TEST_CASE("a lost AEC shard is decoded as the others stream, the replacement captures its parity",
          "[recovery]") {
  LostNode x("aec");
  auto restore = [&](const RankCoord& rc, bool decodes) { RestoreStreamed(x, rc, decodes); };
  // The survivors first: each SG's lost shard is decoded from parity while the others pass.
  for (const auto& rc : x.spec.Ranks()) {
    if (x.place.at(rc.ToString()) != 1) restore(rc, true);
  }
  // The lost ranks on the replacement decode too, and their regenerated slots, AEC parity
  // included, equal what the save path wrote.
  for (const auto& rc : x.spec.Ranks()) {
    if (x.place.at(rc.ToString()) != 1) continue;
    restore(rc, true);
    CheckSlotEqualsOriginal(x.c.node(x.replacement).store.get(), x.spec, rc, 2);
  }
  // Every slot exists again: nothing to decode.
  for (const auto& rc : x.spec.Ranks()) restore(rc, false);
}

TEST_CASE("a lost AEC shard of several decode stretches is summed and delivered stretch by stretch",
          "[recovery]") {
  // ~56 MB per group: a shard of ~14 MB, AEC sub-blocks of ~4.6 MB, so each decoded sub-block
  // range spans a 4 MiB stretch and a partial one, fed by pieces (64 KiB here) in the order
  // of their place in their sub-block.
  LostNode x("aec", /*scale=*/100);
  auto restore = [&](const RankCoord& rc) { RestoreStreamed(x, rc, /*decodes=*/true); };
  // Group pp0's survivors, then its lost rank on the replacement (which regenerates the slot:
  // nothing is decoded after it).
  for (const auto& rc : x.spec.Ranks()) {
    if (rc.pp == 0 && x.place.at(rc.ToString()) != 1) restore(rc);
  }
  for (const auto& rc : x.spec.Ranks()) {
    if (rc.pp != 0 || x.place.at(rc.ToString()) != 1) continue;
    restore(rc);
    CheckSlotEqualsOriginal(x.c.node(x.replacement).store.get(), x.spec, rc, 2);
  }
}

TEST_CASE("parity corrupted at rest is caught by a streamed decode, never delivered as bytes",
          "[recovery]") {
  LostNode x("aec");
  const auto ranks = x.spec.Ranks();
  const RankCoord* survivor = nullptr;
  const RankCoord* damaged = nullptr;  // same SG, on node 2: its parity rebuilds part of dp1
  for (const auto& rc : ranks) {
    if (x.place.at(rc.ToString()) == 0 && rc.pp == 0) survivor = &rc;
  }
  REQUIRE(survivor != nullptr);
  for (const auto& rc : ranks) {
    if (x.place.at(rc.ToString()) == 2 && rc.pp == survivor->pp) damaged = &rc;
  }
  REQUIRE(damaged != nullptr);
  FlipByteInSegment(x.c.node(2).store.get(), x.spec.Key(*damaged), 2, "rep/aec", 5);
  // With dp1 lost and dp2's parity unreadable, the group has lost two members' worth: the
  // restore fails naming the loss; the stream was ended incomplete, not passed off as state.
  CollectingSink sink;
  auto st = x.Restore(*survivor, &sink);
  INFO(st.status().ToString());
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().code() == StatusCode::kLost);
  CHECK_THAT(st.status().message(), Catch::Contains("dp1") && Catch::Contains("dp2"));
  CHECK(sink.begun());
  CHECK_FALSE(sink.complete());
}

TEST_CASE("a restore that needs RS decoding assembles in memory and never opens the stream",
          "[recovery]") {
  LostNode x("rs1");
  auto restore = [&](const RankCoord& rc, bool streams) {
    INFO("restoring " << x.spec.Key(rc).ToString());
    CollectingSink sink;
    auto st = x.Restore(rc, &sink);
    REQUIRE(st.ok());
    CHECK(st->streamed == streams);
    CHECK(sink.begun() == streams);
    CheckRestored(streams ? sink.AsMemfd(*st) : std::move(*st), x.spec, rc, 2);
  };
  for (const auto& rc : x.spec.Ranks()) {
    if (x.place.at(rc.ToString()) != 1) restore(rc, false);
  }
  // The replacement's slots hold RS parity: encoded from the assembled state.
  for (const auto& rc : x.spec.Ranks()) {
    if (x.place.at(rc.ToString()) != 1) continue;
    restore(rc, false);
    CheckSlotEqualsOriginal(x.c.node(x.replacement).store.get(), x.spec, rc, 2);
  }
  for (const auto& rc : x.spec.Ranks()) restore(rc, true);
}

TEST_CASE("a stream whose trainer goes away ends the restore and leaves no partial slot",
          "[recovery]") {
  LostNode x("arc1");
  const RankCoord* lost = nullptr;
  const auto ranks = x.spec.Ranks();
  for (const auto& rc : ranks) {
    if (x.place.at(rc.ToString()) == 1) lost = &rc;
  }
  REQUIRE(lost != nullptr);
  CollectingSink gone(/*fail_from=*/2);
  auto st = x.Restore(*lost, &gone);
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(st.status().message(), Catch::Contains("the trainer closed the stream"));
  CHECK_FALSE(gone.complete());
  store::SnapshotStore* store = x.c.node(x.replacement).store.get();
  for (const auto& s : store->List(x.spec.job)) CHECK(s.state != store::SlotState::kWriting);
  // The trainer comes back: the restore streams again and regenerates the slot.
  CollectingSink again;
  auto st2 = x.Restore(*lost, &again);
  REQUIRE(st2.ok());
  CHECK(st2->streamed);
  CheckRestored(again.AsMemfd(*st2), x.spec, *lost, 2);
  CheckSlotEqualsOriginal(store, x.spec, *lost, 2);
}
