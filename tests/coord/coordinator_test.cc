// Job-wide agreement in etcd with in-process nodes (real stores, real gRPC, real etcd):
// commits, the coordinator's failover, generations, restore decisions and etcd outages.

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "etcd_fixture.h"
#include "peer_fixture.h"
#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_control_plane.h"
#include "keys.h"
#include "reft/coord/records.h"
#include "reft/test_point.h"
#include "test_point_pause.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

const JobLayout kLayout{/*dp=*/2, /*tp=*/2, /*pp=*/1, /*zero=*/0};
store::RankKey Rank(int tp, int dp) { return {"job", 0, tp, dp}; }

// Three nodes; ranks: node 0 holds (tp0,dp0) and (tp1,dp0), node 1 (tp0,dp1), node 2 (tp1,dp1).
struct Cluster {
  explicit Cluster(const EtcdCluster& etcd) {
    for (int i = 0; i < 3; ++i) {
      dirs.push_back(std::make_unique<TempDir>("reft-coord"));
      nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                                 std::vector<std::string>{}, 0, 64 << 10, 0,
                                                 nullptr, EtcdControlPlane(etcd)));
    }
  }
  void JoinAll() {
    for (auto& [n, r] : placement) REQUIRE(co(n)->Join(r, kLayout).ok());
  }
  void Complete(size_t i, int64_t step) {
    auto& [n, r] = placement[i];
    WriteSlot(nodes[n]->store.get(), r, step, RandomBytes(4096, 7 + step + i));
    REQUIRE(co(n)->Complete(r, step, co(n)->RestoreEpoch(r.job)).ok());
  }
  // Every rank completes `step`; it is committed on every node.
  void CommitAll(int64_t step) {
    for (size_t i = 0; i < placement.size(); ++i) Complete(i, step);
    for (int n = 0; n < 3; ++n) REQUIRE(co(n)->WaitCommitted("job", step, 5s));
  }
  JobCoordinator* co(int n) { return nodes[n]->peer->coordinator(); }
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
  std::vector<std::pair<int, store::RankKey>> placement = {
      {0, Rank(0, 0)}, {0, Rank(1, 0)}, {1, Rank(0, 1)}, {2, Rank(1, 1)}};
};

int Leaders(Cluster& c) {
  int n = 0;
  for (int i = 0; i < 3; ++i) n += c.co(i)->LeadsJob("job");
  return n;
}

// The node that coordinates the job, once exactly one does.
int Leader(Cluster& c) {
  REQUIRE(reft::testing::Eventually([&] { return Leaders(c) == 1; }, 5s));
  int leader = 0;
  while (!c.co(leader)->LeadsJob("job")) ++leader;
  return leader;
}

// Joins every rank and commits step 1; returns the node that coordinates the job.
int StartJob(Cluster& c) {
  c.JoinAll();
  const int leader = Leader(c);
  c.CommitAll(1);
  return leader;
}

// Kills the coordinator's node; returns the others once one of them coordinates.
std::vector<int> KillLeader(Cluster& c, int leader) {
  c.nodes[leader]->Kill();
  std::vector<int> rest;
  for (int n = 0; n < 3; ++n) {
    if (n != leader) rest.push_back(n);
  }
  REQUIRE(reft::testing::Eventually([&] {
    int l = 0;
    for (int n : rest) l += c.co(n)->LeadsJob("job");
    return l == 1;
  }, 5s));
  return rest;
}

// A reconfiguration decided by node `planner` in generation 0 on the loss of `basis`.
PublishedPlan ReconfigurePlan(int planner, int64_t step, const std::string& basis, const std::string& state) {
  PublishedPlan plan;
  plan.generation = 0;
  plan.step = step;
  plan.basis = basis;
  plan.planner = "n" + std::to_string(planner);
  plan.state = state;
  plan.plan_json = R"({"decision":{"policy":"reconfigure"}})";
  return plan;
}

coord::CompletionTraffic Traffic(Cluster& c, int n) {
  auto* etcd = dynamic_cast<coord::EtcdJobCoordinator*>(c.co(n));
  REQUIRE(etcd != nullptr);
  return etcd->completion_traffic();
}

// The nodes whose completion records are put in etcd, from `rev` on (one watch, in order).
struct CompletionWrites {
  explicit CompletionWrites(const EtcdCluster& etcd) {
    coord::EtcdOptions eo;
    eo.endpoints = etcd.endpoints();
    auto c = coord::EtcdClient::Create(eo);
    REQUIRE(c.ok());
    client = std::move(*c);
    auto rev = client->Put("/probe", "");
    REQUIRE(rev.ok());
    REQUIRE(client->Watch(coord::keys::CompletionsPrefix("job"), true, *rev + 1,
                          [this](const coord::WatchUpdate& u) {
                            std::lock_guard<std::mutex> lock(mu);
                            for (const auto& e : u.events) {
                              if (e.type != coord::WatchEvent::Type::kPut) continue;
                              nodes.insert(e.kv.key.substr(e.kv.key.rfind('/') + 1));
                              ++puts;
                            }
                          }).ok());
  }
  std::set<std::string> writers() {
    std::lock_guard<std::mutex> lock(mu);
    return nodes;
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu);
    return puts;
  }
  std::unique_ptr<coord::EtcdClient> client;
  std::mutex mu;
  std::set<std::string> nodes;
  int puts = 0;
};

// Holds a node's worker at EtcdJobCoordinator::kReportBuilt (its completion reports of "job"
// built, not sent) until Release() — or until the test ends, so that a failed REQUIRE does not
// leave the worker blocked while the node stops. Only this node's worker: the test point is
// reached by every coordinator of the process.
std::unique_ptr<reft::test_point::Pause> HoldReports(JobCoordinator* co) {
  auto* etcd = dynamic_cast<coord::EtcdJobCoordinator*>(co);
  REQUIRE(etcd != nullptr);
  return std::make_unique<reft::test_point::Pause>(coord::EtcdJobCoordinator::kReportBuilt, "job",
                                                   etcd);
}

}  // namespace

