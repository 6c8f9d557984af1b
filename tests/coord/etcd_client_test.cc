// The etcd v3 client against real etcd processes: reads, writes, compare-and-swap, leases,
// watches, and fail-over when a member of a three-member cluster dies.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "etcd_fixture.h"
#include "reft/coord/etcd_client.h"

using namespace reft;
using namespace reft::coord;
using reft::testing::EtcdCluster;
using reft::testing::Eventually;

namespace {

std::unique_ptr<EtcdClient> Connect(const EtcdCluster& etcd) {
  EtcdOptions o;
  o.endpoints = etcd.endpoints();
  o.request_timeout = std::chrono::milliseconds(1000);
  auto c = EtcdClient::Create(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("etcd client: put, get, prefix, count and delete", "[coord]") {
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  auto missing = c->Get("/t/a");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->has_value());
  auto rev1 = c->Put("/t/a", "1");
  REQUIRE(rev1.ok());
  auto rev2 = c->Put("/t/b", "2");
  REQUIRE(rev2.ok());
  CHECK(*rev2 > *rev1);
  REQUIRE(c->Put("/u/c", "3").ok());
  auto a = c->Get("/t/a");
  REQUIRE(a.ok());
  REQUIRE(a->has_value());
  CHECK((*a)->value == "1");
  CHECK((*a)->mod_revision == *rev1);
  CHECK((*a)->create_revision == *rev1);
  auto all = c->GetPrefix("/t/");
  REQUIRE(all.ok());
  REQUIRE(all->kvs.size() == 2);
  CHECK(all->kvs[0].key == "/t/a");
  CHECK(all->kvs[1].key == "/t/b");
  CHECK(all->revision >= *rev2);
  auto n = c->CountPrefix("/t/");
  REQUIRE(n.ok());
  CHECK(*n == 2);
  auto deleted = c->DeletePrefix("/t/");
  REQUIRE(deleted.ok());
  CHECK(*deleted == 2);
  CHECK(*c->CountPrefix("/t/") == 0);
  CHECK(*c->CountPrefix("/u/") == 1);
}

TEST_CASE("etcd client: a compare-and-swap lets exactly one of many writers win", "[coord]") {
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  REQUIRE(c->Put("/t/gen", "0").ok());
  auto gen = c->Get("/t/gen");
  REQUIRE(gen.ok());
  const int64_t seen = (*gen)->mod_revision;
  std::atomic<int> won{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i) {
    writers.emplace_back([&, i] {
      Txn t;
      t.IfModRevision("/t/gen", Compare::kEqual, seen).ThenPut("/t/gen", std::to_string(i + 1));
      t.ElseGet("/t/gen");
      auto r = c->Commit(t);
      REQUIRE(r.ok());
      if (r->succeeded) {
        ++won;
      } else {
        REQUIRE(r->gets.size() == 1);
        CHECK(r->gets[0].kvs.at(0).value != "0");  // the loser reads the winner's value
      }
    });
  }
  for (auto& w : writers) w.join();
  CHECK(won == 1);
  Txn create;
  create.IfCreateRevision("/t/new", Compare::kEqual, 0).ThenPut("/t/new", "x");
  CHECK(c->Commit(create)->succeeded);
  CHECK_FALSE(c->Commit(create)->succeeded);  // exists now
}

TEST_CASE("etcd client: a lease keeps its keys while its owner lives", "[coord]") {
  EtcdCluster etcd(1);
  auto watcher = Connect(etcd);
  auto owner = Connect(etcd);
  auto lease = owner->GrantLease(std::chrono::seconds(1));
  REQUIRE(lease.ok());
  auto rev = owner->Put("/nodes/n1", "alive", *lease);
  REQUIRE(rev.ok());
  std::atomic<bool> deleted{false};
  REQUIRE(watcher
              ->Watch("/nodes/", true, *rev + 1,
                      [&](const WatchUpdate& u) {
                        for (const auto& e : u.events) {
                          if (e.type == WatchEvent::Type::kDelete && e.kv.key == "/nodes/n1") {
                            deleted = true;
                          }
                        }
                      })
              .ok());
  // Kept alive well past its TTL.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK_FALSE(deleted);
  CHECK((*watcher->Get("/nodes/n1")).has_value());
  // The owner goes away without revoking (like a killed reftd): etcd expires the lease.
  const auto t0 = std::chrono::steady_clock::now();
  owner.reset();
  REQUIRE(Eventually([&] { return deleted.load(); }, std::chrono::seconds(10)));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(secs < 4.0);
  CHECK_FALSE((*watcher->Get("/nodes/n1")).has_value());
}

TEST_CASE("etcd client: revoking a lease deletes its keys and reports it lost", "[coord]") {
  EtcdCluster etcd(1);
  auto a = Connect(etcd);
  std::atomic<int64_t> lost{0};
  auto lease = a->GrantLease(std::chrono::seconds(2), [&](int64_t id) { lost = id; });
  REQUIRE(lease.ok());
  REQUIRE(a->Put("/k", "v", *lease).ok());
  // Another client revokes it (an operator, or etcd expiring it during a pause).
  auto b = Connect(etcd);
  REQUIRE(b->RevokeLease(*lease).ok());
  CHECK_FALSE((*b->Get("/k")).has_value());
  REQUIRE(Eventually([&] { return lost.load() == *lease; }, std::chrono::seconds(5)));
}

TEST_CASE("etcd client: a slow lease-lost callback does not let the client's other leases expire",
          "[coord]") {
  // A client holding many leases (the scale bench pools 256 nodes' leases in one) loses one;
  // its callback registers again, which takes seconds while etcd is overloaded. Run on the
  // keep-alive thread, it stopped every other lease's renewal for that long: one expiry became
  // a cascade.
  EtcdCluster etcd(1);
  auto a = Connect(etcd);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, in_callback = false;
  auto lost = a->GrantLease(std::chrono::seconds(5), [&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    in_callback = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  REQUIRE(lost.ok());
  auto kept = a->GrantLease(std::chrono::seconds(1));
  REQUIRE(kept.ok());
  REQUIRE(a->Put("/kept", "v", *kept).ok());
  auto b = Connect(etcd);
  REQUIRE(b->RevokeLease(*lost).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return in_callback; }));
  }
  // The callback holds on for three TTLs of the other lease: it is renewed all along.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  CHECK((*b->Get("/kept")).has_value());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
}

TEST_CASE("etcd client: calls on other threads never hold back the lease renewals", "[coord]") {
  // Renewals run on the keep-alive thread and a stream of their own: four threads writing and
  // reading 256 KiB values through the same client for three TTLs must not let the lease lapse.
  EtcdCluster etcd(1);
  std::atomic<int> lost{0};  // before the client, whose threads may call back until it goes
  auto a = Connect(etcd);
  auto lease = a->GrantLease(std::chrono::seconds(1), [&](int64_t) { ++lost; });
  REQUIRE(lease.ok());
  REQUIRE(a->Put("/alive", "v", *lease).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0};
  const std::string big(256 << 10, 'x');
  std::vector<std::thread> busy;
  for (int t = 0; t < 4; ++t) {
    busy.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string key = "/busy/" + std::to_string(t) + "/" + std::to_string(i % 8);
        if (a->Put(key, big).ok() && a->GetPrefix("/busy/" + std::to_string(t) + "/").ok()) ++calls;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  stop = true;
  for (auto& t : busy) t.join();
  CHECK(calls.load() > 20);  // the client was busy all along
  CHECK(lost.load() == 0);
  CHECK((*a->Get("/alive")).has_value());
}

TEST_CASE("etcd client: observers hear every answer, its latency and etcd's raft term", "[coord]") {
  EtcdCluster etcd(1);
  // Declared before the client: its keep-alive thread calls the observer until it is destroyed.
  std::mutex mu;
  std::vector<EtcdAnswer> answers;
  auto a = Connect(etcd);  // calls time out after 1 s
  a->AddAnswerObserver([&](const EtcdAnswer& x) {
    std::lock_guard<std::mutex> lock(mu);
    answers.push_back(x);
  });
  auto seen = [&](auto pred) {
    std::lock_guard<std::mutex> lock(mu);
    return std::any_of(answers.begin(), answers.end(), pred);
  };
  auto lease = a->GrantLease(std::chrono::seconds(3));
  REQUIRE(lease.ok());
  REQUIRE(a->Put("/k", "v").ok());
  // A keep-alive round carries the raft term.
  REQUIRE(Eventually([&] { return seen([](const EtcdAnswer& x) { return x.answered && x.raft_term > 0; }); },
                     std::chrono::seconds(5)));
  // A stopped etcd: a call is heard as unanswered, after its deadline.
  etcd.Pause(0);
  CHECK_FALSE(a->Get("/k").ok());
  etcd.Resume(0);
  CHECK(seen([](const EtcdAnswer& x) {
    return !x.answered && x.latency >= std::chrono::milliseconds(900);
  }));
}

TEST_CASE("etcd client: a watch delivers every change in order, from a past revision", "[coord]") {
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  auto first = c->Put("/w/x", "0");
  REQUIRE(first.ok());
  for (int i = 1; i < 5; ++i) REQUIRE(c->Put("/w/x", std::to_string(i)).ok());
  std::mutex mu;
  std::vector<std::string> seen;
  auto h = c->Watch("/w/x", false, *first, [&](const WatchUpdate& u) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : u.events) seen.push_back(e.kv.value);
  });
  REQUIRE(h.ok());
  for (int i = 5; i < 10; ++i) REQUIRE(c->Put("/w/x", std::to_string(i)).ok());
  REQUIRE(c->Put("/w/other", "ignored").ok());
  REQUIRE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size() >= 10;
  }));
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(seen.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(seen[i] == std::to_string(i));
}

