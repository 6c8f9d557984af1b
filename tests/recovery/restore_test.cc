// REFT-load over real nodes: a lost node's ranks restored bit-exactly and their slots
// regenerated; two failures in one SG; more failures than the protection tolerates; restore-check;
// the slots located and recorded through the SlotDirectory a ReftLoad is given.
#include <catch2/catch.hpp>

#include <atomic>

#include "etcd_fixture.h"
#include "recovery_fixture.h"
#include "reft/mutex.h"
#include "reft/recovery/reft_load.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

// Restores every rank of `spec` at `step`, each on the node `where` says (the rank's node, or
// a replacement), and checks the bytes.
void RestoreAll(Cluster& c, const JobSpec& spec, const std::map<std::string, size_t>& where,
                int64_t step, RestoreStats* total = nullptr) {
  for (const auto& rc : spec.Ranks()) {
    TestNode& n = c.node(where.at(rc.ToString()));
    ReftLoad load(n.store.get(), n.peer.get(), RecoveryAgreement::Of(n.peer->coordinator()),
                  TestOptions());
    RestoreStats stats;
    // As the restarted trainer's hello would: over etcd, holders serve a job's bytes only to a
    // node where a rank of it is joined.
    REQUIRE(n.peer->coordinator()->Join(spec.Key(rc), spec.layout).ok());
    auto st = load.Restore(spec.Meta(rc), &stats);
    n.peer->coordinator()->Leave(spec.Key(rc));
    INFO("restoring " << spec.Key(rc).ToString() << " on " << n.node_id);
    REQUIRE(st.ok());
    CheckRestored(*st, spec, rc, step);
    if (total != nullptr) total->Add(stats);
  }
}

// Node 1 of 4 is lost: its ranks restore on a replacement, bit-exactly, and regenerate their
// slots there, so the job survives the loss of another node.
void LostNodeIsRestoredAndRegenerated(const std::string& scheme,
                                      const peer::ControlPlaneFactory& control_plane) {
  INFO("scheme " << scheme);
  Cluster c(4, 64 << 10, 0, control_plane);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/4, /*tp=*/1, /*pp=*/2, scheme);
  auto place = RotatedPlacement(spec, 4);
  c.WriteStep(spec, place, 1);
  c.WriteStep(spec, place, 2);  // step 1 is freed everywhere: 2 is the one to restore

  c.KillAndWipe(1);
  const size_t r1 = c.Add("r1");
  c.Converge();
  // Before anything moves: the check says what will be rebuilt from what.
  {
    ReftLoad load(c.node(0).store.get(), c.node(0).peer.get(),
                  RecoveryAgreement::Of(c.node(0).peer->coordinator()), TestOptions());
    auto check = load.CheckRestore(spec.job);
    REQUIRE(check.ok());
    INFO(check->Summary());
    CHECK(check->step == 2);
    CHECK(check->recoverable);
    REQUIRE(check->groups.size() == 2);
    for (const auto& g : check->groups) {
      // Node 1 held member dp (1 - pp) of SG pp: that shard is rebuilt, the others served.
      const int lost_dp = (1 - g.pp + 4) % 4;
      CHECK(g.alive.size() == 3);
      for (const auto& s : g.shards) {
        INFO("pp" << g.pp << " dp" << s.dp << ": " << s.state << " " << s.detail);
        CHECK(s.state == (s.dp == lost_dp ? "rebuilt" : "slot"));
      }
      CHECK(g.ranks[lost_dp].nodes.empty());
      CHECK(g.ranks[lost_dp].rebuildable);
      CHECK_THAT(g.ranks[lost_dp].unique,
                 Catch::Contains("of pp" + std::to_string(g.pp) + "-tp0-dp" +
                                 std::to_string((lost_dp + 3) % 4)));
      if (scheme == "arc1") {
        CHECK_THAT(g.shards[lost_dp].detail, Catch::Contains("rep/arc+1"));
      } else if (scheme == "aec") {
        CHECK_THAT(g.shards[lost_dp].detail, Catch::Contains("AEC"));
      } else {
        CHECK_THAT(g.shards[lost_dp].detail, Catch::Contains("RS(2)"));
      }
    }
  }
  // The restarted trainers: node 1's ranks now run on the replacement node.
  auto where = place;
  for (auto& [rank, node] : where) {
    if (node == 1) node = r1;
  }
  RestoreStats total;
  RestoreAll(c, spec, where, 2, &total);
  CHECK(total.bytes_rebuilt > 0);
  CHECK(total.bytes_peer > 0);
  CHECK(total.bytes_local > 0);
  if (scheme == "arc1") CHECK(total.bytes_replica > 0);
  if (scheme != "arc1") CHECK(total.bytes_parity > 0);
  // The replacement regenerated the lost slots: same bytes as the originals, committed.
  for (const auto& rc : spec.Ranks()) {
    if (place.at(rc.ToString()) == 1)
      CheckSlotEqualsOriginal(c.node(r1).store.get(), spec, rc, 2);
  }
  // The job is protected again: lose another node, and everything still comes back.
  c.KillAndWipe(2);
  const size_t r2 = c.Add("r2");
  c.Converge();
  for (auto& [rank, node] : where) {
    if (node == 2) node = r2;
  }
  RestoreAll(c, spec, where, 2);
  for (const auto& rc : spec.Ranks()) {
    if (place.at(rc.ToString()) == 2)
      CheckSlotEqualsOriginal(c.node(r2).store.get(), spec, rc, 2);
  }
}

