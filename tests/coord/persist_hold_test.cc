// Persist holds on a real etcd with in-process nodes (coord::PersistHold): the job's
// coordinator does not commit past a held step until every node of the hold pinned it, and
// commits once the hold runs out.

#include <catch2/catch.hpp>

#include "etcd_fixture.h"
#include "peer_fixture.h"
#include "reft/coord/etcd_job_coordinator.h"
#include "reft/coord/persist_hold.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace std::chrono_literals;

namespace {

const JobLayout kLayout{/*dp=*/2, /*tp=*/1, /*pp=*/1, /*zero=*/0};

// Two nodes of one job: rank dp0 on n0, dp1 on n1.
struct TwoNodes {
  explicit TwoNodes(const reft::testing::EtcdCluster& etcd) {
    for (int i = 0; i < 2; ++i) {
      dirs.push_back(std::make_unique<reft::testing::TempDir>("reft-hold"));
      nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                                 std::vector<std::string>{}, 0, 64 << 10, 0,
                                                 nullptr, reft::testing::EtcdControlPlane(etcd)));
    }
    for (int i = 0; i < 2; ++i) REQUIRE(co(i)->Join(Rank(i), kLayout).ok());
  }
  static store::RankKey Rank(int dp) { return {"job", 0, 0, dp}; }
  JobCoordinator* co(int n) { return nodes[n]->peer->coordinator(); }
  coord::PersistHold& hold(int n) {
    auto* etcd = dynamic_cast<coord::EtcdJobCoordinator*>(co(n));
    REQUIRE(etcd != nullptr);
    return etcd->persist_hold();
  }
  // Both ranks complete `step` (nothing waits for the commit).
  void CompleteAll(int64_t step) {
    for (int n = 0; n < 2; ++n) {
      WriteSlot(nodes[n]->store.get(), Rank(n), step, reft::testing::RandomBytes(4096, 11 + step));
      REQUIRE(co(n)->Complete(Rank(n), step, co(n)->RestoreEpoch("job")).ok());
    }
  }
  // The node coordinating the job, once one does.
  int Leader() {
    REQUIRE(reft::testing::Eventually([&] { return co(0)->LeadsJob("job") != co(1)->LeadsJob("job"); },
                                      5s));
    return co(0)->LeadsJob("job") ? 0 : 1;
  }
  std::vector<std::unique_ptr<reft::testing::TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
};

}  // namespace

TEST_CASE("etcd persist hold: the next commit waits until every node pinned the held step",
          "[coord]") {
  reft::testing::EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const int leader = c.Leader();
  c.CompleteAll(1);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 1, 5s));

  // A persist on the node that does not coordinate holds the commit at step 1 (a long hold:
  // nothing below can be its running out).
  auto held = c.hold(1 - leader).Hold("job", std::nullopt, {"n0", "n1"}, 60s);
  REQUIRE(held.ok());
  REQUIRE(*held == std::optional<int64_t>(1));
  coord::PersistHold& gate = c.hold(leader);
  const uint64_t checks = gate.stats().held_checks;
  c.CompleteAll(2);
  // The coordinator has every completion of step 2 and holds its commit.
  REQUIRE(reft::testing::Eventually([&] { return gate.stats().held_checks > checks; }, 5s));
  CHECK(c.co(leader)->NewestCommitted("job") == 1);

  // One node pinned: still held.
  REQUIRE(c.hold(0).Pinned("job", 1).ok());
  REQUIRE(reft::testing::Eventually([&] { return gate.PinsSeen("job").count("n0") == 1; }, 5s));
  for (int n = 0; n < 2; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 300ms));
  for (int n = 0; n < 2; ++n) CHECK(c.nodes[n]->store->Get(TwoNodes::Rank(n), 1).ok());

  // Both pinned: step 2 commits everywhere.
  REQUIRE(c.hold(1).Pinned("job", 1).ok());
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 5s));
  CHECK(gate.stats().timeouts == 0);
  CHECK(gate.stats().held_seconds > 0);

  // Released: the next steps commit without waiting for pins.
  c.hold(1 - leader).Release("job", 1);
  c.CompleteAll(3);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 3, 5s));
}

TEST_CASE("etcd persist hold: a hold that runs out lets the commit go on", "[coord]") {
  reft::testing::EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const int leader = c.Leader();
  c.CompleteAll(1);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 1, 5s));

  auto held = c.hold(leader).Hold("job", 1, {"n0", "n1"}, 400ms);
  REQUIRE(held.ok());
  REQUIRE(*held == std::optional<int64_t>(1));
  REQUIRE(c.hold(leader).Pinned("job", 1).ok());  // one node pins, the other never does
  c.CompleteAll(2);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 10s));
  const auto stats = c.hold(leader).stats();
  CHECK(stats.timeouts == 1);
  CHECK(stats.held_seconds > 0);
}

TEST_CASE("etcd persist hold: a node of the hold that dies does not hold the commit until the "
          "hold runs out", "[coord]") {
  reft::testing::EtcdCluster etcd(1);
  TwoNodes c(etcd);
  // A third node of the hold (it holds slots of the job, say), which dies before it pins.
  reft::testing::TempDir dir("reft-hold");
  auto third = std::make_unique<TestNode>("n2", dir.path(), std::vector<std::string>{}, 0,
                                          64 << 10, 0, nullptr,
                                          reft::testing::EtcdControlPlane(etcd));
  const int leader = c.Leader();
  c.CompleteAll(1);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 1, 5s));
  // A long hold: nothing below can be its running out.
  auto held = c.hold(1 - leader).Hold("job", 1, {"n0", "n1", "n2"}, 120s);
  REQUIRE(held.ok());
  REQUIRE(*held == std::optional<int64_t>(1));
  for (int n = 0; n < 2; ++n) REQUIRE(c.hold(n).Pinned("job", 1).ok());
  coord::PersistHold& gate = c.hold(leader);
  REQUIRE(reft::testing::Eventually([&] { return gate.PinsSeen("job").size() == 2; }, 5s));
  c.CompleteAll(2);
  // Held while n2 lives without a pin.
  for (int n = 0; n < 2; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 500ms));
  third.reset();  // n2 stops: its lease is revoked, it is dead
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 10s));
  CHECK(gate.stats().timeouts == 0);
}

TEST_CASE("etcd persist hold: only the commit point is held, pins only under a hold", "[coord]") {
  reft::testing::EtcdCluster etcd(1);
  TwoNodes c(etcd);
  const int leader = c.Leader();
  c.CompleteAll(1);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 1, 5s));

  // Step 0 is not the commit point: nothing is held, and a pin without a hold writes nothing.
  auto held = c.hold(0).Hold("job", 0, {"n0", "n1"}, 60s);
  REQUIRE(held.ok());
  CHECK_FALSE(held->has_value());
  REQUIRE(c.hold(1).Pinned("job", 1).ok());
  c.CompleteAll(2);
  for (int n = 0; n < 2; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 5s));
  CHECK(c.hold(leader).stats().held_checks == 0);
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  auto pin = (*client)->Get(coord::PersistHold::PinKey("job", "n1"));
  REQUIRE(pin.ok());
  CHECK_FALSE(pin->has_value());
  // A job with nothing committed has nothing to hold.
  CHECK(c.hold(0).Hold("other", std::nullopt, {"n0"}, 60s).status().code() ==
        StatusCode::kNotFound);
}
