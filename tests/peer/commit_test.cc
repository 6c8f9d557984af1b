// Global commit across three nodes with ranks spread over them.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "peer_fixture.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {
const JobLayout kLayout{/*dp=*/2, /*tp=*/2, /*pp=*/1, /*zero=*/0};
store::RankKey Rank(int tp, int dp) { return {"job", 0, tp, dp}; }
}  // namespace

TEST_CASE("a step commits on every node only after every rank completed it", "[peer]") {
  std::vector<std::unique_ptr<TempDir>> dirs;
  for (int i = 0; i < 3; ++i) dirs.push_back(std::make_unique<TempDir>("reft-peer"));
  std::vector<std::unique_ptr<TestNode>> nodes;
  nodes.push_back(std::make_unique<TestNode>("c0", dirs[0]->path(), std::vector<std::string>{}));
  for (int i = 1; i < 3; ++i) {
    nodes.push_back(std::make_unique<TestNode>("c" + std::to_string(i), dirs[i]->path(),
                                               std::vector<std::string>{nodes[0]->address}));
  }
  REQUIRE(peer::test::Eventually([&] {
    for (auto& n : nodes) if (n->peer->membership().LiveMembers().size() != 2) return false;
    return true;
  }, 3s));
  // Ranks: node 0 holds (tp0,dp0) and (tp1,dp0); node 1 holds (tp0,dp1); node 2 holds (tp1,dp1).
  std::vector<std::pair<int, store::RankKey>> placement = {
      {0, Rank(0, 0)}, {0, Rank(1, 0)}, {1, Rank(0, 1)}, {2, Rank(1, 1)}};
  for (auto& [n, r] : placement) {
    REQUIRE(nodes[n]->peer->coordinator()->Join(r, kLayout).ok());
  }
  auto complete = [&](size_t i, int64_t step) {
    auto& [n, r] = placement[i];
    WriteSlot(nodes[n]->store.get(), r, step, RandomBytes(10000, TestSeed(1) + step + i));
    REQUIRE(nodes[n]->peer->coordinator()->Complete(r, step, nodes[n]->peer->coordinator()->RestoreEpoch(r.job)).ok());
  };

  for (size_t i = 0; i < placement.size(); ++i) complete(i, 1);
  for (auto& n : nodes) REQUIRE(n->peer->coordinator()->WaitCommitted("job", 1, 3s));
  for (auto& [n, r] : placement) CHECK(nodes[n]->store->NewestCommitted(r) == 1);

  // A waiter on node 2 blocks for step 2.
  auto waiter = std::async(std::launch::async, [&] {
    return nodes[2]->peer->coordinator()->WaitCommitted("job", 2, 5s);
  });
  // Three of four ranks complete step 2: nothing commits, step 1 stays intact everywhere.
  for (size_t i = 0; i < 3; ++i) complete(i, 2);
  for (auto& n : nodes) CHECK_FALSE(n->peer->coordinator()->WaitCommitted("job", 2, 600ms));
  for (auto& [n, r] : placement) {
    CHECK(nodes[n]->store->NewestCommitted(r) == 1);
    CHECK(nodes[n]->store->Get(r, 1).ok());
  }
  CHECK(waiter.wait_for(0ms) == std::future_status::timeout);

  // The last rank completes: every node commits 2 and the old slots are released.
  complete(3, 2);
  CHECK(waiter.get());
  for (auto& n : nodes) REQUIRE(n->peer->coordinator()->WaitCommitted("job", 2, 3s));
  for (auto& [n, r] : placement) {
    CHECK(peer::test::Eventually([&] { return nodes[n]->store->NewestCommitted(r) == 2; }, 2s));
    CHECK_FALSE(nodes[n]->store->Get(r, 1).ok());
  }
}