TEST_CASE("etcd coordination: a step commits everywhere only once every rank completed it",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  REQUIRE(reft::testing::Eventually([&] { return Leaders(c) == 1; }, 5s));
  c.CommitAll(1);
  for (auto& [n, r] : c.placement) CHECK(c.nodes[n]->store->NewestCommitted(r) == 1);
  // The locations of every rank's slot are recorded with the commit.
  for (auto& [n, r] : c.placement) CHECK(c.co(1)->SlotLocation(r) == "n" + std::to_string(n));

  // Three of four complete step 2: nothing commits; step 1 stays intact.
  for (size_t i = 0; i < 3; ++i) c.Complete(i, 2);
  for (int n = 0; n < 3; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 300ms));
  for (auto& [n, r] : c.placement) CHECK(c.nodes[n]->store->Get(r, 1).ok());
  c.Complete(3, 2);
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 5s));
  for (auto& [n, r] : c.placement) {
    CHECK(c.nodes[n]->store->NewestCommitted(r) == 2);
    CHECK_FALSE(c.nodes[n]->store->Get(r, 1).ok());  // the older slot is freed after the commit
  }
  // Completions up to the commit are gone from etcd (O(1) keys per node per pending step).
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  CHECK(*(*client)->CountPrefix(coord::keys::CompletionsPrefix("job")) == 0);
}

TEST_CASE("etcd coordination: every node hears each commit of the job once, in order, asked or "
          "not",
          "[coord]") {
  // Declared before the cluster: its nodes call the listeners until they are gone.
  reft::Mutex mu;
  std::map<int, std::vector<int64_t>> heard;
  std::set<std::string> jobs_heard;
  EtcdCluster etcd(1);
  Cluster c(etcd);
  for (int n = 0; n < 3; ++n) {
    auto* etcd_co = dynamic_cast<coord::EtcdJobCoordinator*>(c.co(n));
    REQUIRE(etcd_co != nullptr);
    etcd_co->AddCommitListener([&mu, &heard, &jobs_heard, n](const std::string& job, int64_t step) {
      reft::MutexLock lock(mu);  // on the node's watch thread: no Catch assertion here
      jobs_heard.insert(job);
      heard[n].push_back(step);
    });
  }
  c.JoinAll();
  // Every rank completes steps 1..4 without asking whether anything committed; only node 0 is
  // asked, for the last step. Nodes 1 and 2 hear each commit from their watch all the same.
  for (int64_t step = 1; step <= 4; ++step)
    for (size_t i = 0; i < c.placement.size(); ++i) c.Complete(i, step);
  REQUIRE(c.co(0)->WaitCommitted("job", 4, 10s));
  // A commit may cover two steps (the next one's completions landed first), and a node that
  // re-reads the job applies only the newest commit: what every node must hear is commits in
  // order, none twice, up to 4.
  REQUIRE(reft::testing::Eventually(
      [&] {
        reft::MutexLock lock(mu);
        for (int n = 0; n < 3; ++n)
          if (heard[n].empty() || heard[n].back() != 4) return false;
        return true;
      },
      10s));
  reft::MutexLock lock(mu);
  CHECK(jobs_heard == std::set<std::string>{"job"});
  for (int n = 0; n < 3; ++n) {
    INFO("node " << n);
    CHECK(std::is_sorted(heard[n].begin(), heard[n].end()));
    CHECK(std::adjacent_find(heard[n].begin(), heard[n].end()) == heard[n].end());
    CHECK(heard[n].front() >= 1);
  }
}

TEST_CASE("etcd coordination: the coordinator's node leaves and another one takes over",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  const int leader = StartJob(c);
  // The leader's ranks complete step 2 (written to etcd), then its node goes away (its lease is
  // revoked: the coordinator key disappears at once).
  for (size_t i = 0; i < 4; ++i) {
    if (c.placement[i].first == leader) c.Complete(i, 2);
  }
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  const std::string key = coord::keys::Completion("job", 2, "n" + std::to_string(leader));
  REQUIRE(reft::testing::Eventually([&] { return (*(*client)->Get(key)).has_value(); }, 5s));
  const std::vector<int> rest = KillLeader(c, leader);
  // The survivors complete step 2 too: the new coordinator commits it from all four completions.
  for (size_t i = 0; i < 4; ++i) {
    if (c.placement[i].first != leader) c.Complete(i, 2);
  }
  // A bound, not a pause: it returns at the commit (generous for a loaded CI machine).
  for (int n : rest) REQUIRE(c.co(n)->WaitCommitted("job", 2, 15s));
}