// A control plane's SlotDirectory, with what a restore asked it and recorded in it.
class WatchedSlots final : public coord::SlotDirectory {
 public:
  explicit WatchedSlots(coord::SlotDirectory* inner) : inner_(inner) {}

  std::vector<store::RankKey> JoinedRanks(const std::optional<std::string>& job) override {
    return inner_->JoinedRanks(job);
  }
  bool IsJoined(const store::RankKey& rank) override { return inner_->IsJoined(rank); }
  Result<std::vector<std::string>> JobNodes(const std::string& job) override {
    job_nodes_asked_.fetch_add(1);
    return inner_->JobNodes(job);
  }
  std::optional<std::string> SlotLocation(const store::RankKey& rank) override {
    return inner_->SlotLocation(rank);
  }
  std::optional<std::string> JoinedNode(const store::RankKey& rank) override {
    return inner_->JoinedNode(rank);
  }
  Status RecordSlot(const store::RankKey& rank, int64_t step) override {
    {
      MutexLock lock(mu_);
      recorded_.emplace_back(rank, step);
    }
    return inner_->RecordSlot(rank, step);
  }

  int job_nodes_asked() const { return job_nodes_asked_.load(); }
  std::vector<std::pair<store::RankKey, int64_t>> recorded() const {
    MutexLock lock(mu_);
    return recorded_;
  }

 private:
  coord::SlotDirectory* inner_;
  std::atomic<int> job_nodes_asked_{0};
  mutable Mutex mu_;
  std::vector<std::pair<store::RankKey, int64_t>> recorded_ REFT_GUARDED_BY(mu_);
};

}  // namespace

TEST_CASE("a lost node's ranks are restored bit-exactly and its slots regenerated", "[recovery]") {
  for (const std::string scheme : {"arc1", "aec", "rs2+aor"}) {
    SECTION(scheme) { LostNodeIsRestoredAndRegenerated(scheme, nullptr); }
  }
}

// The same over etcd: liveness is registration under a lease, the commit point and the slot
// locations come from etcd, and the replacement finds the surviving shards through them.
TEST_CASE("over etcd, a lost node's ranks are restored bit-exactly and its slots regenerated",
          "[recovery][etcd]") {
  reft::testing::EtcdCluster etcd(1);
  for (const std::string scheme : {"arc1", "rs2+aor"}) {
    SECTION(scheme) { LostNodeIsRestoredAndRegenerated(scheme, reft::testing::EtcdControlPlane(etcd)); }
  }
}

TEST_CASE("RebuildLostRanks regenerates every lost slot without a trainer", "[recovery]") {
  Cluster c(3);
  c.Converge();
  const JobSpec spec = MakeJob(3, 2, 1, "arc1");
  auto place = RotatedPlacement(spec, 3);
  c.WriteStep(spec, place, 5);
  c.KillAndWipe(0);
  const size_t r = c.Add("r0");
  c.Converge();
  ReftLoad load(c.node(r).store.get(), c.node(r).peer.get(),
                RecoveryAgreement::Of(c.node(r).peer->coordinator()), TestOptions());
  auto report = load.RebuildLostRanks(spec.job);
  REQUIRE(report.ok());
  CHECK(report->step == 5);
  size_t lost = 0;
  for (const auto& rc : spec.Ranks()) lost += place.at(rc.ToString()) == 0;
  REQUIRE(report->ranks.size() == lost);
  for (const auto& rr : report->ranks) {
    INFO(rr.rank.ToString() << ": " << rr.status.ToString() << " " << rr.detail);
    CHECK(rr.status.ok());
    CheckSlotEqualsOriginal(c.node(r).store.get(), spec, {rr.rank.pp, rr.rank.tp, rr.rank.dp}, 5);
  }
  // Nothing is left to rebuild; every rank restores, the lost ones from the new local slots.
  auto again = load.RebuildLostRanks(spec.job);
  REQUIRE(again.ok());
  CHECK(again->ranks.empty());
  for (auto& [rank, node] : place) {
    if (node == 0) node = r;
  }
  RestoreAll(c, spec, place, 5);
}

