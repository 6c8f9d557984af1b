// A full persistent directory (a real tiny tmpfs mounted by the test; needs root or
// CAP_SYS_ADMIN, else the test exits 77 = skipped): every node's persist fails with a clear
// error and a metric reason, the in-memory snapshots are untouched and keep committing, and
// restores still come from memory.
#include <catch2/catch.hpp>

#include "tier_fixture.h"
#include "tiny_tmpfs.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::persister;
using namespace reft::recovery::test;
using reft::testing::TinyTmpfs;

TEST_CASE("a full persist directory fails every node's persist, memory is untouched",
          "[persist][full]") {
  TinyTmpfs fs("size=128k");  // a rank's own regions are ~0.4 MiB: nothing fits
  Cluster c(2);
  c.Converge();
  const JobSpec spec = MakeJob(2, 1, 1, "arc1");
  auto place = RotatedPlacement(spec, 2);
  TierNode t0(c.node(0), fs.path()), t1(c.node(1), fs.path());
  std::vector<NodePersist> seen;
  t0.persister->SetObserver([&](const NodePersist& n) { seen.push_back(n); });
  c.WriteStep(spec, place, 1);

  auto rep = t0.persister->PersistJob(spec.job, std::nullopt);
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok());
  CHECK_FALSE(rep->complete);
  REQUIRE(rep->nodes.size() == 2);
  for (const auto& n : rep->nodes) {
    INFO(n.node << ": " << n.status.ToString());
    CHECK(n.status.code() == StatusCode::kIoError);
    CHECK_THAT(n.status.message(), Catch::Contains("no space left on device"));
    CHECK_THAT(n.status.message(), Catch::Contains("in-memory snapshots are unaffected"));
    CHECK(ClassifyPersistFailure(n.status) == PersistFailureKind::kNoSpace);
  }
  REQUIRE(seen.size() == 1);  // this node's own part reached the observer (metrics, logs)
  CHECK(seen[0].status.code() == StatusCode::kIoError);
  CHECK_FALSE(t0.tier.Health().healthy);
  CHECK_THAT(t0.tier.Health().last_error, Catch::Contains("no space left"));

  // Memory: step 1 verifies, steps 2 and 3 commit, a restore reads step 3 from memory.
  for (size_t i = 0; i < 2; ++i) {
    for (const auto& s : c.node(i).store->List(spec.job)) {
      auto v = c.node(i).store->Verify(s.rank, s.step);
      REQUIRE(v.ok());
      CHECK(v->bad.empty());
    }
  }
  c.WriteStep(spec, place, 2);
  c.WriteStep(spec, place, 3);
  auto restored = t1.load.Restore(spec.Meta({0, 0, 1}));
  REQUIRE(restored.ok());
  CheckRestored(*restored, spec, {0, 0, 1}, 3);
}
