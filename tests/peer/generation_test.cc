// Job generations of the commit state (restore fallback, docs/recovery.md): a higher
// generation replaces the state and rolls the store back, a lower one is ignored, equal
// generations settle on the lower base, StartGeneration is compare-and-set and spreads to
// every member, and the generation survives a daemon restart next to the slots.
#include <catch2/catch.hpp>

#include "peer_fixture.h"
#include "gossip_job_coordinator.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace std::chrono_literals;

namespace {

const JobLayout kOne{1, 1, 1, 0};
const store::RankKey kRank{"job", 0, 0, 0};

void CompleteStep(TestNode& n, int64_t step) {
  WriteSlot(n.store.get(), kRank, step, reft::testing::RandomBytes(4096, 7 + step));
  REQUIRE(n.peer->coordinator()->Complete(kRank, step, n.peer->coordinator()->RestoreEpoch(kRank.job)).ok());
  REQUIRE(n.peer->coordinator()->WaitCommitted("job", step, 2s));
}

v1::JobCommitState State(uint64_t generation, std::optional<int64_t> base,
                         std::optional<int64_t> committed) {
  v1::JobCommitState s;
  s.set_job("job");
  s.set_dp(1);
  s.set_tp(1);
  s.set_pp(1);
  s.set_generation(generation);
  if (base) {
    s.set_has_base(true);
    s.set_base_step(*base);
  }
  s.set_persist_floor(9);
  s.set_fallback_reason("test");
  if (committed) {
    s.set_has_committed(true);
    s.set_newest_committed(*committed);
  }
  return s;
}

}  // namespace

TEST_CASE("a higher generation replaces the commit state and rolls the store back", "[peer]") {
  reft::testing::TempDir d("reft-peer");
  TestNode n("g0", d.path(), {});
  auto* co = dynamic_cast<coord::GossipJobCoordinator*>(n.peer->coordinator());
  REQUIRE(co != nullptr);
  REQUIRE(co->Join(kRank, kOne).ok());
  CompleteStep(n, 1);
  CompleteStep(n, 2);
  CompleteStep(n, 3);
  REQUIRE(n.store->NewestCommitted(kRank) == 3);
  int dropped_seen = -1;
  co->AddGenerationListener([&](const std::string& job, const JobGeneration& g, int dropped) {
    CHECK(job == "job");
    CHECK(g.generation == 1);
    dropped_seen = dropped;
  });

  auto merged = co->MergeRemote(State(1, 2, 2));
  REQUIRE(merged.ok());
  CHECK(merged->generation() == 1);
  CHECK(merged->newest_committed() == 2);
  auto g = co->Generation("job");
  CHECK(g.generation == 1);
  CHECK(g.base_step == 2);
  CHECK(g.persist_floor == 9);
  CHECK(g.reason == "test");
  CHECK(co->NewestCommitted("job") == 2);
  // Every slot newer than the base is gone from the store; the listener heard of it.
  for (const auto& s : n.store->List("job")) CHECK(s.step <= 2);
  CHECK(dropped_seen >= 1);

  // A stale peer still at generation 0 claims step 4 committed: ignored, and it is answered
  // with generation 1 (so it rolls back when it merges the answer).
  auto stale = co->MergeRemote(State(0, std::nullopt, 4));
  REQUIRE(stale.ok());
  CHECK(stale->generation() == 1);
  CHECK(co->NewestCommitted("job") == 2);

  // The job continues: step 3 commits again in generation 1.
  CompleteStep(n, 3);
  CHECK(co->NewestCommitted("job") == 3);
  CHECK(co->Generation("job").generation == 1);

  // Same generation, lower base (two restores saw different tiers): the lower base wins.
  auto lower = co->MergeRemote(State(1, 1, 1));
  REQUIRE(lower.ok());
  CHECK(co->Generation("job").base_step == 1);
  CHECK(co->NewestCommitted("job") == 1);
  // ... and a higher base in the same generation changes nothing.
  REQUIRE(co->MergeRemote(State(1, 2, 2)).ok());
  CHECK(co->Generation("job").base_step == 1);
}