/// A 4-member SG that wrote step 3, lost members `a` and `b` (memory wiped) and gained the
/// replacement node `r`; `place` already puts the lost members' ranks on `r`.
struct TwoMembersLost {
  TwoMembersLost(const std::string& scheme, bool with_unique, int a, int b)
      : spec(MakeJob(4, 1, 1, scheme, with_unique)), place(RotatedPlacement(spec, 4)) {
    c.Converge();
    c.WriteStep(spec, place, 3);
    c.KillAndWipe(static_cast<size_t>(a));
    c.KillAndWipe(static_cast<size_t>(b));
    r = c.Add("r");
    c.Converge();
    for (auto& [rank, node] : place) {
      if (node == static_cast<size_t>(a) || node == static_cast<size_t>(b)) node = r;
    }
  }
  Cluster c{4};
  JobSpec spec;
  std::map<std::string, size_t> place;  // rank name -> node index
  size_t r = 0;
};

TEST_CASE("two nodes of one SG lost under arc2 and rs2 are restored", "[recovery]") {
  for (const std::string scheme : {"arc2", "rs2"}) {
    SECTION(scheme) {
      SECTION("adjacent members, no unique buffers") {
        TwoMembersLost t(scheme, /*with_unique=*/false, 1, 2);
        RestoreAll(t.c, t.spec, t.place, 3);
        CheckSlotEqualsOriginal(t.c.node(t.r).store.get(), t.spec, {0, 0, 1}, 3);
        CheckSlotEqualsOriginal(t.c.node(t.r).store.get(), t.spec, {0, 0, 2}, 3);
      }
      SECTION("members 1 and 3 with unique buffers (each has its ring copy)") {
        TwoMembersLost t(scheme, /*with_unique=*/true, 1, 3);
        RestoreAll(t.c, t.spec, t.place, 3);
      }
      SECTION("adjacent members with unique buffers: the second one's unique state is lost") {
        TwoMembersLost t(scheme, /*with_unique=*/true, 1, 2);
        ReftLoad load(t.c.node(t.r).store.get(), t.c.node(t.r).peer.get(),
                      RecoveryAgreement::Of(t.c.node(t.r).peer->coordinator()), TestOptions());
        // dp1's unique buffers live on in dp0's peer copy, but dp2's had their only copy in
        // dp1's slot. The restore is one job-wide decision: the step cannot be rebuilt for the
        // whole job, so every rank fails alike (never dp1 resuming beside a failed dp2), with
        // the same error naming the lost buffer.
        auto st1 = load.Restore(t.spec.Meta({0, 0, 1}));
        auto st2 = load.Restore(t.spec.Meta({0, 0, 2}));
        REQUIRE_FALSE(st1.ok());
        REQUIRE_FALSE(st2.ok());
        CHECK(st1.status().code() == StatusCode::kLost);
        CHECK(st2.status().code() == StatusCode::kLost);
        CHECK(st1.status().message() == st2.status().message());
        CHECK_THAT(st2.status().message(), Catch::Contains("unique dp2/"));
      }
    }
  }
}

