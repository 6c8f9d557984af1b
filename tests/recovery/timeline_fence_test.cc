// Timeline fences of the restore path, each race opened at its exact point by a named test
// point (reft/test_point.h) rather than by the order of calls: a staging of layers held after
// its fetch while the job falls back to the tier (fence 1), and a fall-back held after its tier
// scan while the job commits a newer step (fence 3). Real stores, PeerNodes and etcd; one
// persist directory shared by the nodes (tier_fixture.h).
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <optional>

#include "etcd_fixture.h"
#include "reft/mutex.h"
#include "reft/recovery/staged_layers.h"
#include "reft/test_point.h"
#include "test_point_pause.h"
#include "reft/thread.h"
#include "tier_fixture.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using namespace std::chrono_literals;

namespace {

// Job "job" (dp 3 × pp 2, aec; its replicated buffers belong to layers 0 and 1) on n0..n3 over
// etcd: step 2 persisted, step 3 committed in memory only. SG pp0
// lies on n0, n1, n2 and SG pp1 on n0, n3, n2, so losing n1 and n2 loses step 3 (beyond aec)
// and a restore falls back to step 2 of the tier.
struct FallBackJob {
  FallBackJob() {
    c.Converge();
    for (auto& b : spec.buffers) {
      if (b.name == "w.layers") b.layer = 0;
      if (b.name == "emb" || b.name == "norm") b.layer = 1;
    }
    for (const auto& rc : spec.Ranks()) {
      static const size_t kPp0[] = {0, 1, 2};
      static const size_t kPp1[] = {0, 3, 2};
      place[rc.ToString()] = rc.pp == 0 ? kPp0[rc.dp] : kPp1[rc.dp];
    }
    for (size_t i = 0; i < c.size(); ++i) t.push_back(std::make_unique<TierNode>(c.node(i), tier.path()));
    c.WriteStep(spec, place, 1);
    c.WriteStep(spec, place, 2);
    auto persisted = t[3]->persister->PersistJob(spec.job, std::nullopt);
    REQUIRE(persisted.ok());
    REQUIRE(persisted->ok());
    REQUIRE(persisted->step == 2);
    c.WriteStep(spec, place, 3);
  }
  // n1 and n2 go, with their slots.
  void LoseTwoNodes() {
    for (size_t i : {size_t{1}, size_t{2}}) {
      t[i].reset();
      c.KillAndWipe(i);
    }
    c.Converge();
  }
  coord::JobCoordinator* co(size_t i) { return c.node(i).peer->coordinator(); }