TEST_CASE("etcd coordination: completions go to the coordinator, not through etcd", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  // Step 1 commits first: a node that has not yet seen the coordinator key when its ranks
  // complete the job's first step writes its completion to etcd (the fallback the coordinator
  // reads too); once step 1 committed on a node its watch has shown it the key (an earlier
  // revision), so the steps counted here all go to the coordinator.
  const int leader = StartJob(c);
  std::vector<coord::CompletionTraffic> before;
  for (int n = 0; n < 3; ++n) before.push_back(Traffic(c, n));
  CompletionWrites writes(etcd);
  for (int64_t step = 2; step <= 4; ++step) c.CommitAll(step);
  // etcd holds the coordinator's own records only (they must outlive its node); every other
  // node's reach it as one report per step. (The watch delivers the three puts some time after
  // the commits they made.)
  REQUIRE(reft::testing::Eventually([&] { return writes.count() >= 3; }, 10s));
  CHECK(writes.writers() == std::set<std::string>{"n" + std::to_string(leader)});
  // A reporter counts its report when the coordinator's answer arrives, which can be after the
  // commit the report completed is visible everywhere (a loaded machine): wait for the answers.
  (void)reft::testing::Eventually([&] {
    for (int n = 0; n < 3; ++n)
      if (n != leader && Traffic(c, n).reported - before[n].reported < 3) return false;
    return true;
  }, 10s);
  for (int n = 0; n < 3; ++n) {
    auto t = Traffic(c, n);
    t.reported -= before[n].reported;
    t.report_failures -= before[n].report_failures;
    t.written -= before[n].written;
    t.received -= before[n].received;
    INFO("node " << n << ": reported " << t.reported << ", failed " << t.report_failures
                 << ", written " << t.written << ", received " << t.received);
    // A node with two ranks reports a step twice when its second rank lags the first by more
    // than the completion linger (a loaded machine): at least once per step.
    if (n == leader) {
      CHECK(t.received >= 6);  // two nodes, three steps
      CHECK(t.written >= 3);
    } else {
      CHECK(t.reported >= 3);
      CHECK(t.written == 0);
      CHECK(t.report_failures == 0);
    }
  }
  // The slot locations came with the reports.
  for (auto& [n, r] : c.placement) CHECK(c.co(leader)->SlotLocation(r) == "n" + std::to_string(n));
}

TEST_CASE("etcd coordination: a coordinator its peers cannot reach gets completions through etcd",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  const int leader = StartJob(c);
  // The coordinator's Peer endpoint goes away (a broken link between nodes); its etcd lease,
  // and so its coordinator key, stay.
  c.nodes[leader]->server->Shutdown(std::chrono::system_clock::now());
  CompletionWrites writes(etcd);
  c.CommitAll(2);
  CHECK(reft::testing::Eventually([&] { return writes.writers().size() == 3; }, 10s));
  // A writer counts its write when etcd's answer arrives, which can be after the watch above
  // has seen the key (a loaded machine): wait for the counts.
  (void)reft::testing::Eventually([&] {
    for (int n = 0; n < 3; ++n)
      if (n != leader && Traffic(c, n).written < 1) return false;
    return true;
  }, 10s);
  for (int n = 0; n < 3; ++n) {
    if (n == leader) continue;
    const auto t = Traffic(c, n);
    CHECK(t.report_failures >= 1);
    CHECK(t.written >= 1);
  }
  CHECK(c.co(leader)->LeadsJob("job"));
}

TEST_CASE("etcd coordination: reports a dead coordinator held are sent to the next one",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  const int leader = StartJob(c);
  std::vector<size_t> others;  // ranks on the other nodes
  for (size_t i = 0; i < c.placement.size(); ++i) {
    if (c.placement[i].first == leader) c.Complete(i, 2);  // through etcd
    else others.push_back(i);
  }
  // One other rank completes step 2: its report lives only in the coordinator's memory.
  const int reporter = c.placement[others[0]].first;
  const uint64_t before = Traffic(c, reporter).reported;
  c.Complete(others[0], 2);
  REQUIRE(reft::testing::Eventually([&] { return Traffic(c, reporter).reported > before; }, 5s));
  const std::vector<int> rest = KillLeader(c, leader);
  // The last rank completes: step 2 commits only if the new coordinator has the earlier report.
  for (size_t k = 1; k < others.size(); ++k) c.Complete(others[k], 2);
  for (int n : rest) REQUIRE(c.co(n)->WaitCommitted("job", 2, 15s));
}

TEST_CASE("etcd coordination: the coordinator refuses malformed and misdirected reports",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  const int leader = Leader(c);
  const int other = (leader + 1) % 3;
  const int third = (leader + 2) % 3;
  PeerClient& client = c.nodes[other]->peer->client();
  const int64_t epoch = c.co(other)->RestoreEpoch("job");
  // Stamped like a node's own reports: with the layout record the ranks joined under.
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto etcd_client = coord::EtcdClient::Create(eo);
  REQUIRE(etcd_client.ok());
  auto layout = (*etcd_client)->Get(coord::keys::Layout("job"));
  REQUIRE(layout.ok());
  REQUIRE(layout->has_value());
  const int64_t layout_rev = (*layout)->mod_revision;
  auto report = [&](std::vector<store::RankKey> ranks, int64_t step = 1) {
    return StepCompletionReport{"job", step, "", 0, epoch, std::move(ranks), layout_rev};
  };
  const std::string at_leader = c.nodes[leader]->address;
  // Not the coordinator, and not following the job: refused, the sender writes to etcd
  // instead. (A node that follows the job forwards a report to its coordinator:
  // report_tree_test.cc.)
  StepCompletionReport unfollowed = report({});
  unfollowed.job = "nosuchjob";
  CHECK(client.ReportStepCompletion(c.nodes[third]->address, unfollowed).code() ==
        StatusCode::kProtocol);
  // A rank of another job, outside the layout, too many ranks, a negative step.
  Status s = client.ReportStepCompletion(at_leader, report({{"other", 0, 0, 1}}));
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("other"));
  CHECK(client.ReportStepCompletion(at_leader, report({Rank(5, 1)})).code() ==
        StatusCode::kInvalidArgument);
  CHECK(client.ReportStepCompletion(at_leader, report(std::vector<store::RankKey>(9, Rank(0, 1))))
            .code() == StatusCode::kInvalidArgument);
  CHECK(client.ReportStepCompletion(at_leader, report({Rank(0, 1)}, -1)).code() ==
        StatusCode::kInvalidArgument);
  // A job the coordinator does not coordinate.
  StepCompletionReport unknown = report({});
  unknown.job = "nosuchjob";
  CHECK(client.ReportStepCompletion(at_leader, unknown).code() == StatusCode::kProtocol);
  // Nothing was lost: the job commits as before.
  c.CommitAll(1);
}

