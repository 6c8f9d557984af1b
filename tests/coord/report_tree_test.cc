// Completion reports aggregate on the way to the job's coordinator (docs/coordination.md
// "Reports aggregate on the way"): nine in-process nodes (real stores, real gRPC, real etcd),
// the threshold lowered so that they aggregate in groups of three.

#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>

#include "etcd_fixture.h"
#include "keys.h"
#include "peer_fixture.h"
#include "report_forwarder.h"
#include "report_tree.h"
#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/test_point.h"
#include "test_point_pause.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kNodes = 9;
const JobLayout kLayout{/*dp=*/kNodes, /*tp=*/1, /*pp=*/1, /*zero=*/0};
store::RankKey Rank(int n) { return {"job", 0, 0, n}; }
std::string Id(int n) { return "n" + std::to_string(n); }

peer::ControlPlaneFactory AggregatingControlPlane(const EtcdCluster& etcd) {
  return EtcdControlPlane(etcd, [](coord::EtcdControlPlaneOptions& o) {
    o.coordinator.aggregate_from_nodes = 4;  // nine nodes: groups of three
  });
}

// Node i holds rank (tp0, dp i); n0 joins first and leads before the others join, so it
// coordinates the job: its group {n0, n1, n2} reports directly, n3 aggregates {n4, n5} and n6
// aggregates {n7, n8}.
struct Cluster {
  explicit Cluster(const EtcdCluster& etcd) {
    for (int i = 0; i < kNodes; ++i) {
      dirs.push_back(std::make_unique<TempDir>("reft-tree"));
      nodes.push_back(std::make_unique<TestNode>(Id(i), dirs[i]->path(), std::vector<std::string>{},
                                                 0, 64 << 10, 0, nullptr,
                                                 AggregatingControlPlane(etcd)));
    }
    // n0 alone first, until it leads: a node campaigns from its worker thread, so with every
    // node joined at once another one could win the key on a loaded machine.
    REQUIRE(co(0)->Join(Rank(0), kLayout).ok());
    REQUIRE(reft::testing::Eventually([&] { return co(0)->LeadsJob("job"); }, 20s));
    for (int i = 1; i < kNodes; ++i) REQUIRE(co(i)->Join(Rank(i), kLayout).ok());
  }
  void Complete(int n, int64_t step) {
    WriteSlot(nodes[n]->store.get(), Rank(n), step, RandomBytes(4096, 7 + step + n));
    REQUIRE(co(n)->Complete(Rank(n), step, co(n)->RestoreEpoch("job")).ok());
  }
  void CommitAll(int64_t step) {
    for (int n = 0; n < kNodes; ++n) Complete(n, step);
    for (int n = 0; n < kNodes; ++n) REQUIRE(co(n)->WaitCommitted("job", step, 20s));
  }
  EtcdJobCoordinator* co(int n) {
    auto* c = dynamic_cast<EtcdJobCoordinator*>(nodes[n]->peer->coordinator());
    REQUIRE(c != nullptr);
    return c;
  }
  CompletionTraffic Traffic(int n) { return co(n)->completion_traffic(); }
  // Until every node's reports of the steps so far were answered (a reporter counts its report
  // when the answer arrives, which can be after the commit is visible).
  void WaitAnswered(const std::vector<uint64_t>& reported_before, uint64_t steps) {
    REQUIRE(reft::testing::Eventually([&] {
      for (int n = 1; n < kNodes; ++n) {
        if (Traffic(n).reported - reported_before[n] < steps) return false;
      }
      return true;
    }, 20s));
  }
  // Steps 1 and 2: every node learned the coordinator's address and, from its answer to a
  // direct report, its aggregator.
  void WarmUp() {
    CommitAll(1);
    CommitAll(2);
    // Both steps' reports were answered (or written to etcd: a node that had not seen the
    // coordinator key yet), so what is counted next is new.
    REQUIRE(reft::testing::Eventually([&] {
      for (int n = 1; n < kNodes; ++n) {
        if (Traffic(n).reported + Traffic(n).written < 2) return false;
      }
      return true;
    }, 20s));
  }
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
};

const std::set<int> kMembers = {4, 5, 7, 8};  // report through an aggregator
const std::set<int> kAggregators = {3, 6};

StepCompletionReport ReportOf(Cluster& c, int node, int64_t step, std::vector<store::RankKey> ranks) {
  StepCompletionReport r;
  r.job = "job";
  r.step = step;
  r.node = Id(node);
  r.node_epoch = c.nodes[node]->peer->membership().SelfCaller().epoch();
  r.generation = c.co(node)->Generation("job").generation;
  r.epoch = c.co(node)->RestoreEpoch("job");
  r.ranks = std::move(ranks);
  return r;
}

int64_t LayoutRevision(const EtcdCluster& etcd) {
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  auto layout = (*client)->Get(coord::keys::Layout("job"));
  REQUIRE(layout.ok());
  REQUIRE(layout->has_value());
  return (*layout)->mod_revision;
}

}  // namespace