  reft::testing::EtcdCluster etcd{1};
  reft::testing::TempDir tier{"reft-fence-tier"};
  Cluster c{4, 64 << 10, 0, reft::testing::EtcdControlPlane(etcd)};
  JobSpec spec = MakeJob(/*dp=*/3, /*tp=*/1, /*pp=*/2, "aec");
  std::map<std::string, size_t> place;
  std::vector<std::unique_ptr<TierNode>> t;  // before the nodes go (declared after them)
};

// The generation a node moved `job` to last, told by its generation listener (an event).
class GenerationSeen {
 public:
  void Set(uint64_t g) {
    {
      MutexLock lock(mu_);
      generation_ = g;
    }
    cv_.notify_all();
  }
  bool WaitAtLeast(uint64_t g, std::chrono::seconds timeout) {
    MutexLock lock(mu_);
    return lock.WaitFor(cv_, timeout, [&]() REFT_REQUIRES(mu_) { return generation_ >= g; });
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ REFT_GUARDED_BY(mu_) = 0;
};

// A thread joined when it goes (declare it before the Pause that may hold it: the Pause goes
// first and lets it finish).
struct JoinedThread {
  template <typename Fn>
  explicit JoinedThread(Fn fn) : thread("reft-test-fence", std::move(fn)) {}
  ~JoinedThread() { join(); }
  void join() {
    if (thread.joinable()) thread.join();
  }
  Thread thread;
};

template <typename T>
std::string Outcome(const std::optional<Result<T>>& r) {
  return r ? r->status().ToString() : "still running";
}

}  // namespace

// Fence 1: n3 stages layer 0 of step 3 for a transfer plan; it is held with the bytes fetched
// and verified, not kept yet, while a restore on n0 falls back to step 2 of the tier
// (generation 1). Released, the staging keeps nothing: its bytes are generation 0's step 3,
// which is no state of the new timeline.
TEST_CASE("a staging held after its fetch while the job falls back to the tier keeps nothing",
          "[recovery][persist][etcd][staged]") {
  FallBackJob job;
  StagedLayersOptions so;
  so.expire_in_background = false;
  StagedLayers staged(so);
  ReftLoad& stager = job.t[3]->load;
  stager.SetStagedLayers(&staged);
  // As reftd wires it (daemon/app): a node that moves the job to another generation drops the
  // layers staged for the older ones.
  GenerationSeen seen;
  job.co(3)->AddGenerationListener([&](const std::string& j, const coord::JobGeneration& g, int) {
    staged.DropOtherGenerations(j, g.generation);
    seen.Set(g.generation);
  });
  const coord::TimelineStamp step3_stamp = job.co(3)->Generation(job.spec.job).committed_in;

  std::optional<Result<StageReport>> report;
  std::unique_ptr<JoinedThread> staging;
  test_point::Pause fetched(ReftLoad::kLayersFetched, job.spec.job, &stager);
  staging = std::make_unique<JoinedThread>([&] { report = stager.StageLayers(job.spec.job, 3, {0}); });
  if (!fetched.WaitHeld(60s)) {
    fetched.Release();
    staging->join();
    FAIL("the staging was not held after its fetch: " << Outcome(report));
  }

  job.LoseTwoNodes();
  auto restored = job.t[0]->load.Restore(job.spec.Meta({1, 0, 0}));
  REQUIRE(restored.ok());
  CHECK(restored->step == 2);
  REQUIRE(seen.WaitAtLeast(1, 30s));  // n3 learnt the new generation

  fetched.Release();
  staging->join();
  REQUIRE(report.has_value());
  CHECK(report->status().code() == StatusCode::kBusy);
  CHECK_THAT(report->status().message(), Catch::Contains("nothing kept"));
  CHECK(staged.bytes() == 0);
  CHECK_FALSE(staged.Staged(job.spec.job, step3_stamp, 3, 0).has_value());
}

// Fence 3: a restore on n0 finds step 3 lost, scans the tier and decides to fall back to step 2;
// it is held right before it starts the new generation while the job's surviving trainers
// commit step 4 on n0 and n3. Released, it starts no generation (the commit voids the
// fall-back: starting it would overwrite step 4 and put the persist floor below it) and decides
// again on what it now sees: step 4 from memory.
TEST_CASE("a fall-back held after its tier scan while the job commits a newer step starts no "
          "generation and restores the new step",
          "[recovery][persist][etcd]") {
  FallBackJob job;
  job.LoseTwoNodes();
  ReftLoad& restorer = job.t[0]->load;
  const RankCoord rank{1, 0, 0};

  std::optional<Result<local::RestoredState>> restored;
  std::unique_ptr<JoinedThread> restore;
  test_point::Pause scanned(ReftLoad::kTierScanned, job.spec.job, &restorer);
  restore = std::make_unique<JoinedThread>([&] { restored = restorer.Restore(job.spec.Meta(rank)); });
  if (!scanned.WaitHeld(60s)) {
    scanned.Release();
    restore->join();
    FAIL("the restore was not held after its tier scan: " << Outcome(restored));
  }
  CHECK(job.co(0)->Generation(job.spec.job).generation == 0);

  std::map<std::string, size_t> survivors;
  for (const auto& rc : job.spec.Ranks()) survivors[rc.ToString()] = rc.dp == 1 ? 3 : 0;
  job.c.WriteStep(job.spec, survivors, 4);

  scanned.Release();
  restore->join();
  REQUIRE(restored.has_value());
  REQUIRE(restored->ok());
  CHECK((*restored)->step == 4);
  CheckRestored(**restored, job.spec, rank, 4);
  for (size_t i : {size_t{0}, size_t{3}}) {
    INFO("node n" << i);
    const coord::JobGeneration g = job.co(i)->Generation(job.spec.job);
    CHECK(g.generation == 0);
    CHECK(g.newest_committed == 4);
  }
}

// A restore check chooses the newest committed step (3) and is held before it locates the slots;
// the job commits step 4, which frees step 3's slots on every node. Released, the check does not
// report step 3 lost or unreadable: it checks step 4, which every node holds.
TEST_CASE("a restore check whose step is superseded while it reads checks the newer step",
          "[recovery]") {
  FallBackJob job;
  ReftLoad& checker = job.t[0]->load;
  std::optional<Result<RestoreCheck>> checked;
  std::unique_ptr<JoinedThread> check;
  test_point::Pause chosen(ReftLoad::kCheckStepChosen, job.spec.job, &checker);
  check = std::make_unique<JoinedThread>([&] { checked = checker.CheckRestore(job.spec.job); });
  if (!chosen.WaitHeld(60s)) {
    chosen.Release();
    check->join();
    FAIL("the check was not held after choosing its step: " << Outcome(checked));
  }
  job.c.WriteStep(job.spec, job.place, 4);  // step 3's slots are freed with this commit
  chosen.Release();
  check->join();
  REQUIRE(checked.has_value());
  REQUIRE(checked->ok());
  CHECK((*checked)->step == 4);
  CHECK((*checked)->recoverable);
}