TEST_CASE("etcd coordination: two concurrent fallbacks start exactly one generation", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  for (int64_t step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < 4; ++i) c.Complete(i, step);
  }
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 3, 5s));
  std::atomic<bool> go{false};
  auto start = [&](int n, int64_t base) {
    while (!go) std::this_thread::yield();
    return c.co(n)->StartGeneration(
        "job", GenerationStart{0, 3, base, 3, "test " + std::to_string(n)});
  };
  auto a = std::async(std::launch::async, start, 1, 1);
  auto b = std::async(std::launch::async, start, 2, 2);
  go = true;
  const JobGeneration ga = a.get(), gb = b.get();
  CHECK(ga.generation == 1);
  CHECK(gb.generation == 1);
  REQUIRE(ga.base_step == gb.base_step);  // one of the two bases won, both nodes see it
  const int64_t base = *ga.base_step;
  // Every node rolls back: commit point = base, slots newer than the base dropped.
  for (int n = 0; n < 3; ++n) {
    REQUIRE(reft::testing::Eventually([&] { return c.co(n)->Generation("job").generation == 1; }, 5s));
    CHECK(c.co(n)->NewestCommitted("job") == base);
  }
  for (auto& [n, r] : c.placement) CHECK_FALSE(c.nodes[n]->store->Get(r, 3).ok());
  // The decision {1, base, tier} was recorded with the generation.
  auto d = c.co(0)->Decision("job");
  REQUIRE(d.ok());
  REQUIRE(d->has_value());
  CHECK((*d)->generation == 1);
  CHECK((*d)->step == base);
  CHECK((*d)->source == coord::RestoreSource::kTier);
  // A stale caller (still at generation 0) changes nothing.
  CHECK(c.co(0)->StartGeneration("job", GenerationStart{0, 3, 0, 3, "late"}).generation == 1);
  CHECK(c.co(0)->Generation("job").base_step == base);
  // The job goes on in generation 1: steps after the base commit again.
  for (size_t i = 0; i < 4; ++i) c.Complete(i, base + 1);
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", base + 1, 5s));
}

TEST_CASE("etcd coordination: one restore decision wins, every node reads it", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  c.CommitAll(5);
  std::vector<std::future<Result<RestoreDecision>>> proposals;
  for (int n = 0; n < 3; ++n) {
    proposals.push_back(std::async(std::launch::async, [&, n] {
      RestoreDecision d{0, 5, n == 0 ? coord::RestoreSource::kMemory : coord::RestoreSource::kTier, "n" + std::to_string(n), "", 0};
      return c.co(n)->ProposeDecision("job", d, 0);
    }));
  }
  std::set<std::string> winners;
  for (auto& p : proposals) {
    auto r = p.get();
    REQUIRE(r.ok());
    winners.insert(r->decided_by);
  }
  CHECK(winners.size() == 1);
  for (int n = 0; n < 3; ++n) {
    auto d = c.co(n)->Decision("job");
    REQUIRE(d.ok());
    REQUIRE(d->has_value());
    CHECK((*d)->decided_by == *winners.begin());
  }
}

// The planner's triggers: under etcd nodes do not follow each other's registrations, but a
// departure listener hears every node that leaves (its registration deleted), once, and no
// event while nodes come; an arrival listener hears every node that registers, once, and no
// event while nodes leave.
TEST_CASE("etcd membership: departures and arrivals are heard by their own listeners", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  std::mutex mu;
  std::vector<std::string> departed, arrived;
  c.nodes[0]->peer->membership().AddDepartureListener([&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    departed.push_back(id);
  });
  c.nodes[1]->peer->membership().AddArrivalListener([&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    arrived.push_back(id);
  });
  c.nodes[2]->peer->Stop();  // a clean stop revokes its lease: the registration goes at once
  REQUIRE(reft::testing::Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !departed.empty();
  }, 5s));
  TempDir dir("reft-coord");
  TestNode newcomer("n3", dir.path(), {}, 0, 64 << 10, 0, nullptr, EtcdControlPlane(etcd));
  REQUIRE(reft::testing::Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !arrived.empty();
  }, 5s));
  CHECK(c.nodes[0]->peer->membership().Liveness("n3") == NodeLiveness::kAlive);
  std::lock_guard<std::mutex> lock(mu);
  CHECK(departed == std::vector<std::string>{"n2"});
  CHECK(arrived == std::vector<std::string>{"n3"});
}

// What a report that timed out is judged by (late, or at a dead node?): what the node already
// heard — never an etcd read made for the question, which every node of a job would make at
// once when its coordinator is busy. With etcd paused, a read would hang for its timeout.
TEST_CASE("etcd membership: a node heard dead is known without a read, and alive once seen "
          "registered again", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  auto& membership = c.nodes[0]->peer->membership();
  auto& other = c.nodes[1]->peer->membership();
  std::atomic<int> departures{0};
  membership.AddDepartureListener([&](const std::string&) { ++departures; });
  other.AddDepartureListener([&](const std::string&) { ++departures; });
  c.nodes[2]->peer->Stop();  // a clean stop revokes its lease: the departure comes at once
  REQUIRE(reft::testing::Eventually([&] { return departures.load() == 2; }, 5s));

  etcd.Pause(0);
  const auto start = std::chrono::steady_clock::now();
  const bool n2_dead = membership.HeardDead("n2");
  const bool n1_dead = membership.HeardDead("n1");
  const bool stranger_dead = membership.HeardDead("never-registered");
  const auto took = std::chrono::steady_clock::now() - start;
  etcd.Resume(0);
  CHECK(n2_dead);
  CHECK_FALSE(n1_dead);
  CHECK_FALSE(stranger_dead);  // not heard of is not heard dead
  CHECK(took < 200ms);
  CHECK(other.HeardDead("n2"));

  TempDir dir("reft-coord");
  TestNode back("n2", dir.path(), {}, 0, 64 << 10, 0, nullptr, EtcdControlPlane(etcd));
  // A fresh read that finds it registered forgets the departure at once...
  REQUIRE(membership.Liveness("n2") == NodeLiveness::kAlive);
  CHECK_FALSE(membership.HeardDead("n2"));
  // ...and so does a lookup (the cached record expires within seconds).
  CHECK(reft::testing::Eventually([&] {
    (void)other.Find("n2");
    return !other.HeardDead("n2");
  }, 5s));
}

