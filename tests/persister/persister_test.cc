// The Persister over real nodes: every K-th committed step (one node schedules, the one its
// PlanBoard names; every node writes its own ranks of the same step), on demand for a whole
// job, skips by rule, and a missing directory reported (then picked up once it appears) while
// memory keeps committing.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

#include "reft/persist/persistent_tier.h"
#include "tier_fixture.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::persister;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

std::vector<int64_t> CompleteSteps(const std::string& dir, const JobSpec& spec) {
  auto tier = persist::PersistentTier::Open(TierOptions("reader", dir));
  REQUIRE(tier.ok());
  auto steps = (*tier)->CompleteSteps(spec.job, spec.layout);
  REQUIRE(steps.ok());
  return *steps;
}

// Every rank file of `step` holds the rank's own regions, equal to what the save path wrote.
void CheckPersistedStep(const std::string& dir, const JobSpec& spec, int64_t step) {
  auto tier = persist::PersistentTier::Open(TierOptions("reader", dir));
  REQUIRE(tier.ok());
  for (const auto& rc : spec.Ranks()) {
    INFO(spec.Key(rc).ToString() << " step " << step);
    auto file = (*tier)->OpenRank(spec.Key(rc), step);
    REQUIRE(file.ok());
    auto verified = (*file)->Verify();
    REQUIRE(verified.ok());
    CHECK(verified->bad.empty());
    std::vector<std::string> names;
    for (const auto& r : (*file)->regions()) names.push_back(r.name);
    for (const auto& [name, bytes] : SlotRegions(spec, rc, step)) {
      const bool own = name == "meta" || name == "rep/shard" || name.rfind("unique/", 0) == 0;
      const bool there = std::find(names.begin(), names.end(), name) != names.end();
      INFO("region " << name);
      CHECK(there == own);  // own data only, never the redundancy
      if (!own) continue;
      std::vector<uint8_t> got(bytes.size());
      REQUIRE((*file)->ReadRegion(name, got.data(), got.size()).ok());
      CHECK(std::memcmp(got.data(), bytes.data(), bytes.size()) == 0);
    }
  }
}

// Two converged nodes, a dp=2 arc1 job with one rank on each, and an on-demand persister per
// node writing to `tier_dir` (`subdir` of a fresh temporary directory).
struct TwoNodes {
  explicit TwoNodes(const std::string& subdir = "")
      : tier_dir(subdir.empty() ? root.path() : root.path() + "/" + subdir) {
    c.Converge();
    t0 = std::make_unique<TierNode>(c.node(0), tier_dir);
    t1 = std::make_unique<TierNode>(c.node(1), tier_dir);
  }
  reft::testing::TempDir root{"reft-persister"};
  const std::string tier_dir;
  Cluster c{2};
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  const std::map<std::string, size_t> place = RotatedPlacement(spec, 2);
  std::unique_ptr<TierNode> t0, t1;

  void Commit(int64_t step) { c.WriteStep(spec, place, step); }
};

// A PlanBoard that answers LeadsJob as told, whatever the control plane says.
class FixedLeadership final : public coord::PlanBoard {
 public:
  explicit FixedLeadership(bool leads) : leads_(leads) {}
  bool LeadsJob(const std::string& job) override {
    (void)job;
    return leads_;
  }

 private:
  const bool leads_;
};

// An every-3-steps Persister on `t`'s node whose agreement is the control plane's but for
// `plans`. Never started: `t`'s own persister serves the other nodes.
std::unique_ptr<Persister> PersisterLedBy(TierNode& t, coord::PlanBoard* plans) {
  PersisterAgreement agreement = PersisterAgreement::Of(t.node.peer->coordinator());
  agreement.plans = plans;
  PersisterOptions po;
  po.node_id = t.node.node_id;
  po.every_steps = 3;
  po.peer_timeout = 30s;
  po.sync_timeout = 1s;
  return std::make_unique<Persister>(t.node.store.get(), t.node.peer.get(), agreement, &t.tier, po);
}

}  // namespace