TEST_CASE("more failures than AEC tolerates: Lost naming exactly what is lost", "[recovery]") {
  Cluster c(4);
  c.Converge();
  const JobSpec spec = MakeJob(4, 1, 1, "aec");
  auto place = RotatedPlacement(spec, 4);
  c.WriteStep(spec, place, 2);
  c.KillAndWipe(1);
  c.KillAndWipe(2);
  c.Converge();
  ReftLoad load(c.node(0).store.get(), c.node(0).peer.get(),
                RecoveryAgreement::Of(c.node(0).peer->coordinator()), TestOptions());
  auto st = load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE_FALSE(st.ok());
  INFO(st.status().ToString());
  CHECK(st.status().code() == StatusCode::kLost);
  CHECK_THAT(st.status().message(), Catch::Contains("shard dp1 bytes ["));
  CHECK_THAT(st.status().message(), Catch::Contains("shard dp2 bytes ["));
  CHECK_THAT(st.status().message(), Catch::Contains("w.layers["));
  CHECK_THAT(st.status().message(), Catch::Contains("no live node holds its slot"));

  auto check = load.CheckRestore(spec.job);
  REQUIRE(check.ok());
  INFO(check->Summary());
  CHECK_FALSE(check->recoverable);
  REQUIRE(check->groups.size() == 1);
  const auto& g = check->groups[0];
  CHECK(g.alive == std::vector<int>{0, 3});
  CHECK(g.shards[0].state == "slot");
  CHECK(g.shards[0].node == "n0");
  CHECK(g.shards[1].state == "lost");
  CHECK(g.shards[2].state == "lost");
  CHECK(g.shards[3].node == "n3");
  CHECK_THAT(g.lost, Catch::Contains("unique dp2/rng"));
  CHECK_THAT(check->Summary(), Catch::Contains("LOST"));
  // And a rebuild says so per rank instead of writing anything.
  auto report = load.RebuildLostRanks(spec.job);
  REQUIRE(report.ok());
  REQUIRE(report->ranks.size() == 2);
  for (const auto& rr : report->ranks) CHECK(rr.status.code() == StatusCode::kLost);
  CHECK(c.node(0).store->List(spec.job).size() == 1);
}

TEST_CASE("a trainer declaring another layout than its snapshot is refused by name", "[recovery]") {
  Cluster c(2);
  c.Converge();
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  auto place = RotatedPlacement(spec, 2);
  c.WriteStep(spec, place, 1);
  ReftLoad load(c.node(0).store.get(), c.node(0).peer.get(),
                RecoveryAgreement::Of(c.node(0).peer->coordinator()), TestOptions());
  protect::SlotMeta other = spec.Meta({0, 0, 0});
  other.buffers[0].size += 4;
  auto st = load.Restore(other);
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.status().message(), Catch::Contains("w.layers"));
  CHECK_THAT(st.status().message(), Catch::Contains("400016"));
  other = spec.Meta({0, 0, 0});
  other.scheme = *protect::Scheme::Parse("aec");
  st = load.Restore(other);
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(st.status().message(), Catch::Contains("protection aec (snapshot: arc1)"));
  // A job with nothing committed: step -1, nothing to restore.
  JobSpec fresh = spec;
  fresh.job = "fresh";
  auto none = load.Restore(fresh.Meta({0, 0, 0}));
  REQUIRE(none.ok());
  CHECK(none->step == -1);
  // Its check says so: step -1, not recoverable, and why.
  auto check = load.CheckRestore(fresh.job);
  REQUIRE(check.ok());
  CHECK(check->step == -1);
  CHECK_FALSE(check->recoverable);
  REQUIRE_FALSE(check->warnings.empty());
  CHECK_THAT(check->warnings.back(), Catch::Contains("has no committed step"));
}

TEST_CASE("a restore locates through the SlotDirectory it is given and records its slot there",
          "[recovery]") {
  Cluster c(2);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/2, /*tp=*/1, /*pp=*/1, "arc1");
  auto place = RotatedPlacement(spec, 2);
  c.WriteStep(spec, place, 1);
  c.KillAndWipe(1);
  const size_t r1 = c.Add("r1");
  c.Converge();
  RankCoord lost;
  for (const auto& rc : spec.Ranks()) {
    if (place.at(rc.ToString()) == 1) lost = rc;
  }
  TestNode& n = c.node(r1);
  WatchedSlots slots(n.peer->coordinator());
  RecoveryAgreement agreement = RecoveryAgreement::Of(n.peer->coordinator());
  agreement.slots = &slots;
  ReftLoad load(n.store.get(), n.peer.get(), agreement, TestOptions());
  REQUIRE(n.peer->coordinator()->Join(spec.Key(lost), spec.layout).ok());
  auto st = load.Restore(spec.Meta(lost));
  n.peer->coordinator()->Leave(spec.Key(lost));
  REQUIRE(st.ok());
  CheckRestored(*st, spec, lost, 1);
  CHECK(slots.job_nodes_asked() > 0);
  // The replacement regenerated the lost rank's slot, recorded where it was told to.
  CHECK(slots.recorded() == std::vector<std::pair<store::RankKey, int64_t>>{{spec.Key(lost), 1}});
}
