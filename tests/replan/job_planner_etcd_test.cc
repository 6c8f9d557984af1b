// The planner loop (job_planner.h) on a real EtcdJobCoordinator: the fence of a publication
// by the coordinator's term (docs/planner.md). The loop is stopped at JobPlanner::kPlanDecided
// (decided, not published) while its term ends, and the deposed node's view of the
// coordinator key is held behind (EtcdJobCoordinator::kKeyEvent), so that only etcd's compare
// of the key stands between its decision and the job.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "control_plane_fakes.h"
#include "etcd_fixture.h"
#include "peer_fixture.h"
#include "reft/coord/etcd_client.h"
#include "reft/coord/etcd_job_coordinator.h"
#include "keys.h"
#include "reft/coord/records.h"
#include "reft/replan/job_planner.h"
#include "reft/test_point.h"
#include "test_point_pause.h"

using namespace reft;
using namespace reft::replan;
using namespace std::chrono_literals;
using reft::peer::test::TestNode;
using reft::replan::testing::FakeNodeDirectory;

namespace {

const JobLayout kLayout{/*dp=*/2, /*tp=*/2, /*pp=*/1, /*zero=*/0};

// Three nodes on one etcd; job "job": n0 holds (tp0,dp0) and (tp1,dp0), n1 (tp0,dp1), n2
// (tp1,dp1); step 1 committed.
struct EtcdJob {
  explicit EtcdJob(const reft::testing::EtcdCluster& etcd) {
    for (int i = 0; i < 3; ++i) {
      dirs.push_back(std::make_unique<reft::testing::TempDir>("reft-replan"));
      nodes.push_back(std::make_unique<TestNode>(Name(i), dirs[i]->path(), std::vector<std::string>{}, 0,
                                                 64 << 10, 0, nullptr, reft::testing::EtcdControlPlane(etcd)));
    }
    for (auto& [n, r] : placement) REQUIRE(co(n)->Join(r, kLayout).ok());
    for (size_t i = 0; i < placement.size(); ++i) {
      auto& [n, r] = placement[i];
      peer::test::WriteSlot(nodes[n]->store.get(), r, 1, reft::testing::RandomBytes(4096, 11 + i));
      REQUIRE(co(n)->Complete(r, 1, co(n)->RestoreEpoch("job")).ok());
    }
    for (int n = 0; n < 3; ++n) REQUIRE(co(n)->WaitCommitted("job", 1, 5s));
  }
  static std::string Name(int n) { return "n" + std::to_string(n); }
  coord::JobCoordinator* co(int n) { return nodes[n]->peer->coordinator(); }
  // The node that coordinates the job, once exactly one does.
  int Leader() {
    auto leaders = [&] {
      int l = 0;
      for (int n = 0; n < 3; ++n) l += co(n)->LeadsJob("job");
      return l;
    };
    REQUIRE(reft::testing::Eventually([&] { return leaders() == 1; }, 5s));
    int leader = 0;
    while (!co(leader)->LeadsJob("job")) ++leader;
    return leader;
  }
  // The job's model as its coordinator reads it: one rank per placement entry, 4 layers.
  planner::online::JobModelView Model() const {
    planner::online::JobModelView m;
    m.job = "job";
    m.dp = 2;
    m.tp = 2;
    m.pp = 1;
    m.step = 1;
    m.step_ms = 200;
    m.step_samples = 5;
    for (const auto& [n, r] : placement) m.ranks.push_back({r.pp, r.tp, r.dp, Name(n)});
    for (int l = 0; l < 4; ++l) m.layers.push_back({l, 0, 1000000u + 1000u * l, 3000000u + 7u * l});
    return m;
  }

  std::vector<std::unique_ptr<reft::testing::TempDir>> dirs;
  std::vector<std::unique_ptr<TestNode>> nodes;
  std::vector<std::pair<int, store::RankKey>> placement = {
      {0, {"job", 0, 0, 0}}, {0, {"job", 0, 1, 0}}, {1, {"job", 0, 0, 1}}, {2, {"job", 0, 1, 1}}};
};

coord::PublishedPlan SuccessorPlan() {
  coord::PublishedPlan plan;
  plan.generation = 0;
  plan.step = 1;
  plan.basis = "n9";
  plan.planner = "n7";
  plan.state = "waiting_for_spare";
  plan.plan_json = R"({"decision":{"policy":"reconfigure"}})";
  return plan;
}

}  // namespace

TEST_CASE("planner loop over etcd: a coordinator deposed between its decision and its publication "
          "publishes nothing and the successor's plan stands",
          "[job_planner][etcd]") {
  reft::testing::EtcdCluster etcd(1);
  EtcdJob job(etcd);
  const int leader = job.Leader();
  auto* deposed = dynamic_cast<coord::EtcdJobCoordinator*>(job.co(leader));
  REQUIRE(deposed != nullptr);
  // A node of the job is lost: the coordinator has a decision to publish.
  FakeNodeDirectory nodes(EtcdJob::Name(leader));
  const std::string lost = EtcdJob::Name(leader == 2 ? 1 : 2);
  for (int n = 0; n < 3; ++n) {
    if (n == leader) continue;
    nodes.Set(EtcdJob::Name(n), EtcdJob::Name(n) == lost ? peer::MemberState::kDead : peer::MemberState::kAlive);
  }
  JobPlannerOptions options;
  options.spare_wait = {};
  options.retry = std::chrono::hours(1);
  JobPlanner planner(EtcdJob::Name(leader), options, &nodes, PlannerAgreement::Of(deposed), nullptr,
                     [&job](const std::string&) -> Result<planner::online::JobModelView> { return job.Model(); });
  test_point::Pause decided(JobPlanner::kPlanDecided, "job", &planner);
  planner.Start();
  REQUIRE(decided.WaitHeld(30s));

  // Its term ends while the plan is in its hands: the coordinator key is deleted and taken by
  // another holder (a new create revision). Its own view is held behind the first event.
  test_point::Pause behind(coord::EtcdJobCoordinator::kKeyEvent, "job", deposed);
  TakeCoordinatorKey(etcd, "job", "n7");
  REQUIRE(behind.WaitHeld(30s));
  REQUIRE(deposed->LeadsJob("job"));  // as far as it knows, it still coordinates

  decided.Release();
  planner.Stop();  // returns once the pass that tried to publish is over
  auto none = deposed->PublishedPlanOf("job");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  // The successor publishes its decision; it stands, and the deposed node learns its term ended.
  coord::EtcdOptions eo;
  eo.endpoints = etcd.endpoints();
  auto client = coord::EtcdClient::Create(eo);
  REQUIRE(client.ok());
  REQUIRE((*client)->Put(coord::keys::Plan("job"), coord::Encode(SuccessorPlan())).ok());
  behind.Release();
  REQUIRE(reft::testing::Eventually([&] { return !deposed->LeadsJob("job"); }, 10s));
  auto kept = deposed->PublishedPlanOf("job");
  REQUIRE(kept.ok());
  REQUIRE(kept->has_value());
  CHECK((*kept)->planner == "n7");
  CHECK((*kept)->state == "waiting_for_spare");
}
