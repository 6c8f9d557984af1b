// reftd's job model for the planner: the step cadence and the model built from a step catalog.
#include <catch2/catch.hpp>

#include "reft/replan/job_model.h"
#include "reft/replan/step_cadence.h"

using reft::replan::StepCadence;
using namespace std::chrono_literals;

TEST_CASE("step cadence: the median time per step between snapshots") {
  StepCadence c;
  const auto t0 = StepCadence::Clock::time_point{} + 1h;
  CHECK(!c.Get("j"));
  c.Note("j", 0, t0);
  CHECK(!c.Get("j"));  // one snapshot: no interval yet
  c.Note("j", 1, t0 + 100ms);
  c.Note("j", 1, t0 + 900ms);   // a second rank of step 1: ignored
  c.Note("j", 3, t0 + 300ms);   // two steps between snapshots: 100 ms per step
  c.Note("j", 4, t0 + 5300ms);  // a pause: one outlier does not move the median
  c.Note("j", 5, t0 + 5400ms);
  c.Note("j", 2, t0 + 6000ms);  // an older step (a restore): ignored
  auto e = c.Get("j");
  REQUIRE(e);
  CHECK(e->samples == 4);
  CHECK(e->step_ms == Approx(100.0));
  CHECK(!c.Get("other"));
  c.Forget("j");
  CHECK(!c.Get("j"));
}

TEST_CASE("step cadence: keeps the last kWindow intervals") {
  StepCadence c;
  auto t = StepCadence::Clock::time_point{} + 1h;
  c.Note("j", 0, t);
  for (int s = 1; s <= 40; ++s) {
    t += s <= 20 ? 500ms : 20ms;  // the job sped up: the old cadence ages out
    c.Note("j", s, t);
  }
  auto e = c.Get("j");
  REQUIRE(e);
  CHECK(e->samples == static_cast<int>(StepCadence::kWindow));
  CHECK(e->step_ms == Approx(20.0));
}

namespace {

reft::protect::BufferSpec Spec(const std::string& name, uint64_t size, int layer,
                               reft::protect::BufferKind kind, uint64_t shard_total = 0) {
  reft::protect::BufferSpec s;
  s.name = name;
  s.size = size;
  s.layer = layer;
  s.kind = kind;
  s.shard_total = shard_total;
  return s;
}

// Step 9 of job "j" saved by dp × pp ranks (tp 1): one group per stage, no buffers yet.
reft::recovery::StepCatalog Catalog(int dp, int pp) {
  reft::recovery::StepCatalog cat;
  cat.job = "j";
  cat.step = 9;
  cat.layout.dp = dp;
  cat.layout.pp = pp;
  cat.layout.tp = 1;
  cat.groups.resize(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) cat.groups[static_cast<size_t>(s)].pp = s;
  return cat;
}

}  // namespace

// A partitioned buffer counts as its flag says: a ZeRO flat is optimizer state, a pure-FSDP
// DCP save's layer buffers are parameters (dcp/L<n>/param.*) or optimizer state (…/optim.*).
TEST_CASE("job model: partitioned buffers count as parameters or optimizer state by their flag") {
  using reft::protect::BufferKind;
  reft::recovery::StepCatalog cat = Catalog(1, 1);
  auto params = Spec("dcp/L0/param.1", 200, 0, BufferKind::kUnique, 400);
  auto state = Spec("dcp/L0/optim.1", 300, 0, BufferKind::kUnique, 600);
  state.optimizer = true;
  cat.buffers[params.name].push_back({0, params});
  cat.buffers[state.name].push_back({0, state});
  auto m = reft::replan::BuildJobModel(
      cat, [](const reft::store::RankKey& r) { return "n" + r.ToString(); }, std::nullopt);
  REQUIRE(m.layers.size() == 1);
  CHECK(m.layers[0].param_bytes == 400);
  CHECK(m.layers[0].optimizer_bytes == 600);
}