TEST_CASE("report tree: groups of ceil(sqrt(n)) by id, the lowest joined node aggregates",
          "[coord]") {
  std::set<std::string> nodes;
  for (int i = 0; i < kNodes; ++i) nodes.insert(Id(i));
  auto joined = nodes;
  auto a = AssignAggregators(nodes, joined, "n0", 4);
  CHECK(a == std::map<std::string, std::string>{
                 {"n4", "n3"}, {"n5", "n3"}, {"n7", "n6"}, {"n8", "n6"}});
  // n3 is not joined now: n4 aggregates its group (n3's slots are still recorded there).
  joined.erase("n3");
  a = AssignAggregators(nodes, joined, "n0", 4);
  CHECK(a.at("n3") == "n4");
  CHECK(a.at("n5") == "n4");
  CHECK(a.count("n4") == 0);
  // The coordinator's group reports directly; below the threshold nobody aggregates.
  CHECK(AssignAggregators(nodes, nodes, "n4", 4).count("n5") == 0);
  CHECK(AssignAggregators(nodes, nodes, "n0", 10).empty());
  CHECK(AssignAggregators(nodes, nodes, "n0", 0).empty());
}

TEST_CASE("report tree: reports arriving while a batch is in flight go together in the next",
          "[coord]") {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<size_t> batches;
  ReportForwarder forwarder([&](const std::string&, const std::vector<StepCompletionReport>& b)
                                -> Result<std::vector<Status>> {
    std::unique_lock<std::mutex> lock(mu);
    batches.push_back(b.size());
    cv.wait(lock, [&] { return release; });  // the first batch waits for the coordinator
    std::vector<Status> answers;
    for (const auto& r : b) {
      answers.push_back(r.node == "refused" ? Status::PermissionDenied("not tied") : Status::OK());
    }
    return answers;
  });
  auto report = [](const std::string& node) {
    StepCompletionReport r;
    r.job = "job";
    r.step = 1;
    r.node = node;
    return r;
  };
  auto first = std::async(std::launch::async, [&] { return forwarder.Forward("c", report("a")); });
  REQUIRE(reft::testing::Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return batches.size() == 1;
  }, 10s));
  std::vector<std::future<Status>> rest;
  for (const char* node : {"b", "refused", "d"}) {
    rest.push_back(std::async(std::launch::async, [&, node] { return forwarder.Forward("c", report(node)); }));
  }
  REQUIRE(reft::testing::Eventually([&] { return forwarder.queued("c") == 3; }, 10s));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  CHECK(first.get().ok());
  CHECK(rest[0].get().ok());
  CHECK(rest[1].get().code() == StatusCode::kPermissionDenied);  // its own answer, alone
  CHECK(rest[2].get().ok());
  std::lock_guard<std::mutex> lock(mu);
  CHECK(batches == std::vector<size_t>{1, 3});
}

TEST_CASE("report tree: steps commit with O(sqrt n) messages at the coordinator, each node "
          "counted once",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.WarmUp();
  std::vector<CompletionTraffic> before;
  std::vector<uint64_t> reported_before;
  for (int n = 0; n < kNodes; ++n) {
    before.push_back(c.Traffic(n));
    reported_before.push_back(before[n].reported);
  }
  constexpr int64_t kSteps = 4;
  for (int64_t step = 3; step < 3 + kSteps; ++step) c.CommitAll(step);
  c.WaitAnswered(reported_before, kSteps);
  const auto coordinator = c.Traffic(0);
  const uint64_t messages = coordinator.messages - before[0].messages;
  const uint64_t received = coordinator.received - before[0].received;
  INFO("coordinator: " << messages << " messages carrying " << received << " reports in "
                       << kSteps << " steps");
  // Every other node's report of every step, once (one rank per node: one report a step).
  CHECK(received == (kNodes - 1) * kSteps);
  // Direct: n1, n2 and the aggregators' own reports (4 a step); the members' four reports come
  // in batches: at most one message per report (how many share a batch depends on how close
  // together they arrive: ReportForwarder's test below shows a batch carrying several).
  CHECK(messages <= received);
  for (int n : kMembers) {
    const auto t = c.Traffic(n);
    INFO("member " << Id(n));
    CHECK(t.via_aggregator - before[n].via_aggregator == kSteps);
    CHECK(t.written == before[n].written);
    CHECK(t.report_failures == before[n].report_failures);
  }
  uint64_t forwarded = 0;
  for (int n : kAggregators) forwarded += c.Traffic(n).forwarded - before[n].forwarded;
  CHECK(forwarded == kMembers.size() * kSteps);
  for (int n : {1, 2}) CHECK(c.Traffic(n).via_aggregator == before[n].via_aggregator);
}