TEST_CASE("every K-th committed step is persisted, the same step on every node", "[persist]") {
  reft::testing::TempDir dir("reft-persister");
  Cluster c(2);
  c.Converge();
  const JobSpec spec = MakeJob(2, 1, 2, "arc1");
  auto place = RotatedPlacement(spec, 2);  // each node holds one rank of each SG
  TierNode t0(c.node(0), dir.path(), /*every_steps=*/3);
  TierNode t1(c.node(1), dir.path(), /*every_steps=*/3);
  std::vector<int64_t> started;
  for (int64_t step = 1; step <= 8; ++step) {
    c.WriteStep(spec, place, step);
    // n1 is not the scheduler (n0 has the smaller id): it never starts a persist itself.
    CHECK(t1.persister->RunScheduleOnce().empty());
    for (const auto& rep : t0.persister->RunScheduleOnce()) {
      INFO("step " << rep.step);
      CHECK(rep.ok());
      REQUIRE(rep.nodes.size() == 2);
      for (const auto& n : rep.nodes) {
        INFO(n.node << ": " << n.status.ToString());
        CHECK(n.status.ok());
        CHECK(n.ranks.size() == 2);  // its own ranks, written by itself
        CHECK(n.bytes > 0);
      }
      started.push_back(rep.step);
    }
  }
  // Nothing in the tier at first: the first commit is persisted, then every 3 steps.
  CHECK(started == std::vector<int64_t>{1, 4, 7});
  CHECK(CompleteSteps(dir.path(), spec) == std::vector<int64_t>{1, 4, 7});
  CheckPersistedStep(dir.path(), spec, 7);

  // The same schedule in the background thread.
  t0.persister.reset();
  TierNode bg(c.node(0), dir.path(), 3, 20ms);
  c.WriteStep(spec, place, 9);
  c.WriteStep(spec, place, 10);
  CHECK(peer::test::Eventually(
      [&] {
        auto steps = CompleteSteps(dir.path(), spec);
        return !steps.empty() && steps.back() == 10;
      },
      10s));
  CheckPersistedStep(dir.path(), spec, 10);
}

TEST_CASE("the every-K schedule runs on the node the PlanBoard it was given names", "[persist]") {
  TwoNodes n;  // by the control plane n0 leads the job (the smaller id), n1 does not
  FixedLeadership leads(true), follows(false);
  auto on_n0 = PersisterLedBy(*n.t0, &follows);
  auto on_n1 = PersisterLedBy(*n.t1, &leads);
  n.Commit(1);
  CHECK(on_n0->RunScheduleOnce().empty());
  const auto reps = on_n1->RunScheduleOnce();
  REQUIRE(reps.size() == 1);
  CHECK(reps[0].step == 1);
  CHECK(reps[0].ok());
  CHECK(reps[0].nodes.size() == 2);  // n1 asked n0 for its rank, as a leader does
  CHECK(CompleteSteps(n.tier_dir, n.spec) == std::vector<int64_t>{1});
}

TEST_CASE("persist on demand: a whole job from one node, idempotent, refused when not committed",
          "[persist]") {
  TwoNodes n;
  const JobSpec& spec = n.spec;
  n.Commit(1);
  n.Commit(2);

  std::vector<std::string> progress;
  auto rep = n.t1->persister->PersistJob(
      spec.job, std::nullopt, [&](int done, int total, const std::string& m) {
        progress.push_back(std::to_string(done) + "/" + std::to_string(total) + " " + m);
      });
  REQUIRE(rep.ok());
  CHECK(rep->ok());
  CHECK(rep->step == 2);
  CHECK(rep->complete);
  CHECK(rep->newest_complete == 2);
  REQUIRE(rep->nodes.size() == 2);
  CHECK(rep->nodes[0].node == "n1");  // the node asked first
  CHECK(rep->nodes[1].node == "n0");
  for (const auto& node : rep->nodes) {
    CHECK(node.status.ok());
    CHECK_FALSE(node.skipped);
    CHECK(node.ranks.size() == 1);
  }
  CHECK(progress.size() == 3);
  CHECK(progress.back().rfind("2/2", 0) == 0);
  CheckPersistedStep(n.tier_dir, spec, 2);

  // Again: the step is complete, nothing is rewritten (a re-persist could mix two runs' files).
  auto again = n.t0->persister->PersistJob(spec.job, 2);
  REQUIRE(again.ok());
  CHECK(again->ok());
  for (const auto& node : again->nodes) {
    CHECK(node.skipped);
    CHECK_THAT(node.skipped_reason, Catch::Contains("not newer than the tier's newest complete"));
  }
  auto older = n.t0->persister->PersistJob(spec.job, 1);
  REQUIRE(older.ok());
  for (const auto& node : older->nodes) CHECK(node.skipped);

  auto future = n.t0->persister->PersistJob(spec.job, 9);
  CHECK(future.status().code() == StatusCode::kInvalidArgument);
  auto unknown = n.t0->persister->PersistJob("no-such-job", std::nullopt);
  CHECK(unknown.status().code() == StatusCode::kNotFound);
}

