// A replacement node whose shared memory fills up while it regenerates a slot from a streamed
// restore (a real tiny tmpfs mounted by the test; needs root or CAP_SYS_ADMIN, else the test
// exits 77 = skipped): the slot's pages are populated as its bytes arrive, so the failure comes
// mid-stream. The trainer still gets every byte; the slot is given up on with a warning and no
// partial slot is left behind.
#include <catch2/catch.hpp>

#include "collecting_sink.h"
#include "recovery_fixture.h"
#include "reft/recovery/reft_load.h"
#include "tiny_tmpfs.h"

using namespace reft;
using namespace reft::recovery;
using namespace reft::recovery::test;
using reft::testing::TinyTmpfs;

TEST_CASE("a replacement whose shared memory fills mid-stream still restores its trainer",
          "[recovery][full]") {
  Cluster c(2);
  c.Converge();
  const JobSpec spec = MakeJob(/*dp=*/2, /*tp=*/1, /*pp=*/1, "arc1", true, /*scale=*/8);
  const RankCoord lost{0, 0, 1};
  uint64_t payload = 0;
  for (const auto& [name, bytes] : SlotRegions(spec, lost, 2)) payload += bytes.size();
  REQUIRE(payload > (1u << 20));  // several pages per region: the tmpfs fills part-way through

  const auto place = RotatedPlacement(spec, 2);
  c.WriteStep(spec, place, 1);
  c.WriteStep(spec, place, 2);
  REQUIRE(place.at(lost.ToString()) == 1);
  c.KillAndWipe(1);
  // Room for the segment's header and tables and half its payload.
  TinyTmpfs fs("size=" + std::to_string(payload / 2));
  const size_t replacement = c.Add("r1", fs.path() + "/shm");
  c.Converge();

  TestNode& n = c.node(replacement);
  ReftLoad load(n.store.get(), n.peer.get(), RecoveryAgreement::Of(n.peer->coordinator()),
                TestOptions());
  RestoreStats stats;
  CollectingSink sink;
  local::RestoreRequest request;
  request.sink = &sink;
  auto st = load.Restore(spec.Meta(lost), &stats, nullptr, request);
  INFO(st.status().ToString());
  REQUIRE(st.ok());
  CHECK(st->streamed);
  CHECK(sink.complete());
  CheckRestored(sink.AsMemfd(*st), spec, lost, 2);  // every byte, bit-exact

  CHECK_THAT(st->detail, !Catch::Contains("slot regenerated"));
  std::string warnings;
  for (const auto& w : stats.warnings) warnings += w + "\n";
  INFO(warnings);
  CHECK_THAT(warnings, Catch::Contains("was not regenerated here"));
  CHECK_THAT(warnings, Catch::Contains("tmpfs full"));
  // Given up on: nothing of the step stays on the replacement (no half-written slot to serve).
  CHECK(n.store->Get(spec.Key(lost), 2).status().code() == StatusCode::kNotFound);
  CHECK_FALSE(n.store->NewestCommitted(spec.Key(lost)).has_value());
}