TEST_CASE("a lost report is repaired by anti-entropy and a restarted node recovers", "[peer]") {
  TempDir d0("reft-peer"), d1("reft-peer");
  auto n0 = std::make_unique<TestNode>("a0", d0.path(), std::vector<std::string>{});
  auto n1 = std::make_unique<TestNode>("a1", d1.path(), std::vector<std::string>{n0->address});
  const JobLayout layout{2, 1, 1, 0};
  store::RankKey r0{"job", 0, 0, 0}, r1{"job", 0, 0, 1};
  REQUIRE(peer::test::Eventually([&] { return n0->peer->membership().LiveMembers().size() == 1 &&
                                  n1->peer->membership().LiveMembers().size() == 1; }, 3s));
  REQUIRE(n0->peer->coordinator()->Join(r0, layout).ok());
  REQUIRE(n1->peer->coordinator()->Join(r1, layout).ok());
  // Rank 1 completes step 5 while node 0 is down (its report is lost).
  const std::string d0path = d0.path();
  WriteSlot(n0->store.get(), r0, 5, RandomBytes(4096, 1));
  n0.reset();  // node 0 dies after sealing but before reporting completion
  WriteSlot(n1->store.get(), r1, 5, RandomBytes(4096, 2));
  REQUIRE(n1->peer->coordinator()->Complete(r1, 5, n1->peer->coordinator()->RestoreEpoch(r1.job)).ok());
  CHECK_FALSE(n1->peer->coordinator()->WaitCommitted("job", 5, 500ms));
  CHECK(n1->store->NewestCommitted(r1) == std::nullopt);
  // Node 0 restarts: its sealed slot re-enters the completion set from the store, the
  // exchange merges both sides, and both commit.
  n0 = std::make_unique<TestNode>("a0", d0path, std::vector<std::string>{n1->address});
  REQUIRE(n0->peer->coordinator()->Join(r0, layout).ok());
  CHECK(n1->peer->coordinator()->WaitCommitted("job", 5, 4s));
  CHECK(n0->peer->coordinator()->WaitCommitted("job", 5, 4s));
  CHECK(n0->store->NewestCommitted(r0) == 5);
  CHECK(n1->store->NewestCommitted(r1) == 5);
}

TEST_CASE("SyncNow makes a node that missed the commit learn it at once", "[peer]") {
  // Anti-entropy every minute: only the push on completion and SyncNow move commit state.
  auto slow = [](PeerOptions* o) { o->anti_entropy_interval = std::chrono::milliseconds(60000); };
  TempDir d0("reft-peer"), d1("reft-peer"), d2("reft-peer");
  TestNode a("s0", d0.path(), {}, 0, 64 << 10, 0, slow);
  TestNode b("s1", d1.path(), {a.address}, 0, 64 << 10, 0, slow);
  REQUIRE(peer::test::Eventually([&] { return a.peer->membership().LiveMembers().size() == 1 &&
                                  b.peer->membership().LiveMembers().size() == 1; }, 3s));
  const JobLayout layout{2, 1, 1, 0};
  store::RankKey r0{"job", 0, 0, 0}, r1{"job", 0, 0, 1};
  REQUIRE(a.peer->coordinator()->Join(r0, layout).ok());
  REQUIRE(b.peer->coordinator()->Join(r1, layout).ok());
  WriteSlot(a.store.get(), r0, 3, RandomBytes(4096, 1));
  WriteSlot(b.store.get(), r1, 3, RandomBytes(4096, 2));
  REQUIRE(a.peer->coordinator()->Complete(r0, 3, a.peer->coordinator()->RestoreEpoch(r0.job)).ok());
  REQUIRE(b.peer->coordinator()->Complete(r1, 3, b.peer->coordinator()->RestoreEpoch(r1.job)).ok());
  REQUIRE(a.peer->coordinator()->WaitCommitted("job", 3, 3s));
  REQUIRE(b.peer->coordinator()->WaitCommitted("job", 3, 3s));

  // A replacement node joins after the commit: nobody pushes the job to it for a minute.
  TestNode c("s2", d2.path(), {a.address}, 0, 64 << 10, 0, slow);
  REQUIRE(peer::test::Eventually([&] { return c.peer->membership().LiveMembers().size() == 2; }, 3s));
  // The event a push to the newcomer would follow: the others see s2 alive (they learn of it
  // by its probes and gossip). Until an exchange, s2 knows nothing of the job.
  REQUIRE(peer::test::Eventually([&] { return StateOf(a, "s2") == MemberState::kAlive &&
                                  StateOf(b, "s2") == MemberState::kAlive; }, 3s));
  CHECK(c.peer->coordinator()->NewestCommitted("job") == std::nullopt);
  Status s = c.peer->coordinator()->SyncNow("job", 1s);
  CHECK(s.ok());
  CHECK(c.peer->coordinator()->NewestCommitted("job") == 3);

  // A member that no longer answers is named, and SyncNow still returns within its bound.
  b.Kill();
  auto t0 = std::chrono::steady_clock::now();
  s = c.peer->coordinator()->SyncNow("job", 500ms);
  auto took = std::chrono::steady_clock::now() - t0;
  // (s1 is still a live member: detection takes at least the suspicion timeout.)
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_THAT(s.message(), Catch::Contains("s1"));
  CHECK(took < 1500ms);
  CHECK(c.peer->coordinator()->NewestCommitted("job") == 3);
}
