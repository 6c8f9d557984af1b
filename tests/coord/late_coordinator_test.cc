// A coordinator too busy to answer reports in time (docs/coordination.md "A slow coordinator is
// waited for"): three in-process nodes (real stores, real gRPC, real etcd), the coordinator's
// report handling stalled at a test point. Its reporters send again after a pause instead of
// writing their completions to etcd — the fall-back that, with every node of a large job
// timing out at once, turned an overloaded coordinator into an overloaded etcd — and only a
// coordinator late for longer than report_patience is bypassed through etcd.

#include <catch2/catch.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "etcd_fixture.h"
#include "keys.h"
#include "peer_fixture.h"
#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_control_plane.h"
#include "reft/test_point.h"

using namespace reft;
using namespace reft::peer;
using namespace reft::coord;
using namespace reft::peer::test;
using namespace reft::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kNodes = 3;
const JobLayout kLayout{/*dp=*/kNodes, /*tp=*/1, /*pp=*/1, /*zero=*/0};
store::RankKey Rank(int n) { return {"job", 0, 0, n}; }

peer::ControlPlaneFactory ImpatientReporters(const EtcdCluster& etcd,
                                             std::chrono::milliseconds patience) {
  return EtcdControlPlane(etcd, [patience](coord::EtcdControlPlaneOptions& o) {
    o.coordinator.report_timeout = 300ms;
    o.coordinator.report_retry = 200ms;
    o.coordinator.report_patience = patience;
  });
}

// n0 joins first and leads: it coordinates the job; n1 and n2 report to it.
struct Cluster {
  Cluster(const EtcdCluster& etcd, std::chrono::milliseconds patience) {
    for (int i = 0; i < kNodes; ++i) {
      dirs.push_back(std::make_unique<TempDir>("reft-late"));
      nodes.push_back(std::make_unique<TestNode>("n" + std::to_string(i), dirs[i]->path(),
                                                 std::vector<std::string>{}, 0, 64 << 10, 0,
                                                 nullptr, ImpatientReporters(etcd, patience)));
    }
    REQUIRE(co(0)->Join(Rank(0), kLayout).ok());
    REQUIRE(reft::testing::Eventually([&] { return co(0)->LeadsJob("job"); }, 20s));
    for (int i = 1; i < kNodes; ++i) REQUIRE(co(i)->Join(Rank(i), kLayout).ok());
  }
  EtcdJobCoordinator* co(int n) {
    auto* c = dynamic_cast<EtcdJobCoordinator*>(nodes[n]->peer->coordinator());
    REQUIRE(c != nullptr);
    return c;
  }
  CompletionTraffic Traffic(int n) { return co(n)->completion_traffic(); }
  void CompleteAll(int64_t step) {
    for (int n = 0; n < kNodes; ++n) {
      WriteSlot(nodes[n]->store.get(), Rank(n), step, RandomBytes(4096, 11 + step + n));
      REQUIRE(co(n)->Complete(Rank(n), step, co(n)->RestoreEpoch("job")).ok());
    }
  }
  void WaitCommittedEverywhere(int64_t step) {
    for (int n = 0; n < kNodes; ++n) REQUIRE(co(n)->WaitCommitted("job", step, 30s));
  }
  // Steps commit until both reporters had a report answered by the coordinator (a node that
  // had not seen the coordinator key yet writes to etcd instead); the next step is returned.
  int64_t WarmUp() {
    int64_t step = 1;
    for (;; ++step) {
      CompleteAll(step);
      WaitCommittedEverywhere(step);
      const bool answered = reft::testing::Eventually(
          [&] { return Traffic(1).reported >= 1 && Traffic(2).reported >= 1; }, 2s);
      if (answered) return step + 1;
      REQUIRE(step < 5);
    }
  }
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
};

// Stalls every report arriving at `coordinator` until Resume (or the end of the scope). The
// state is shared with the stalled gRPC threads, which may still be leaving the hook when
// this object is gone.
class StalledCoordinator {
 public:
  explicit StalledCoordinator(const void* coordinator)
      : state_(std::make_shared<State>()),
        hook_([state = state_, coordinator](const test_point::Arrival& a) {
          if (a.point != EtcdJobCoordinator::kReportArrived || a.who != coordinator) return;
          std::unique_lock<std::mutex> lock(state->mu);
          ++state->stalled;
          state->cv.wait(lock, [&] { return !state->stalling; });
        }) {}
  ~StalledCoordinator() { Resume(); }
  void Resume() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stalling = false;
    }
    state_->cv.notify_all();
  }
  int stalled() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->stalled;
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    bool stalling = true;
    int stalled = 0;
  };
  std::shared_ptr<State> state_;
  test_point::ScopedHook hook_;
};

}  // namespace

TEST_CASE("late coordinator: reports that time out are sent to it again, not written to etcd",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd, /*patience=*/30s);
  const int64_t step = c.WarmUp();
  const CompletionTraffic before[] = {c.Traffic(0), c.Traffic(1), c.Traffic(2)};
  {
    StalledCoordinator stall(c.co(0));
    c.CompleteAll(step);
    // Both reporters timed out at least twice: the first report and one sent again after the
    // pause, each held at the coordinator.
    REQUIRE(reft::testing::Eventually([&] {
      return c.Traffic(1).reports_late >= before[1].reports_late + 2 &&
             c.Traffic(2).reports_late >= before[2].reports_late + 2;
    }, 20s));
    CHECK(stall.stalled() >= 4);
    CHECK_FALSE(c.co(1)->WaitCommitted("job", step, 0ms));
  }
  // The coordinator catches up: it counts what it held (and what is sent again), and commits.
  c.WaitCommittedEverywhere(step);
  for (int n = 1; n < kNodes; ++n) {
    INFO("node n" << n);
    CHECK(c.Traffic(n).written == before[n].written);  // nothing went through etcd
    CHECK(c.Traffic(n).report_failures >= before[n].report_failures + 2);
  }
  // And the next step goes straight to it, answered in time.
  const CompletionTraffic after[] = {c.Traffic(0), c.Traffic(1), c.Traffic(2)};
  c.CompleteAll(step + 1);
  c.WaitCommittedEverywhere(step + 1);
  for (int n = 1; n < kNodes; ++n) {
    INFO("node n" << n);
    CHECK(reft::testing::Eventually([&] { return c.Traffic(n).reported > after[n].reported; }, 20s));
    CHECK(c.Traffic(n).written == after[n].written);
  }
}

TEST_CASE("late coordinator: late for longer than report_patience, it is bypassed through etcd",
          "[coord]") {
  EtcdCluster etcd(1);
  Cluster c(etcd, /*patience=*/1500ms);
  const int64_t step = c.WarmUp();
  const CompletionTraffic before[] = {c.Traffic(0), c.Traffic(1), c.Traffic(2)};
  StalledCoordinator stall(c.co(0));
  const auto start = std::chrono::steady_clock::now();
  c.CompleteAll(step);
  // The reporters wait out the patience (here two lease TTLs, 4 s, the longer), then write
  // their completions to etcd, where the coordinator (its worker is not the stalled report
  // handler) reads them and commits.
  c.WaitCommittedEverywhere(step);
  CHECK(std::chrono::steady_clock::now() - start >= 1500ms);
  for (int n = 1; n < kNodes; ++n) {
    INFO("node n" << n);
    CHECK(c.Traffic(n).reports_late >= before[n].reports_late + 1);
    CHECK(reft::testing::Eventually([&] { return c.Traffic(n).written > before[n].written; }, 10s));
  }
  stall.Resume();
}