TEST_CASE("persist of the newest step, beaten by a commit, persists the next step as it commits, "
          "an explicit step is reported as it went",
          "[persist]") {
  TwoNodes n;
  const JobSpec& spec = n.spec;
  n.Commit(1);
  n.Commit(2);

  // The training commits the next step after the persist chose step 2 and before any node
  // pinned its slots (the progress callback runs right before the fan-out): every node finds
  // step 2 freed. The persist then asks every node for step 4, the next to commit, which the
  // training commits while the nodes wait for it.
  int64_t next = 3;
  std::thread training;
  auto training_goes_on = [&](int done, int, const std::string& message) {
    if (done != 0) return;
    if (next == 3) {
      n.Commit(next++);
    } else if (next == 4 && message.find("as it commits") != std::string::npos) {
      training = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        n.Commit(next++);
      });
    }
  };
  auto rep = n.t1->persister->PersistJob(spec.job, std::nullopt, training_goes_on);
  if (training.joinable()) training.join();
  REQUIRE(rep.ok());
  CHECK(rep->ok());
  CHECK(rep->step == 4);
  CHECK(rep->complete);
  REQUIRE_FALSE(rep->warnings.empty());
  CHECK_THAT(rep->warnings.back(),
             Catch::Contains("step 2 was freed by a newer commit") &&
                 Catch::Contains("persisting step 4 as it commits on each node"));
  CheckPersistedStep(n.tier_dir, spec, 4);

  // Asked for exactly step 5, which the next commit frees: reported as it went.
  n.Commit(next++);
  auto commit_6 = [&](int done, int, const std::string&) {
    if (done == 0 && next == 6) n.Commit(next++);
  };
  auto exact = n.t0->persister->PersistJob(spec.job, 5, commit_6);
  REQUIRE(exact.ok());
  CHECK_FALSE(exact->ok());
  CHECK(exact->step == 5);
  for (const auto& node : exact->nodes) {
    INFO(node.node << ": " << node.status.ToString());
    CHECK(node.status.code() == StatusCode::kNotFound);
    CHECK_THAT(node.status.message(), Catch::Contains("freed by the commit of step 6"));
  }
  CHECK(CompleteSteps(n.tier_dir, spec) == std::vector<int64_t>{4});
}

TEST_CASE("persist of the newest step, beaten by the last commit of a training that then stops, "
          "says the next step never committed",
          "[persist]") {
  TwoNodes n;
  n.Commit(1);
  bool committed = false;
  auto last_commit = [&](int done, int, const std::string&) {
    if (done == 0 && !committed) {
      committed = true;
      n.Commit(2);
    }
  };
  auto rep = n.t0->persister->PersistJob(n.spec.job, std::nullopt, last_commit);
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok());
  CHECK(rep->step == 3);
  for (const auto& node : rep->nodes) {
    INFO(node.node << ": " << node.status.ToString());
    CHECK(node.status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(node.status.message(), Catch::Contains("step 3 of job") &&
                                          Catch::Contains("is not committed") &&
                                          Catch::Contains("newest committed: 2"));
  }
  CHECK(CompleteSteps(n.tier_dir, n.spec).empty());
}