TEST_CASE("report tree: an aggregator lost mid-step: its members' reports go another way",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.WarmUp();
  const uint64_t members_via_before = c.Traffic(4).via_aggregator + c.Traffic(5).via_aggregator;
  // n3 holds the batch of its members' step-3 reports right before sending it, then loses its
  // Peer server (its node and lease stay: only the path through it breaks).
  test_point::Pause held(EtcdJobCoordinator::kForwardBatch, "job", c.co(3));
  for (int n = 0; n < kNodes; ++n) c.Complete(n, 3);
  REQUIRE(held.WaitHeld(20s));
  // The shutdown cancels the held call at once, and returns once its handler does.
  auto shutdown = std::async(std::launch::async, [&] {
    c.nodes[3]->server->Shutdown(std::chrono::system_clock::now());
  });
  for (int n = 0; n < kNodes; ++n) {
    if (n != 3) REQUIRE(c.co(n)->WaitCommitted("job", 3, 20s));
  }
  held.Release();
  shutdown.get();
  // The members' step-3 reports did not go through n3; the next step they report directly
  // (n3's server is gone) and the job commits on.
  CHECK(c.Traffic(4).via_aggregator + c.Traffic(5).via_aggregator == members_via_before);
  for (int n = 0; n < kNodes; ++n) c.Complete(n, 4);
  for (int n = 0; n < kNodes; ++n) {
    if (n != 3) REQUIRE(c.co(n)->WaitCommitted("job", 4, 20s));
  }
}

TEST_CASE("report tree: duplicate and late reports count once and change nothing", "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.WarmUp();
  const int64_t layout_rev = LayoutRevision(etcd);
  auto report = [&](int node, int64_t step) {
    auto r = ReportOf(c, node, step, {Rank(node)});
    r.layout_revision = layout_rev;
    return r;
  };
  // Step 3: every node but n8 completes; n4's report also arrives directly and again in a
  // forwarded batch (as if an aggregator's answer had been lost and it reported again).
  for (int n = 0; n < kNodes - 1; ++n) c.Complete(n, 3);
  PeerClient& n4 = c.nodes[4]->peer->client();
  const std::string at_coordinator = c.nodes[0]->address;
  CHECK(n4.ReportStepCompletion(at_coordinator, report(4, 3)).ok());
  auto answers = c.nodes[3]->peer->client().ForwardStepCompletions(
      at_coordinator, {report(4, 3), report(4, 3)}, 10s);
  REQUIRE(answers.ok());
  for (const auto& a : *answers) CHECK(a.ok());
  // n4 counted once: the step still lacks n8's rank.
  CHECK_FALSE(c.co(0)->WaitCommitted("job", 3, 300ms));
  c.Complete(kNodes - 1, 3);
  for (int n = 0; n < kNodes; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 3, 20s));
  // Late copies of the committed step, direct and forwarded: taken, nothing moves.
  CHECK(n4.ReportStepCompletion(at_coordinator, report(4, 2)).ok());
  answers = c.nodes[3]->peer->client().ForwardStepCompletions(at_coordinator,
                                                              {report(5, 3), report(4, 1)}, 10s);
  REQUIRE(answers.ok());
  for (const auto& a : *answers) CHECK(a.ok());
  CHECK(c.co(0)->NewestCommitted("job") == 3);
  c.CommitAll(4);
}

TEST_CASE("report tree: a forwarded report of another node's rank or a fenced epoch is refused "
          "alone",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd);
  c.WarmUp();
  const int64_t layout_rev = LayoutRevision(etcd);
  auto report = [&](int node, int64_t step, std::vector<store::RankKey> ranks) {
    auto r = ReportOf(c, node, step, std::move(ranks));
    r.layout_revision = layout_rev;
    return r;
  };
  auto fenced = report(5, 3, {Rank(5)});
  REQUIRE(fenced.node_epoch > 1);
  fenced.node_epoch -= 1;  // an epoch older than the one n5 is registered under
  auto answers = c.nodes[3]->peer->client().ForwardStepCompletions(
      c.nodes[0]->address, {report(4, 3, {Rank(7)}), fenced, report(4, 3, {Rank(4)})}, 10s);
  REQUIRE(answers.ok());
  REQUIRE(answers->size() == 3);
  CHECK((*answers)[0].code() == StatusCode::kPermissionDenied);  // n7's rank is not n4's
  CHECK_THAT((*answers)[1].message(), Catch::StartsWith("fenced:"));
  CHECK((*answers)[2].ok());
  // Neither refusal counted: without n5's and n7's own reports step 3 waits; with them it
  // commits.
  for (int n = 0; n < kNodes; ++n) {
    if (n != 5 && n != 7) c.Complete(n, 3);
  }
  CHECK_FALSE(c.co(0)->WaitCommitted("job", 3, 300ms));
  c.Complete(5, 3);
  c.Complete(7, 3);
  for (int n = 0; n < kNodes; ++n) REQUIRE(c.co(n)->WaitCommitted("job", 3, 20s));
}
