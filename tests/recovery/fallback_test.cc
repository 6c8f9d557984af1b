// Restore fallback to the persistent tier, decided job-wide, and the rollback of the commit
// state (job generation) on every node: real stores, real PeerNodes on loopback, one persist
// directory shared by the nodes.
#include <catch2/catch.hpp>
#include <set>

#include "tier_fixture.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

std::set<int64_t> StepsIn(store::SnapshotStore* store, const std::string& job) {
  std::set<int64_t> out;
  for (const auto& s : store->List(job)) out.insert(s.step);
  return out;
}

}  // namespace

TEST_CASE(
    "two nodes of one SG lost under aec: every rank restores the persisted step, none the "
    "newer one, and the job commits again",
    "[recovery][persist]") {
  reft::testing::TempDir dir("reft-persist-fallback");
  Cluster c(4);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/3, /*tp=*/1, /*pp=*/2, "aec");
  // SG pp0 on n0, n1, n2: loses two members below (beyond AEC). SG pp1 on n0, n3, n2: loses one
  // (AEC rebuilds it in memory), yet it must restore the persisted step too.
  std::map<std::string, size_t> place;
  for (const auto& rc : spec.Ranks()) {
    static const size_t kPp0[] = {0, 1, 2};
    static const size_t kPp1[] = {0, 3, 2};
    place[rc.ToString()] = rc.pp == 0 ? kPp0[rc.dp] : kPp1[rc.dp];
  }
  std::vector<std::unique_ptr<TierNode>> t;
  for (size_t i = 0; i < 4; ++i) t.push_back(std::make_unique<TierNode>(c.node(i), dir.path()));

  c.WriteStep(spec, place, 1);
  c.WriteStep(spec, place, 2);
  auto persisted = t[3]->persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(persisted.ok());
  INFO("persist: " << (persisted->problems.empty() ? "" : persisted->problems.front()));
  REQUIRE(persisted->ok());
  CHECK(persisted->step == 2);
  c.WriteStep(spec, place, 3);  // S = 3: in memory only

  t[1].reset();
  c.KillAndWipe(1);
  t[2].reset();
  c.KillAndWipe(2);
  c.Converge();

  // Memory: SG pp0 cannot rebuild step 3, SG pp1 can.
  auto check = t[0]->load.CheckRestore(spec.job);
  REQUIRE(check.ok());
  INFO(check->Summary());
  CHECK(check->step == 3);
  CHECK_FALSE(check->recoverable);
  REQUIRE(check->groups.size() == 2);
  CHECK_FALSE(check->groups[0].recoverable);
  CHECK(check->groups[1].recoverable);

  // The restarted trainers, the recoverable SG's first: every rank gets step 2 from the tier.
  std::vector<std::pair<RankCoord, size_t>> order = {{{1, 0, 0}, 0}, {{1, 0, 1}, 3},
                                                              {{1, 0, 2}, 3}, {{0, 0, 0}, 0},
                                                              {{0, 0, 1}, 3}, {{0, 0, 2}, 0}};
  bool first = true;
  for (const auto& [rc, n] : order) {
    INFO("restoring " << spec.Key(rc).ToString() << " on n" << n);
    RestoreStats stats;
    auto st = t[n]->load.Restore(spec.Meta(rc), &stats);
    REQUIRE(st.ok());
    CheckRestoredFrom(*st, spec, rc, 2, "persistent");
    CHECK(stats.bytes_persistent > 0);
    CHECK(stats.step == 2);
    CHECK_THAT(st->detail, Catch::Contains("memory cannot rebuild step 3"));
    CHECK_THAT(st->detail, Catch::Contains("SG pp0-tp0"));
    if (first) {
      first = false;
      // The first restore moved the whole job: both live nodes are in generation 1 at step 2,
      // and neither holds a slot of the abandoned step 3 any more.
      for (size_t i : {size_t{0}, size_t{3}}) {
        INFO("node n" << i);
        auto g = c.node(i).peer->coordinator()->Generation(spec.job);
        CHECK(g.generation == 1);
        CHECK(g.base_step == 2);
        CHECK(g.newest_committed == 2);
        CHECK(g.persist_floor >= 3);
        CHECK(StepsIn(c.node(i).store.get(), spec.job).count(3) == 0);
      }
    }
  }
  // Nobody re-learns "committed 3": the live nodes exchange their states and stay at step 2.
  REQUIRE(c.node(3).peer->coordinator()->SyncNow(spec.job, 1s).ok());
  REQUIRE(c.node(0).peer->coordinator()->SyncNow(spec.job, 1s).ok());
  for (size_t i : {size_t{0}, size_t{3}}) {
    CHECK(c.node(i).peer->coordinator()->NewestCommitted(spec.job) == 2);
  }

  // The job continues at step 3 on the two live nodes: steps 3 and 4 commit again.
  std::map<std::string, size_t> place2;
  for (const auto& rc : spec.Ranks()) place2[rc.ToString()] = rc.dp == 1 ? 3 : 0;
  c.WriteStep(spec, place2, 3);
  c.WriteStep(spec, place2, 4);
  for (size_t i : {size_t{0}, size_t{3}}) {
    CHECK(c.node(i).peer->coordinator()->NewestCommitted(spec.job) == 4);
    CHECK(c.node(i).peer->coordinator()->Generation(spec.job).generation == 1);
  }
  // A restore now comes from memory again, at the new step.
  auto again = t[3]->load.Restore(spec.Meta({0, 0, 2}));
  REQUIRE(again.ok());
  CheckRestored(*again, spec, {0, 0, 2}, 4);

  // The generation never persists a step up to its floor (directories there may hold files of
  // the abandoned run), and persists the newer ones.
  auto below = t[0]->persister->PersistJob(spec.job, 3);
  REQUIRE(below.ok());
  for (const auto& n : below->nodes) {
    INFO(n.node << ": " << n.status.ToString() << " " << n.skipped_reason);
    CHECK(n.status.ok());
    CHECK((n.skipped || n.ranks.empty()));
  }
  auto above = t[0]->persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(above.ok());
  CHECK(above->step == 4);
  CHECK(above->ok());
}

