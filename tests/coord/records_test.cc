// The etcd record codecs: values are written by other reftd (or anyone with etcd access) and
// decoded by every node, so a wrong type or range is Corrupted, never undefined behaviour.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "reft/coord/records.h"

using namespace reft;
using namespace reft::coord;

TEST_CASE("etcd records round-trip", "[coord][records]") {
  CommittedRecord c;
  c.step = 41;
  c.generation = 3;
  c.epoch = 77;
  c.layout_revision = 12;
  auto back = DecodeCommitted("k", Encode(c));
  REQUIRE(back.ok());
  CHECK(back->step == 41);
  CHECK(back->generation == 3);
  CHECK(back->epoch == 77);
  CHECK(back->layout_revision == 12);

  CompletionRecord r;
  r.generation = 2;
  r.epoch = 9;
  r.layout_revision = 31;
  r.ranks = {{"job", 0, 1, 2}};
  auto rb = DecodeCompletion("job", "k", Encode(r));
  REQUIRE(rb.ok());
  CHECK(rb->epoch == 9);
  CHECK(rb->layout_revision == 31);
  REQUIRE(rb->ranks.size() == 1);
  CHECK(rb->ranks[0].dp == 2);
}

TEST_CASE("etcd records: a published plan keeps its document as a JSON object", "[coord][records]") {
  coord::PublishedPlan p;
  p.generation = 2;
  p.step = 17;
  p.basis = "node1,node3";
  p.planner = "node0";
  p.state = "waiting_for_spare";
  p.decided_at_ms = 1764000000000;
  p.wait_until_ms = 1764000030000;
  p.plan_json = R"({"decision":{"policy":"reconfigure"},"job":"j"})";
  const std::string stored = Encode(p);
  CHECK_THAT(stored, Catch::Contains(R"("plan":{"decision")"));  // readable with etcdctl
  auto back = DecodePlan("k", stored);
  REQUIRE(back.ok());
  CHECK(back->generation == 2);
  CHECK(back->step == 17);
  CHECK(back->basis == "node1,node3");
  CHECK(back->planner == "node0");
  CHECK(back->state == "waiting_for_spare");
  CHECK(back->wait_until_ms == 1764000030000);
  CHECK(nlohmann::json::parse(back->plan_json) == nlohmann::json::parse(p.plan_json));
  CHECK(back->transfer_json.empty());  // not started: stored as null

  p.transfer_json = R"({"state":"running","moves":[{"layer":3,"state":"done"}]})";
  auto with_transfer = DecodePlan("k", Encode(p));
  REQUIRE(with_transfer.ok());
  CHECK(nlohmann::json::parse(with_transfer->transfer_json) == nlohmann::json::parse(p.transfer_json));
  CHECK(DecodePlan("k", R"({"generation": 0, "step": 1, "basis": "", "state": "decided", "plan": {},
                            "transfer": [1]})")
            .status()
            .code() == StatusCode::kCorrupted);
  CHECK(DecodePlan("k", R"({"generation": 0, "step": 1, "basis": "", "state": "decided", "plan": "x"})")
            .status()
            .code() == StatusCode::kCorrupted);
  CHECK(DecodePlan("k", R"({"generation": 0.5, "step": 1, "basis": "", "state": "decided", "plan": {}})")
            .status()
            .code() == StatusCode::kCorrupted);
}

TEST_CASE("etcd records refuse floats and out-of-range integers", "[coord][records]") {
  CHECK(DecodeCommitted("k", R"({"step": 1e44})").status().code() == StatusCode::kCorrupted);
  CHECK(DecodeCommitted("k", R"({"step": 4.5})").status().code() == StatusCode::kCorrupted);
  CHECK(DecodeLayout("k", R"({"dp": 4294967298, "tp": 1, "pp": 1})").status().code() ==
        StatusCode::kCorrupted);
  CHECK(DecodeDecision("k", R"({"generation": -1, "step": 3, "source": "memory"})")
            .status()
            .code() == StatusCode::kCorrupted);
  CHECK(DecodeCompletion("job", "k", R"({"ranks": [[0, 0, 1e30]]})").status().code() ==
        StatusCode::kCorrupted);
  CHECK(DecodeCompletion("job", "k", R"({"ranks": [[0, 0, 2147483648]]})").status().code() ==
        StatusCode::kCorrupted);
  // An optional field of the wrong type falls back to its default.
  auto c = DecodeCommitted("k", R"({"step": 5, "generation": 1e99})");
  REQUIRE(c.ok());
  CHECK(c->generation == 0);
}