// The planner's published decision (docs/planner.md "The online path"): one per job, replaced
// only by a compare-and-swap on its version, and only within the generation it was decided in
// — the two-planners case after a partition heals: the one that missed a fallback publishes
// nothing over the newer generation.
TEST_CASE("etcd coordination: a published plan is replaced only by CAS and only in its generation",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  const int leader = Leader(c);
  const int other_node = (leader + 1) % 3;
  c.CommitAll(3);
  auto none = c.co(other_node)->PublishedPlanOf("job");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  PublishedPlan plan = ReconfigurePlan(leader, 3, "n3", "awaiting_confirmation");
  auto first = c.co(leader)->PublishPlan("job", plan, 0, PlanPublisher::kCoordinator);
  REQUIRE(first.ok());
  CHECK(first->version > 0);
  // Only the job's coordinator publishes as the planner.
  auto not_coordinator = c.co(other_node)->PublishPlan("job", plan, first->version, PlanPublisher::kCoordinator);
  CHECK(not_coordinator.status().code() == StatusCode::kBusy);
  CHECK_THAT(not_coordinator.status().message(), Catch::Contains("does not coordinate job 'job'"));
  // An operator confirming through another node who did not see the publication loses and is
  // told what stands.
  PublishedPlan confirmed = plan;
  confirmed.state = "confirmed";
  auto lost = c.co(other_node)->PublishPlan("job", confirmed, 0, PlanPublisher::kOperator);
  REQUIRE(lost.ok());
  CHECK(lost->state == "awaiting_confirmation");
  CHECK(lost->version == first->version);
  auto read = c.co(2)->PublishedPlanOf("job");
  REQUIRE(read.ok());
  REQUIRE(read->has_value());
  CHECK((*read)->planner == plan.planner);
  CHECK((*read)->plan_json == R"({"decision":{"policy":"reconfigure"}})");
  // With the version shown, it replaces it.
  auto second = c.co(other_node)->PublishPlan("job", confirmed, first->version, PlanPublisher::kOperator);
  REQUIRE(second.ok());
  CHECK(second->state == "confirmed");
  CHECK(second->version > first->version);

  // The job falls back to the tier: generation 1. A plan decided in generation 0 (by a planner
  // that decided before it learnt of the fallback) is not published, even with the right
  // version; the transaction compares the generation key too, for a planner whose view lags.
  REQUIRE(c.co(2)->StartGeneration("job", GenerationStart{0, 3, 2, 2, "test"}).generation == 1);
  for (int n = 0; n < 3; ++n) {
    REQUIRE(reft::testing::Eventually([&] { return c.co(n)->Generation("job").generation == 1; }, 5s));
  }
  auto stale = c.co(leader)->PublishPlan("job", plan, second->version, PlanPublisher::kCoordinator);
  CHECK(stale.status().code() == StatusCode::kBusy);
  CHECK_THAT(stale.status().message(), Catch::Contains("generation 1"));
  auto kept = c.co(leader)->PublishedPlanOf("job");
  REQUIRE(kept.ok());
  CHECK((*kept)->version == second->version);
  // In the new generation a plan is published again.
  PublishedPlan fresh = plan;
  fresh.generation = 1;
  fresh.step = 2;
  auto now = c.co(leader)->PublishPlan("job", fresh, second->version, PlanPublisher::kCoordinator);
  REQUIRE(now.ok());
  CHECK(now->generation == 1);
  CHECK(now->planner == plan.planner);
}

// A fall-back decided on committed step 3 (memory could not rebuild it) while reftd sealed the
// killed trainers' last snapshots: step 4 commits during the tier scan. Starting the new
// generation then would overwrite that commit and put the persist floor below it; it must
// start nothing, and the restore decides again on step 4.
TEST_CASE("etcd coordination: a step committed during a fall-back's tier scan voids the fall-back",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  c.CommitAll(3);
  const std::optional<int64_t> seen = c.co(1)->Generation("job").newest_committed;
  REQUIRE(seen == 3);
  c.CommitAll(4);  // lands while the fall-back scans the tier
  const JobGeneration g = c.co(1)->StartGeneration("job", GenerationStart{0, seen, 2, 3, "memory lost"});
  CHECK(g.generation == 0);
  CHECK(g.newest_committed == 4);
  for (int n = 0; n < 3; ++n) {
    CHECK(c.co(n)->Generation("job").generation == 0);
    CHECK(c.co(n)->NewestCommitted("job") == 4);
  }
  auto d = c.co(0)->Decision("job");
  REQUIRE(d.ok());
  CHECK_FALSE(d->has_value());  // no tier decision was recorded
  // Decided again on what it now sees, the fall-back starts its generation.
  CHECK(c.co(1)->StartGeneration("job", GenerationStart{0, 4, 2, 4, "memory lost"}).generation == 1);
}