TEST_CASE("StartGeneration is compare-and-set and SyncNow spreads it to every member", "[peer]") {
  reft::testing::TempDir d0("reft-peer"), d1("reft-peer");
  TestNode a("s0", d0.path(), {});
  TestNode b("s1", d1.path(), {a.address});
  REQUIRE(peer::test::Eventually(
      [&] {
        return a.peer->membership().LiveMembers().size() == 1 &&
               b.peer->membership().LiveMembers().size() == 1;
      },
      3s));
  const JobLayout two{2, 1, 1, 0};
  const store::RankKey r0{"job", 0, 0, 0}, r1{"job", 0, 0, 1};
  REQUIRE(a.peer->coordinator()->Join(r0, two).ok());
  REQUIRE(b.peer->coordinator()->Join(r1, two).ok());
  for (int64_t step = 1; step <= 3; ++step) {
    WriteSlot(a.store.get(), r0, step, reft::testing::RandomBytes(1000, step));
    WriteSlot(b.store.get(), r1, step, reft::testing::RandomBytes(1000, step));
    REQUIRE(a.peer->coordinator()->Complete(r0, step, a.peer->coordinator()->RestoreEpoch(r0.job)).ok());
    REQUIRE(b.peer->coordinator()->Complete(r1, step, b.peer->coordinator()->RestoreEpoch(r1.job)).ok());
    REQUIRE(a.peer->coordinator()->WaitCommitted("job", step, 3s));
    REQUIRE(b.peer->coordinator()->WaitCommitted("job", step, 3s));
  }
  auto g = a.peer->coordinator()->StartGeneration(
      "job", reft::coord::GenerationStart{0, 3, 1, 3, "memory lost"});
  CHECK(g.generation == 1);
  CHECK(g.base_step == 1);
  // A second restore of the same failure (it also saw generation 0) changes nothing.
  auto again = a.peer->coordinator()->StartGeneration(
      "job", reft::coord::GenerationStart{0, 3, 2, 3, "other"});
  CHECK(again.generation == 1);
  CHECK(again.base_step == 1);
  REQUIRE(a.peer->coordinator()->SyncNow("job", 1s).ok());
  auto gb = b.peer->coordinator()->Generation("job");
  CHECK(gb.generation == 1);
  CHECK(gb.base_step == 1);
  CHECK(gb.reason == "memory lost");
  CHECK(b.peer->coordinator()->NewestCommitted("job") == 1);
  CHECK(b.store->List("job").empty());  // its slot of step 3 belonged to the abandoned run
  // Steps 2.. commit again on both nodes.
  WriteSlot(a.store.get(), r0, 2, reft::testing::RandomBytes(1000, 2));
  WriteSlot(b.store.get(), r1, 2, reft::testing::RandomBytes(1000, 2));
  // The fallback's decision is a new restore epoch on the node that made it: a trainer that
  // restored (or joined) before it is refused (with gossip, epochs are each node's own).
  CHECK(a.peer->coordinator()->RestoreEpoch("job") > 0);
  CHECK(a.peer->coordinator()->Complete(r0, 2, 0).code() == StatusCode::kCancelled);
  REQUIRE(a.peer->coordinator()->Complete(r0, 2, a.peer->coordinator()->RestoreEpoch(r0.job)).ok());
  REQUIRE(b.peer->coordinator()->Complete(r1, 2, b.peer->coordinator()->RestoreEpoch(r1.job)).ok());
  CHECK(a.peer->coordinator()->WaitCommitted("job", 2, 3s));
  CHECK(b.peer->coordinator()->WaitCommitted("job", 2, 3s));
  CHECK(a.store->NewestCommitted(r0) == 2);
}

TEST_CASE("the generation survives a daemon restart next to the slots", "[peer]") {
  reft::testing::TempDir d("reft-peer");
  const std::string state_dir = d.path() + "/commit-state";
  {
    TestNode n("r0", d.path(), {});
    n.peer->coordinator()->SetStateDir(state_dir);
    REQUIRE(n.peer->coordinator()->Join(kRank, kOne).ok());
    CompleteStep(n, 4);
    auto g = n.peer->coordinator()->StartGeneration(
        "job", reft::coord::GenerationStart{0, 4, 2, 4, "lost SG pp0-tp0"});
    REQUIRE(g.generation == 1);
    CompleteStep(n, 3);  // generation 1 commits step 3
  }
  TestNode n("r0", d.path(), {});
  n.peer->coordinator()->SetStateDir(state_dir);
  auto g = n.peer->coordinator()->Generation("job");
  CHECK(g.generation == 1);
  CHECK(g.base_step == 2);
  CHECK(g.persist_floor == 4);
  CHECK(g.reason == "lost SG pp0-tp0");
  CHECK(g.newest_committed == 3);  // its adopted slot of step 3 is of generation 1: kept
  CHECK(n.store->NewestCommitted(kRank) == 3);
}
