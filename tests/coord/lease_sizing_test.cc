// Lease TTLs that follow the cluster's size: the rule, and nodes moving to a longer (or shorter)
// lease against a real etcd without anything they registered disappearing.

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <set>

#include "etcd_fixture.h"
#include "peer_fixture.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/coord/etcd_node_directory.h"
#include "keys.h"
#include "reft/coord/lease_sizing.h"

using namespace reft;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<EtcdClient> Connect(const EtcdCluster& etcd) {
  EtcdOptions o;
  o.endpoints = etcd.endpoints();
  o.request_timeout = 1000ms;
  auto c = EtcdClient::Create(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

// Leases sized for tests: 2 renewals/s for the whole cluster (a lone node: 2 s, 6 nodes: 9 s),
// and no sizing thread: the tests call SizeLease themselves.
LeaseSizing TestSizing() {
  LeaseSizing s;
  s.floor = 1s;
  s.renewals_per_s = 2;
  s.check_every = std::chrono::hours(1);
  return s;
}

// `n` more registered nodes, kept alive by a client of their own (other daemons).
struct OtherNodes {
  OtherNodes(const EtcdCluster& etcd, int n) : client(Connect(etcd)) {
    auto l = client->GrantLease(5s);
    REQUIRE(l.ok());
    lease = *l;
    for (int i = 0; i < n; ++i) {
      REQUIRE(client->Put(keys::Node("other" + std::to_string(i)), "{}", lease).ok());
    }
  }
  void Leave() { REQUIRE(client->RevokeLease(lease).ok()); }
  std::unique_ptr<EtcdClient> client;
  int64_t lease = 0;
};

// Every node key deleted from now on.
struct Departures {
  explicit Departures(const EtcdCluster& etcd) : client(Connect(etcd)) {
    auto rev = client->Put("/probe-rev", "");
    REQUIRE(rev.ok());
    REQUIRE(client
                ->Watch(keys::NodesPrefix(), true, *rev + 1,
                        [this](const WatchUpdate& u) {
                          std::lock_guard<std::mutex> lock(mu);
                          for (const auto& e : u.events) {
                            if (e.type == WatchEvent::Type::kDelete) gone.insert(e.kv.key);
                          }
                        })
                .ok());
  }
  bool Saw(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    return gone.count(key) != 0;
  }
  std::unique_ptr<EtcdClient> client;
  std::mutex mu;
  std::set<std::string> gone;
};

EtcdNodeDirectory* Directory(TestNode& node) {
  auto* dir = dynamic_cast<EtcdNodeDirectory*>(&node.peer->membership());
  REQUIRE(dir != nullptr);
  return dir;
}

// Waits until `lease` has lapsed: a probe key put under it is deleted by etcd.
void WaitLapsed(EtcdClient& client, int64_t lease, const std::string& probe) {
  if (!client.Put(probe, "", lease).ok()) return;  // lapsed already: etcd no longer knows it
  REQUIRE(reft::testing::Eventually([&] {
    auto kv = client.Get(probe);
    return kv.ok() && !kv->has_value();
  }, 20s));
}

}  // namespace

TEST_CASE("lease sizing: the configured TTL until the renewals pass the budget", "[coord]") {
  LeaseSizing s;
  s.floor = 5s;
  s.renewals_per_s = 1000;
  CHECK(SizedLeaseTtl(s, 1) == 5s);
  CHECK(SizedLeaseTtl(s, 1666) == 5s);   // 3 x 1,666 / 5 s = 999.6 renewals/s
  CHECK(SizedLeaseTtl(s, 1667) == 6s);   // past the budget at 5 s
  CHECK(SizedLeaseTtl(s, 4096) == 13s);  // 3 x 4,096 / 13 s = 945 renewals/s
  CHECK(SizedLeaseTtl(s, 16384) == 50s);
  s.renewals_per_s = 0;  // sizing off
  CHECK(SizedLeaseTtl(s, 16384) == 5s);
  // Moves only on a factor of two either way.
  CHECK_FALSE(ShouldMoveLease(5s, 5s));
  CHECK_FALSE(ShouldMoveLease(5s, 9s));
  CHECK(ShouldMoveLease(5s, 10s));
  CHECK_FALSE(ShouldMoveLease(13s, 7s));
  CHECK(ShouldMoveLease(13s, 6s));
}

TEST_CASE("lease sizing: a node moves to a longer lease as the cluster grows, and back, without "
          "ever being seen to leave", "[coord]") {
  EtcdCluster etcd(1);
  Departures departures(etcd);
  // Another node, listening for arrivals as a job's planner does: a move is not one.
  TempDir watcher_dir("reft-lease");
  TestNode watcher("watcher", watcher_dir.path(), {}, 0, 64 << 10, 0, nullptr,
                   EtcdControlPlane(etcd, TestSizing()));
  std::atomic<int> arrivals{0};
  watcher.peer->membership().AddArrivalListener([&](const std::string& id) {
    if (id == "n0") ++arrivals;
  });
  TempDir dir("reft-lease");
  TestNode node("n0", dir.path(), {}, 0, 64 << 10, 0, nullptr,
                EtcdControlPlane(etcd, TestSizing()));
  REQUIRE(reft::testing::Eventually([&] { return arrivals.load() == 1; }, 5s));
  EtcdNodeDirectory* d = Directory(node);
  CHECK(d->lease_ttl() == 3s);  // 3 x 2 nodes / 2 renewals/s
  CHECK_FALSE(d->SizeLease());  // nothing changed

  OtherNodes others(etcd, 4);  // 6 nodes: 9 s
  const int64_t first = d->lease();
  const uint64_t epoch = d->epoch();
  REQUIRE(d->SizeLease());
  CHECK(d->lease_ttl() == 9s);
  CHECK(d->lease() != first);
  CHECK(d->epoch() == epoch);  // the same identity: nobody fences it
  auto probe = Connect(etcd);
  auto key = probe->Get(keys::Node("n0"));
  REQUIRE(key.ok());
  REQUIRE(key->has_value());
  CHECK((*key)->lease == d->lease());
  // The old lease lapses by itself; the registration it held had moved.
  WaitLapsed(*probe, first, "/probe-first");
  CHECK(probe->Get(keys::Node("n0"))->has_value());
  CHECK(node.peer->membership().Liveness("n0") == peer::NodeLiveness::kAlive);

  others.Leave();  // two nodes again: back to 3 s
  const int64_t second = d->lease();
  REQUIRE(d->SizeLease());
  CHECK(d->lease_ttl() == 3s);
  WaitLapsed(*probe, second, "/probe-second");
  CHECK(probe->Get(keys::Node("n0"))->has_value());
  CHECK_FALSE(departures.Saw(keys::Node("n0")));
  CHECK(arrivals.load() == 1);  // its registration only
}

TEST_CASE("lease sizing: a moved node's joined ranks survive the old lease, the job's "
          "coordinator keeps its lease, and commits go on", "[coord]") {
  EtcdCluster etcd(1);
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
  for (int i = 0; i < 2; ++i) {
    dirs.push_back(std::make_unique<TempDir>("reft-lease"));
    nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                               std::vector<std::string>{}, 0, 64 << 10, 0,
                                               nullptr, EtcdControlPlane(etcd, TestSizing())));
  }
  const JobLayout layout{/*dp=*/2, /*tp=*/1, /*pp=*/1, /*zero=*/0};
  const store::RankKey ranks[2] = {{"job", 0, 0, 0}, {"job", 0, 0, 1}};
  auto co = [&](int n) { return nodes[n]->peer->coordinator(); };
  REQUIRE(co(0)->Join(ranks[0], layout).ok());
  REQUIRE(reft::testing::Eventually([&] { return co(0)->LeadsJob("job"); }, 5s));
  REQUIRE(co(1)->Join(ranks[1], layout).ok());
  auto commit = [&](int64_t step) {
    for (int n = 0; n < 2; ++n) {
      WriteSlot(nodes[n]->store.get(), ranks[n], step, RandomBytes(4096, step * 2 + n));
      REQUIRE(co(n)->Complete(ranks[n], step, co(n)->RestoreEpoch("job")).ok());
    }
    for (int n = 0; n < 2; ++n) REQUIRE(co(n)->WaitCommitted("job", step, 10s));
  };
  commit(1);

  OtherNodes others(etcd, 4);  // 6 nodes: 9 s (n1 started at 3 s, n0 at 2 s)
  auto probe = Connect(etcd);
  const int64_t leader_lease = Directory(*nodes[0])->lease();
  const int64_t old = Directory(*nodes[1])->lease();
  CHECK_FALSE(Directory(*nodes[0])->SizeLease());  // coordinates the job: keeps its lease
  CHECK(Directory(*nodes[0])->lease() == leader_lease);
  REQUIRE(Directory(*nodes[1])->SizeLease());
  const int64_t moved = Directory(*nodes[1])->lease();
  // The worker puts the joined key under the new lease before the old one lapses.
  REQUIRE(reft::testing::Eventually([&] {
    auto kv = probe->Get(keys::Joined(ranks[1]));
    return kv.ok() && kv->has_value() && (*kv)->lease == moved;
  }, 5s));
  WaitLapsed(*probe, old, "/probe-old");
  CHECK(probe->Get(keys::Joined(ranks[1]))->has_value());
  CHECK(co(0)->LeadsJob("job"));
  commit(2);
}