// A planner whose term as the job's coordinator ended while it planned (its lease lapsed, and
// another node took the key) must not publish: its decision would stand beside — or over — the
// next coordinator's. Published right after the key moves, before this node's watch tells it,
// the transaction's compare of the coordinator key refuses it; later, its own view does.
TEST_CASE("etcd coordination: a deposed coordinator publishes no plan", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  const int leader = Leader(c);
  c.CommitAll(1);
  PublishedPlan plan = ReconfigurePlan(leader, 1, "n9", "waiting_for_spare");
  auto first = c.co(leader)->PublishPlan("job", plan, 0, PlanPublisher::kCoordinator);
  REQUIRE(first.ok());

  // Another term: the key is deleted and taken by another holder (a new create revision).
  TakeCoordinatorKey(etcd, "job", "n7");

  PublishedPlan decided = plan;
  decided.state = "decided";
  auto deposed = c.co(leader)->PublishPlan("job", decided, first->version, PlanPublisher::kCoordinator);
  CHECK(deposed.status().code() == StatusCode::kBusy);
  REQUIRE(reft::testing::Eventually([&] { return !c.co(leader)->LeadsJob("job"); }, 5s));
  auto again = c.co(leader)->PublishPlan("job", decided, first->version, PlanPublisher::kCoordinator);
  CHECK(again.status().code() == StatusCode::kBusy);
  CHECK_THAT(again.status().message(), Catch::Contains("does not coordinate job 'job'"));
  auto kept = c.co(leader)->PublishedPlanOf("job");
  REQUIRE(kept.ok());
  REQUIRE(kept->has_value());
  CHECK((*kept)->state == "waiting_for_spare");
  CHECK((*kept)->version == first->version);
}

// The race a restart of the whole job runs into: the dead trainers' last snapshots are still
// being sealed (reftd finishes the copy) while the restarted ranks decide to resume from the
// committed step. Those completions must never commit a step of the abandoned timeline.
TEST_CASE("etcd coordination: a restore decision starts an epoch: old completions never commit",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  c.CommitAll(1);
  const int64_t old_epoch = c.co(2)->RestoreEpoch("job");
  for (size_t i = 0; i < 3; ++i) c.Complete(i, 2);  // the old timeline's step 2, three of four

  // The restarted job decides to resume from step 1: a new epoch on every node.
  auto won = c.co(2)->ProposeDecision("job", RestoreDecision{0, 1, coord::RestoreSource::kMemory, "n2", "", 0}, 0);
  REQUIRE(won.ok());
  const int64_t epoch = won->version;
  CHECK(epoch > old_epoch);
  for (int n = 0; n < 3; ++n) {
    REQUIRE(reft::testing::Eventually([&] { return c.co(n)->RestoreEpoch("job") == epoch; }, 5s));
  }
  // The old timeline's sealed step-2 slots are gone; the committed step is untouched.
  CHECK_FALSE(c.nodes[0]->store->Get(Rank(0, 0), 2).ok());
  CHECK(c.nodes[0]->store->NewestCommitted(Rank(0, 0)) == 1);

  // The fourth rank's old-timeline completion is refused, saying why...
  const store::RankKey last = c.placement[3].second;
  WriteSlot(c.nodes[2]->store.get(), last, 2, RandomBytes(4096, 99));
  Status stale = c.co(2)->Complete(last, 2, old_epoch);
  CHECK(stale.code() == StatusCode::kCancelled);
  CHECK_THAT(stale.message(), Catch::Contains("restart the trainer"));
  // ...and in the new epoch it does not combine with the three old ones.
  REQUIRE(c.co(2)->Complete(last, 2, epoch).ok());
  for (int n = 0; n < 3; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 300ms));
  // The resumed ranks redo step 2: it commits.
  for (size_t i = 0; i < 3; ++i) c.Complete(i, 2);
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 5s));

  // A decision made on a commit point that moved meanwhile is refused (the caller re-reads).
  auto late = c.co(1)->ProposeDecision("job", RestoreDecision{0, 1, coord::RestoreSource::kMemory, "n1", "", 0}, epoch);
  CHECK(late.status().code() == StatusCode::kBusy);
  auto d = c.co(1)->Decision("job");
  REQUIRE(d.ok());
  CHECK((*d)->version == epoch);
}