TEST_CASE(
    "a missing persist directory is an error reported, memory keeps committing, the "
    "directory is used once it appears",
    "[persist]") {
  TwoNodes n("not-mounted-yet");
  const std::string& dir = n.tier_dir;
  const JobSpec& spec = n.spec;
  n.Commit(1);

  auto rep = n.t0->persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok());
  CHECK_FALSE(rep->complete);
  REQUIRE(rep->nodes.size() == 2);
  for (const auto& node : rep->nodes) {
    INFO(node.node << ": " << node.status.ToString());
    CHECK(node.status.code() == StatusCode::kNotFound);
    CHECK_THAT(node.status.message(), Catch::Contains("does not exist"));
    CHECK(ClassifyPersistFailure(node.status) == PersistFailureKind::kMissingDir);
  }
  auto health = n.t0->tier.Health();
  CHECK(health.enabled);
  CHECK_FALSE(health.healthy);
  CHECK_THAT(health.last_error, Catch::Contains("does not exist"));

  // In memory nothing changed: step 1 is intact and the next steps commit.
  for (size_t i = 0; i < 2; ++i) {
    for (const auto& s : n.c.node(i).store->List(spec.job)) {
      auto v = n.c.node(i).store->Verify(s.rank, s.step);
      REQUIRE(v.ok());
      CHECK(v->bad.empty());
    }
  }
  n.Commit(2);
  auto restored = n.t0->load.Restore(spec.Meta({0, 0, 0}));
  REQUIRE(restored.ok());
  CheckRestored(*restored, spec, {0, 0, 0}, 2);

  // The mount appears: the next persist opens the tier and writes.
  REQUIRE(::mkdir(dir.c_str(), 0750) == 0);
  auto later = n.t1->persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(later.ok());
  CHECK(later->ok());
  CHECK(later->step == 2);
  CHECK(n.t1->tier.Health().healthy);
  CheckPersistedStep(dir, spec, 2);
}

TEST_CASE("persisting the newest step moves to a newer commit only when slots were freed and "
          "nothing else failed",
          "[persist]") {
  auto node = [](const std::string& id, Status st) {
    NodePersist n;
    n.node = id;
    n.status = std::move(st);
    return n;
  };
  const Status freed = Status::NotFound("step 2 of job 'j' was freed by the commit of step 3");
  const Status full = Status::IoError(
      "writing step 2: no space left on device (the in-memory snapshots are unaffected)");
  const Status no_dir = Status::NotFound("persistent directory '/p' does not exist");
  CHECK(StepFreedUnderPersist({node("a", freed), node("b", freed)}));
  CHECK(StepFreedUnderPersist({node("a", Status::OK()), node("b", freed)}));
  // The tier is full on one node while the commit freed the step on another: a newer step
  // would fail for space the same way, so the space error is the answer.
  CHECK_FALSE(StepFreedUnderPersist({node("a", full), node("b", freed)}));
  CHECK_FALSE(StepFreedUnderPersist({node("a", freed), node("b", no_dir)}));
  CHECK_FALSE(StepFreedUnderPersist({node("a", Status::IoError("EIO")), node("b", freed)}));
  CHECK_FALSE(StepFreedUnderPersist({node("a", Status::OK()), node("b", Status::OK())}));
  CHECK_FALSE(StepFreedUnderPersist({}));
}

TEST_CASE("a peer's wait for a step to commit is bounded by the serving node's own", "[persist]") {
  TwoNodes n;
  n.Commit(1);
  // Asked by a peer to wait an hour for a step that never commits: the node answers after its
  // own next_commit_wait (3 s in these tests), with the step not committed.
  const auto start = std::chrono::steady_clock::now();
  auto r = n.c.node(1).peer->client().PersistStep(n.c.node(0).address, n.spec.job, 9,
                                                  std::chrono::seconds(10), std::chrono::hours(1));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(r.ok());
  CHECK(r->code() == v1::ErrorCode::INVALID_ARGUMENT);
  CHECK_THAT(r->message(), Catch::Contains("step 9 of job") && Catch::Contains("not committed"));
  CHECK(took >= std::chrono::milliseconds(2900));
  CHECK(took < std::chrono::seconds(10));
}