TEST_CASE("nothing committed in memory anywhere: every rank restores the newest persisted step",
          "[recovery][persist]") {
  reft::testing::TempDir dir("reft-persist-fallback");
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  {
    Cluster c(2);
    c.Converge();
    auto place = RotatedPlacement(spec, 2);
    TierNode t0(c.node(0), dir.path()), t1(c.node(1), dir.path());
    c.WriteStep(spec, place, 5);
    auto rep = t0.persister->PersistJob(spec.job, std::nullopt);
    REQUIRE(rep.ok());
    REQUIRE(rep->ok());
    c.WriteStep(spec, place, 6);
  }
  // A whole new cluster (every node's memory gone, e.g. a power cut) on the same directory.
  Cluster c(2);
  c.Converge();
  TierNode t0(c.node(0), dir.path()), t1(c.node(1), dir.path());
  auto st = t1.load.Restore(spec.Meta({0, 0, 1}));
  REQUIRE(st.ok());
  CheckRestoredFrom(*st, spec, {0, 0, 1}, 5, "persistent");
  CHECK_THAT(st->detail, Catch::Contains("nothing of job 'job' is committed in memory"));
  auto other = t0.load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE(other.ok());
  CheckRestoredFrom(*other, spec, {0, 0, 0}, 5, "persistent");
  CHECK(c.node(0).peer->coordinator()->Generation(spec.job).generation == 1);
  // Without a persisted step of the job, a fresh job restores nothing.
  JobSpec fresh = spec;
  fresh.job = "fresh";
  auto none = t0.load.Restore(fresh.Meta({0, 0, 0}));
  REQUIRE(none.ok());
  CHECK(none->step == -1);
}

TEST_CASE("a step memory cannot rebuild and no persisted fallback: Lost naming both",
          "[recovery][persist]") {
  reft::testing::TempDir dir("reft-persist-fallback");
  Cluster c(3);
  c.Converge();
  const JobSpec spec = MakeJob(3, 1, 1, "aec");
  auto place = RotatedPlacement(spec, 3);
  std::vector<std::unique_ptr<TierNode>> t;
  for (size_t i = 0; i < 3; ++i) t.push_back(std::make_unique<TierNode>(c.node(i), dir.path()));
  c.WriteStep(spec, place, 1);
  t[1].reset();
  c.KillAndWipe(1);
  t[2].reset();
  c.KillAndWipe(2);
  c.Converge();
  auto st = t[0]->load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE_FALSE(st.ok());
  INFO(st.status().ToString());
  CHECK(st.status().code() == StatusCode::kLost);
  CHECK_THAT(st.status().message(), Catch::Contains("LOST"));
  CHECK_THAT(st.status().message(), Catch::Contains("has no complete step"));
  // Nothing moved: the job stays at generation 0, step 1.
  CHECK(c.node(0).peer->coordinator()->Generation(spec.job).generation == 0);
  CHECK(c.node(0).peer->coordinator()->NewestCommitted(spec.job) == 1);
}