// The hole a reshape under a partition leaves open: a node cut off right after its trainer's
// snapshot of step 2 was sealed under the old layout reports it only after the job restarted in
// another layout — same generation, same restore epoch (no restore decision in between). That
// completion must never fill a rank of the new layout's step 2: the step would be made of slots
// of two layouts. The late node's worker is held (EtcdJobCoordinator::kReportBuilt) with its
// report built, while the job restarts; released once the new layout has completed step 2 on
// every rank but the one the late report names.
TEST_CASE("etcd coordination: a completion made under the old layout never counts after a reshape",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  const int leader = Leader(c);
  c.CommitAll(1);
  // The late node: a node with one rank that does not coordinate (placement 2 is on n1, 3 on n2).
  const size_t late_index = leader == 1 ? 3 : 2;
  const int late = c.placement[late_index].first;
  const store::RankKey old_rank = c.placement[late_index].second;
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  auto old_layout = (*client)->Get(coord::keys::Layout("job"));
  REQUIRE(old_layout.ok());
  REQUIRE(old_layout->has_value());
  const int64_t old_layout_rev = (*old_layout)->mod_revision;

  auto hold = HoldReports(c.co(late));
  c.Complete(late_index, 2);  // sealed under the old layout; its report is built, then held
  REQUIRE(hold->WaitHeld(10s));

  // Cut off, the late node loses its lease: its joined key goes (deleted here, as the lease's
  // expiry would). The job restarts with a third replica: the old trainers exit, the new ones
  // connect. The rank the late report names now runs on the coordinator's node.
  REQUIRE((*client)->Delete(coord::keys::Joined(old_rank)).ok());
  for (auto& [n, r] : c.placement) c.co(n)->Leave(r);
  const JobLayout grown{/*dp=*/3, /*tp=*/2, /*pp=*/1, /*zero=*/0};
  const store::RankKey late_new{"job", 0, old_rank.tp, 2};
  REQUIRE(c.co(late)->Join(late_new, grown).ok());
  std::vector<store::RankKey> at_leader;
  for (int tp = 0; tp < 2; ++tp) {
    for (int dp = 0; dp < 3; ++dp) {
      const store::RankKey r{"job", 0, tp, dp};
      if (r == late_new) continue;
      REQUIRE(c.co(leader)->Join(r, grown).ok());
      at_leader.push_back(r);
    }
  }
  REQUIRE(c.co(leader)->Layout("job") == grown);
  const int64_t epoch = c.co(leader)->RestoreEpoch("job");
  REQUIRE(c.co(late)->RestoreEpoch("job") == epoch);  // no restore decision: the same epoch
  for (const auto& r : at_leader) {
    if (r == old_rank) continue;  // its trainer in the new layout has not completed step 2 yet
    WriteSlot(c.nodes[leader]->store.get(), r, 2, RandomBytes(4096, 40 + 3 * r.tp + r.dp));
    REQUIRE(c.co(leader)->Complete(r, 2, epoch).ok());
  }
  WriteSlot(c.nodes[late]->store.get(), late_new, 2, RandomBytes(4096, 60));
  REQUIRE(c.co(late)->Complete(late_new, 2, epoch).ok());

  // The late report goes now: five of the six ranks completed the new layout's step 2, and it
  // names the sixth.
  const coord::CompletionTraffic before = Traffic(c, late);
  hold->Release();
  REQUIRE(reft::testing::Eventually([&] {
    const coord::CompletionTraffic t = Traffic(c, late);
    return t.reported + t.report_failures > before.reported + before.report_failures;
  }, 10s));
  for (int n = 0; n < 3; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 500ms));

  // The coordinator says why it refuses such a report.
  const StepCompletionReport stale{"job", 3, "", 0, epoch, {old_rank}, old_layout_rev};
  Status refused = c.nodes[late]->peer->client().ReportStepCompletion(c.nodes[leader]->address, stale);
  CHECK(refused.code() == StatusCode::kCancelled);
  CHECK_THAT(refused.message(),
             Catch::Contains("made under layout revision " + std::to_string(old_layout_rev)) &&
                 Catch::Contains("never counts"));

  // The rank's own trainer in the new layout completes step 2: it commits.
  WriteSlot(c.nodes[leader]->store.get(), old_rank, 2, RandomBytes(4096, 70));
  REQUIRE(c.co(leader)->Complete(old_rank, 2, epoch).ok());
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 15s));
}

TEST_CASE("etcd coordination: a rank joining with another layout is refused", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  REQUIRE(reft::testing::Eventually([&] { return c.co(2)->JoinedNode(Rank(0, 0)).has_value(); }, 5s));
  JobLayout other = kLayout;
  other.dp = 3;
  Status s = c.co(2)->Join({"job", 0, 0, 2}, other);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("dp=2"));
}

TEST_CASE("etcd coordination: a job restarts at another scale the moment its trainers left",
          "[coord]") {
  // What a launcher does: the old trainers exit and the new ones, in another layout, connect
  // at once, before their nodes' workers have deleted the old ranks' keys and before other
  // nodes' watches have seen the layout change. Checked from nodes whose caches lag.
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  for (size_t i = 1; i < c.placement.size(); ++i) {
    auto& [n, r] = c.placement[i];
    c.co(n)->Leave(r);
  }
  for (size_t i = 1; i < c.placement.size(); ++i) {
    auto& [n, r] = c.placement[i];
    REQUIRE(reft::testing::Eventually([&] { return !c.co(0)->JoinedNode(r).has_value(); }, 5s));
  }
  JobLayout layouts[2] = {kLayout, kLayout};
  layouts[1].dp = 1;
  for (int round = 1; round <= 20; ++round) {
    const JobLayout& now = layouts[round % 2];
    const JobLayout& before = layouts[(round + 1) % 2];
    c.co(0)->Leave(Rank(0, 0));
    REQUIRE(c.co(0)->Join(Rank(0, 0), now).ok());
    // Another node, its cache possibly still at the old layout: the old layout is refused
    // (the new one was started, with its rank, in one transaction) and the new one accepted.
    JobCoordinator* other = c.co(1 + round % 2);
    if (round % 7 == 0) {  // a refusal waits out EtcdCoordinatorOptions::departed_wait
      Status old = other->Join(Rank(1, 0), before);
      CHECK(old.code() == StatusCode::kInvalidArgument);
      CHECK_THAT(old.message(), Catch::Contains(now.ToString()));
    }
    // The other node's rank joins and leaves; node 0's next restart does not wait for the
    // other node to delete its key: the join waits for it.
    REQUIRE(other->Join(Rank(1, 0), now).ok());
    other->Leave(Rank(1, 0));
  }
  // The rank that is joined stays registered in etcd: no delete of its earlier session's key
  // raced its put.
  REQUIRE(reft::testing::Eventually([&] { return c.co(1)->JoinedNode(Rank(0, 0)) == "n0"; }, 5s));
}