TEST_CASE("etcd client: a cancelled watch stops, others keep going", "[coord]") {
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  auto rev = c->Put("/c/init", "");
  REQUIRE(rev.ok());
  std::atomic<int> a{0}, b{0};
  auto ha = c->Watch("/c/a", false, *rev + 1, [&](const WatchUpdate& u) { a += u.events.size(); });
  auto hb = c->Watch("/c/b", false, *rev + 1, [&](const WatchUpdate& u) { b += u.events.size(); });
  REQUIRE(ha.ok());
  REQUIRE(hb.ok());
  REQUIRE(c->Put("/c/a", "1").ok());
  REQUIRE(c->Put("/c/b", "1").ok());
  REQUIRE(Eventually([&] { return a == 1 && b == 1; }));
  c->CancelWatch(*ha);
  REQUIRE(c->Put("/c/a", "2").ok());
  REQUIRE(c->Put("/c/b", "2").ok());
  REQUIRE(Eventually([&] { return b == 2; }));
  CHECK(a == 1);
}

TEST_CASE("etcd client: watches join and leave the live stream, one request each", "[coord]") {
  // Adding or cancelling a watch must not rebuild the stream (which would send every other
  // watch's create again: quadratic in the watches a process holds).
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  auto rev = c->Put("/l/init", "");
  REQUIRE(rev.ok());
  constexpr int kWatches = 40;
  std::vector<std::atomic<int>> seen(kWatches);
  std::vector<int64_t> handles;
  auto first = c->Watch("/l/0", false, *rev + 1, [&](const WatchUpdate& u) { seen[0] += u.events.size(); });
  REQUIRE(first.ok());
  handles.push_back(*first);
  REQUIRE(c->Put("/l/0", "x").ok());
  REQUIRE(Eventually([&] { return seen[0] == 1; }));  // the stream is live
  const EtcdTraffic before = c->traffic();
  auto from = c->Put("/l/start", "");
  REQUIRE(from.ok());
  for (int i = 1; i < kWatches; ++i) {
    auto h = c->Watch("/l/" + std::to_string(i), false, *from,
                      [&, i](const WatchUpdate& u) { seen[i] += u.events.size(); });
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  for (int i = 0; i < kWatches; ++i) REQUIRE(c->Put("/l/" + std::to_string(i), "y").ok());
  REQUIRE(Eventually([&] {
    for (int i = 0; i < kWatches; ++i) {
      if (seen[i] < (i == 0 ? 2 : 1)) return false;
    }
    return true;
  }));
  // 1 put + (kWatches - 1) creates + kWatches puts: no watch was created twice.
  CHECK(c->traffic().requests - before.requests == 1 + (kWatches - 1) + kWatches);
  // Cancelling one sends one cancel; the others keep their events.
  const EtcdTraffic mid = c->traffic();
  c->CancelWatch(handles[7]);
  CHECK(c->traffic().requests - mid.requests == 1);
  REQUIRE(c->Put("/l/7", "z").ok());
  REQUIRE(c->Put("/l/8", "z").ok());
  REQUIRE(Eventually([&] { return seen[8] == 2; }));
  CHECK(seen[7] == 1);
}

TEST_CASE("etcd client: a puts-only watch gets no delete events", "[coord]") {
  EtcdCluster etcd(1);
  auto c = Connect(etcd);
  auto rev = c->Put("/p/init", "");
  REQUIRE(rev.ok());
  std::atomic<int> puts{0}, deletes{0};
  auto h = c->Watch("/p/", true, *rev + 1, [&](const WatchUpdate& u) {
    for (const auto& e : u.events) (e.type == WatchEvent::Type::kPut ? puts : deletes)++;
  }, WatchEvents::kPutsOnly);
  REQUIRE(h.ok());
  REQUIRE(c->Put("/p/a", "1").ok());
  REQUIRE(c->DeletePrefix("/p/").ok());
  REQUIRE(c->Put("/p/b", "1").ok());
  REQUIRE(Eventually([&] { return puts == 2; }));
  CHECK(deletes == 0);
}

TEST_CASE("etcd client: calls, leases and watches survive the loss of one of three members",
          "[coord]") {
  EtcdCluster etcd(3);
  auto c = Connect(etcd);
  auto lease = c->GrantLease(std::chrono::seconds(1));
  REQUIRE(lease.ok());
  auto rev = c->Put("/f/alive", "1", *lease);
  REQUIRE(rev.ok());
  std::atomic<int> events{0};
  std::atomic<bool> alive_deleted{false};
  REQUIRE(c->Watch("/f/", true, *rev + 1,
                   [&](const WatchUpdate& u) {
                     for (const auto& e : u.events) {
                       if (e.kv.key == "/f/alive" && e.type == WatchEvent::Type::kDelete) {
                         alive_deleted = true;
                       }
                       if (e.kv.key == "/f/n") ++events;
                     }
                   })
              .ok());
  REQUIRE(c->Put("/f/n", "0").ok());
  REQUIRE(Eventually([&] { return events == 1; }));
  // Kill the member the client talks to now (the first one it used), then the others serve.
  etcd.Kill(0);
  for (int i = 1; i <= 5; ++i) REQUIRE(c->Put("/f/n", std::to_string(i)).ok());
  REQUIRE(Eventually([&] { return events == 6; }, std::chrono::seconds(10)));
  // The lease stayed alive through the fail-over (renewed by the other members).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CHECK_FALSE(alive_deleted);
  CHECK((*c->Get("/f/alive")).has_value());
  etcd.Restart(0);
  REQUIRE(c->Put("/f/n", "6").ok());
  REQUIRE(Eventually([&] { return events == 7; }, std::chrono::seconds(10)));
}

TEST_CASE("etcd client: with no quorum calls fail within their deadline, then recover",
          "[coord]") {
  EtcdCluster etcd(3);
  auto c = Connect(etcd);
  REQUIRE(c->Put("/q/x", "1").ok());
  etcd.Kill(1);
  etcd.Kill(2);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->Put("/q/x", "2");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(r.ok());
  CHECK((r.status().code() == StatusCode::kTimeout ||
         r.status().code() == StatusCode::kUnavailable));
  CHECK(secs < 3 * 1.0 + 1.0);  // at most one request timeout per endpoint
  etcd.Restart(1);
  etcd.Restart(2);
  REQUIRE(Eventually([&] { return c->Put("/q/x", "3").ok(); }, std::chrono::seconds(10)));
  CHECK((*c->Get("/q/x"))->value == "3");
}