TEST_CASE("job model: layers, stages and bytes from the committed step's buffers") {
  using reft::protect::BufferKind;
  reft::recovery::StepCatalog cat = Catalog(2, 2);
  auto add = [&](size_t group, reft::protect::BufferSpec spec) {
    cat.buffers[spec.name].push_back({group, spec});
  };
  add(0, Spec("l0.w", 4000, 0, BufferKind::kReplicated));
  add(0, Spec("l0.b", 10, 0, BufferKind::kReplicated));
  auto zero = Spec("optim.l0", 501, 0, BufferKind::kUnique, 1001);  // sharded: the global size counts
  zero.optimizer = true;
  add(0, zero);
  auto adam = Spec("adam.l0", 300, 0, BufferKind::kReplicated);  // a plain optimizer's state
  adam.optimizer = true;
  add(0, adam);
  add(1, Spec("l1.w", 8000, 1, BufferKind::kReplicated));
  add(1, Spec("l1.rng", 16, 1, BufferKind::kUnique));            // one per dp rank
  add(0, Spec("tied", 64, 1, BufferKind::kReplicated));          // saved by stages 0 and 1
  add(1, Spec("tied", 64, 1, BufferKind::kReplicated));
  add(0, Spec("step_counter", 8, -1, BufferKind::kReplicated));  // no layer: in no layer
  auto m = reft::replan::BuildJobModel(
      cat, [](const reft::store::RankKey& r) { return r.dp == 1 && r.pp == 1 ? std::string() : "n" + r.ToString(); },
      StepCadence::Estimate{42.0, 3});
  CHECK(m.job == "j");
  CHECK(m.step == 9);
  CHECK(m.step_ms == 42.0);
  CHECK(m.step_samples == 3);
  REQUIRE(m.ranks.size() == 4);
  CHECK(m.ranks[3].pp == 1);
  CHECK(m.ranks[3].dp == 1);
  CHECK(m.ranks[3].node.empty());
  CHECK(m.ranks[0].node == "nj/pp0-tp0-dp0");
  REQUIRE(m.layers.size() == 2);
  CHECK(m.layers[0].stage == 0);
  CHECK(m.layers[0].param_bytes == 4010);
  CHECK(m.layers[0].optimizer_bytes == 1001 + 300);
  CHECK(m.layers[1].stage == 1);  // "tied", saved by both stages, does not move the layer
  CHECK(m.layers[1].param_bytes == 8000 + 64);
  CHECK(m.layers[1].optimizer_bytes == 32);
  // Without geometry (no replicated layout known) a rank holds only its partitioned part.
  REQUIRE(m.held.size() == 4);
  CHECK(m.held[0][0] == 501);  // pp0 dp0: part 0 of optim.l0 (a one-member geometry)
}

TEST_CASE("job model: what each rank's slot holds of each layer, shards and copies") {
  using reft::protect::BufferKind;
  reft::recovery::StepCatalog cat = Catalog(2, 1);
  auto add = [&](reft::protect::BufferSpec spec) { cat.buffers[spec.name].push_back({0, spec}); };
  add(Spec("l0.b", 10, 0, BufferKind::kReplicated));
  add(Spec("l0.w", 4000, 0, BufferKind::kReplicated));
  add(Spec("l1.w", 64, 1, BufferKind::kReplicated));
  add(Spec("optim.l0", 501, 0, BufferKind::kUnique, 1001));
  // The replicated bytes end to end by name, cut in two shards at 2048.
  auto& geo = cat.groups[0].geometry;
  geo.m = 2;
  geo.buffers = {{"l0.b", 0, 10}, {"l0.w", 10, 4000}, {"l1.w", 4010, 64}};
  geo.total = 4074;
  geo.shard_begin = {0, 2048, 4074};
  auto lookup = [](const reft::store::RankKey&) { return std::string("n"); };
  // Unprotected: each member holds its shard and its part; together exactly the layer.
  auto m = reft::replan::BuildJobModel(cat, lookup, std::nullopt);
  REQUIRE(m.held.size() == 2);
  CHECK(m.held[0][0] == 10 + 2038 + 501);  // shard 0 = l0.b and the start of l0.w; part 0
  CHECK(m.held[1][0] == 1962 + 500);       // the rest of l0.w; part 1
  CHECK(m.held[0][0] + m.held[1][0] == m.layers[0].bytes());
  CHECK(m.held[0][1] == 0);  // l1.w lies in shard 1 only
  CHECK(m.held[1][1] == 64);
  // ARC(1): member 0 also keeps shard 1, member 1 shard 0, and the ring copies of the parts:
  // both hold every layer whole.
  cat.groups[0].meta.meta.scheme.arc = 1;
  auto arc = reft::replan::BuildJobModel(cat, lookup, std::nullopt);
  CHECK(arc.held[0] == std::vector<uint64_t>{m.layers[0].bytes(), 64});
  CHECK(arc.held[1] == std::vector<uint64_t>{m.layers[0].bytes(), 64});
}