TEST_CASE("etcd coordination: stages that give one replicated name two shapes are refused",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  const JobLayout pp2{/*dp=*/1, /*tp=*/2, /*pp=*/2, /*zero=*/0};
  const store::RankKey first{"tied", 0, 0, 0}, last{"tied", 1, 0, 0}, other_tp{"tied", 1, 1, 0};
  REQUIRE(c.co(0)->Join(first, pp2).ok());
  REQUIRE(c.co(1)->Join(last, pp2).ok());
  REQUIRE(c.co(2)->Join(other_tp, pp2).ok());
  const local::ReplicatedBuffers embed{{"embed", "float32", 4096}, {"norm.0", "float32", 64}};
  REQUIRE(c.co(0)->DeclareReplicated(first, embed).ok());
  // Tied embeddings: the same tensor on the last stage is fine, and a stage's own names too.
  CHECK(c.co(1)->DeclareReplicated(last, {{"embed", "float32", 4096}, {"head", "f", 8}}).ok());
  // Another size, or another dtype, of the same name on another stage: refused, both named.
  Status size = c.co(1)->DeclareReplicated(last, {{"embed", "float32", 2048}});
  CHECK(size.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(size.message(), Catch::Contains("'embed' is 2048 bytes of float32 on stage pp1-tp0") &&
                                 Catch::Contains("4096 bytes of float32 on stage pp0-tp0"));
  Status dtype = c.co(1)->DeclareReplicated(last, {{"embed", "bfloat16", 4096}});
  CHECK(dtype.code() == StatusCode::kInvalidArgument);
  // Another tp rank may hold another slice under the same name.
  CHECK(c.co(2)->DeclareReplicated(other_tp, {{"embed", "float32", 2048}}).ok());
  // Once the first stage's trainer left, its declaration is withdrawn (by its node).
  c.co(0)->Leave(first);
  REQUIRE(reft::testing::Eventually(
      [&] { return c.co(1)->DeclareReplicated(last, {{"embed", "float32", 2048}}).ok(); }, 5s));
}

TEST_CASE("etcd coordination: without etcd snapshots go on, the commit waits, nothing is lost",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  c.CommitAll(1);
  etcd.Kill(0);
  for (size_t i = 0; i < 4; ++i) c.Complete(i, 2);  // sealed locally, queued for etcd
  for (int n = 0; n < 3; ++n) CHECK_FALSE(c.co(n)->WaitCommitted("job", 2, 500ms));
  for (auto& [n, r] : c.placement) {
    CHECK(c.nodes[n]->store->NewestCommitted(r) == 1);
    CHECK(c.nodes[n]->store->Get(r, 2).ok());
  }
  etcd.Restart(0);
  for (int n = 0; n < 3; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 2, 15s));
  for (auto& [n, r] : c.placement) CHECK(c.nodes[n]->store->NewestCommitted(r) == 2);
}

TEST_CASE("etcd coordination: a node writes one completion record per step for all its ranks",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.JoinAll();
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  auto rev = (*client)->Put("/probe", "");
  REQUIRE(rev.ok());
  // One watch over the job's keys sees them in revision order: every completion write of step
  // 1 comes before the commit of step 1.
  std::atomic<int> n0_writes{0};
  std::atomic<bool> committed{false};
  const std::string n0_key = coord::keys::Completion("job", 1, "n0");
  REQUIRE((*client)->Watch(coord::keys::JobPrefix("job"), true, *rev + 1,
                           [&](const coord::WatchUpdate& u) {
                             for (const auto& e : u.events) {
                               if (e.type != coord::WatchEvent::Type::kPut) continue;
                               if (e.kv.key == n0_key) ++n0_writes;
                               if (e.kv.key == coord::keys::Committed("job")) committed = true;
                             }
                           }).ok());
  // Node 0 holds ranks 0 and 1: both slots are written before either completes, so the two
  // completions follow each other well within the linger even on a loaded machine (a rank
  // lagging beyond it is sent again by design).
  for (size_t i = 0; i < 2; ++i) {
    auto& [n, r] = c.placement[i];
    WriteSlot(c.nodes[n]->store.get(), r, 1, RandomBytes(4096, 8 + i));
  }
  for (size_t i = 0; i < 2; ++i) {
    auto& [n, r] = c.placement[i];
    REQUIRE(c.co(n)->Complete(r, 1, c.co(n)->RestoreEpoch(r.job)).ok());
  }
  for (size_t i = 2; i < 4; ++i) c.Complete(i, 1);
  REQUIRE(reft::testing::Eventually([&] { return committed.load(); }, 15s));
  CHECK(n0_writes == 1);
}

TEST_CASE("etcd coordination: while etcd is down a node retries at its interval, never spins",
          "[coord]") {
  EtcdCluster etcd(1);
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  eo.request_timeout = 1000ms;
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  std::shared_ptr<coord::EtcdClient> shared = std::move(*client);
  coord::EtcdControlPlaneOptions o;
  o.lease.floor = std::chrono::seconds(2);
  o.coordinator.retry_interval = 50ms;
  TempDir dir("reft-coord");
  TestNode node("solo", dir.path(), {}, 0, 64 << 10, 0, nullptr,
                coord::MakeEtcdControlPlane(shared, o));
  const JobLayout one{1, 1, 1, 0};
  const store::RankKey rank{"job", 0, 0, 0};
  REQUIRE(node.peer->coordinator()->Join(rank, one).ok());
  WriteSlot(node.store.get(), rank, 1, RandomBytes(4096, 1));
  REQUIRE(node.peer->coordinator()->Complete(rank, 1, node.peer->coordinator()->RestoreEpoch(rank.job)).ok());
  REQUIRE(node.peer->coordinator()->WaitCommitted("job", 1, 5s));
  etcd.Kill(0);
  WriteSlot(node.store.get(), rank, 2, RandomBytes(4096, 2));
  REQUIRE(node.peer->coordinator()->Complete(rank, 2, node.peer->coordinator()->RestoreEpoch(rank.job)).ok());  // queued: etcd is down
  // Over one second of outage (a measurement window, not a wait for an event): every retry
  // round costs a call or two, one round per retry interval (50 ms); a worker spinning on
  // its failures makes thousands of calls.
  const uint64_t before = shared->traffic().failed_calls;
  std::this_thread::sleep_for(1s);
  const uint64_t failed = shared->traffic().failed_calls - before;
  INFO(failed << " failed calls in 1 s");
  CHECK(failed >= 5);
  CHECK(failed <= 80);
  etcd.Restart(0);
  CHECK(node.peer->coordinator()->WaitCommitted("job", 2, 15s));
}
