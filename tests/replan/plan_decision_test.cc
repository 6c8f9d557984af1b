// The planner's decision as a value (plan_decision.h): its one JSON codec writes back, byte for
// byte, every document planner::online::Decide makes for the loop's cases; a document of another
// shape is refused, not thrown; the record and `plan show` edges carry what the loop decided.
#include "reft/replan/plan_decision.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "reft/planner/online.h"

using namespace reft;
using namespace reft::replan;
using nlohmann::json;

namespace {

// Job "j": dp 2 (or `dp`) × pp 2, three layers per stage, rank (d, s) on node n<d*2+s> (as
// job_planner_test's model).
planner::online::JobModelView Model(int dp = 2) {
  planner::online::JobModelView m;
  m.job = "j";
  m.dp = dp;
  m.pp = 2;
  m.step = 7;
  m.step_ms = 200;
  m.step_samples = 5;
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < 2; ++s) m.ranks.push_back({s, 0, d, "n" + std::to_string(d * 2 + s)});
  for (int l = 0; l < 6; ++l) m.layers.push_back({l, l / 3, 1000000u + 1000u * l, 3000000u + 7u * l});
  return m;
}

planner::online::Membership Members(std::vector<std::string> live, std::vector<std::string> lost = {}) {
  return {std::move(live), std::move(lost)};
}

json Decide(const planner::online::JobModelView& m, const planner::online::Membership& members,
            const json& profile = nullptr) {
  auto doc = planner::online::Decide(m, profile, members);
  REQUIRE(doc.ok());
  return *doc;
}

// The documents the loop's cases make: a loss decided each way, one that cannot be decided, no
// loss, and a growth back onto a node that came.
std::vector<json> LoopDocuments() {
  std::vector<json> docs;
  docs.push_back(Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"})));           // reconfigure
  docs.push_back(Decide(Model(), Members({"n0", "n1", "n2", "spare"}, {"n3"})));  // restart_on_spare
  docs.push_back(Decide(Model(), Members({"n0", "n1", "n2", "n3"})));             // no loss
  docs.push_back(Decide(Model(), Members({"n0"}, {"n1", "n2", "n3"})));           // exit
  planner::online::JobModelView unmeasured = Model();
  unmeasured.step_ms = 0;
  unmeasured.step_samples = 0;
  docs.push_back(Decide(unmeasured, Members({"n0", "n1", "n2"}, {"n3"})));  // undecided: policy null
  // Both positions of pipeline 1 lost: the job shrank to one pipeline (f = 0 lets it) ...
  planner::online::JobModelView shrunk = Model();
  shrunk.dp = 1;
  shrunk.ranks.resize(2);
  shrunk.peak_units = 4;  // ... after running on four positions, and n2, n3 came back
  docs.push_back(Decide(shrunk, Members({"n0", "n1", "n2", "n3"})));
  // Three pipelines, the last one lost whole: with too little device memory for a shorter
  // pipeline its micro-batches go to the others (reroute: stages without a node), and with a
  // restart that costs nothing the job restarts in a new plan.
  const json f0 = {{"job", {{"f", 0}}}, {"cluster", {{"device_memory", 16000000}}}};
  docs.push_back(Decide(Model(3), Members({"n0", "n1", "n2", "n3"}, {"n4", "n5"}), f0));
  const json cheap_restart = {{"job", {{"f", 0}}}, {"policy", {{"restart_ms", 0}, {"snapshot_load_ms", 0}}}};
  docs.push_back(Decide(Model(3), Members({"n0", "n1", "n2", "n3"}, {"n4", "n5"}), cheap_restart));
  return docs;
}

}  // namespace

TEST_CASE("plan decision: the codec writes back every document of the loop byte for byte", "[plan_decision]") {
  std::set<std::string> policies;
  for (const json& doc : LoopDocuments()) {
    auto typed = PlanDocumentFromJson(doc);
    REQUIRE(typed.ok());
    CHECK(ToJson(*typed).dump() == doc.dump());
    policies.insert(typed->decision.policy ? PlanPolicyName(*typed->decision.policy) : "null");
  }
  // The cases cover every shape of the decision the loop publishes.
  CHECK(policies == std::set<std::string>{"reconfigure", "restart_on_spare", "none", "exit", "null", "grow",
                                                "reroute", "restart"});
}

TEST_CASE("plan decision: the typed fields are the document's", "[plan_decision]") {
  auto doc = PlanDocumentFromJson(Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"})));
  REQUIRE(doc.ok());
  CHECK(doc->job == "j");
  CHECK(doc->step == 7);
  CHECK(doc->lost_nodes == std::vector<std::string>{"n3"});
  CHECK(doc->ranks.size() == 4);
  CHECK(!doc->ranks[3].alive);
  CHECK(doc->peak_units == 4);
  CHECK(doc->decision.needed);
  CHECK(doc->decision.policy == PlanPolicy::kReconfigure);
  REQUIRE(doc->decision.transfer);
  CHECK(!doc->decision.transfer->hosts.empty());
  REQUIRE(doc->decision.new_layout);
  CHECK(!doc->decision.new_layout->pipelines.empty());
  CHECK(!doc->Grows());
}

TEST_CASE("plan decision: a document of another shape is refused as corrupted", "[plan_decision]") {
  const json good = Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"}));
  json missing = good;
  missing.erase("decision");
  json wrong_type = good;
  wrong_type["step"] = "seven";
  json unknown_policy = good;
  unknown_policy["decision"]["policy"] = "teleport";
  json bad_rank = good;
  bad_rank["ranks"][0]["state"] = "sleeping";
  for (const json& bad : {missing, wrong_type, unknown_policy, bad_rank, json(nullptr), json::array()}) {
    auto typed = PlanDocumentFromJson(bad);
    CHECK(typed.status().code() == StatusCode::kCorrupted);
  }
}

// The loop adds the spare wait to a loss it publishes (job_planner.cc ChooseState); Decide never
// writes it, and a document without it reads back without it.
TEST_CASE("plan decision: the loop's spare wait is written and read back", "[plan_decision]") {
  json with_wait = Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"}));
  CHECK(!with_wait["decision"].contains("spare_wait"));
  auto plain = PlanDocumentFromJson(with_wait);
  REQUIRE(plain.ok());
  CHECK(!plain->decision.spare_wait);
  with_wait["decision"]["spare_wait"] = {{"waited_ms", 30001}, {"reason", "no spare came in the 30 s wait"}};
  auto typed = PlanDocumentFromJson(with_wait);
  REQUIRE(typed.ok());
  REQUIRE(typed->decision.spare_wait);
  CHECK(typed->decision.spare_wait->waited_ms == 30001);
  CHECK(typed->decision.spare_wait->reason == "no spare came in the 30 s wait");
  CHECK(ToJson(*typed).dump() == with_wait.dump());
  json no_reason = with_wait;
  no_reason["decision"]["spare_wait"].erase("reason");
  CHECK(PlanDocumentFromJson(no_reason).status().code() == StatusCode::kCorrupted);
}

TEST_CASE("plan decision: the record carries the state, the basis, the wait and the document", "[plan_decision]") {
  PlanDecision d;
  d.state = PlanState::kWaitingForSpare;
  d.generation = 3;
  d.step = 7;
  d.basis = "n3";
  d.wait_until_ms = 1234;
  auto doc = PlanDocumentFromJson(Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"})));
  REQUIRE(doc.ok());
  d.plan = *doc;
  const coord::PublishedPlan r = ToRecord(d, "n0", 99);
  CHECK(r.state == "waiting_for_spare");
  CHECK(r.generation == 3);
  CHECK(r.step == 7);
  CHECK(r.basis == "n3");
  CHECK(r.planner == "n0");
  CHECK(r.decided_at_ms == 99);
  CHECK(r.wait_until_ms == 1234);
  auto back = DocumentOf(r);
  REQUIRE(back);
  CHECK(ToJson(*back) == ToJson(*doc));

  coord::PublishedPlan empty = r;
  empty.plan_json = "";
  CHECK(!DocumentOf(empty));
  empty.plan_json = R"({"decision":{"policy":"reconfigure"}})";  // not a whole document
  CHECK(!DocumentOf(empty));

  for (PlanState s : {PlanState::kWaitingForSpare, PlanState::kAwaitingConfirmation, PlanState::kDecided,
                      PlanState::kConfirmed, PlanState::kUndecided, PlanState::kNoLoss})
    CHECK(ParsePlanState(PlanStateName(s)) == s);
  CHECK(!ParsePlanState("maybe"));
}

TEST_CASE("plan decision: plan show adds the publication, the mode and the answering node", "[plan_decision]") {
  auto doc = PlanDocumentFromJson(Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"})));
  REQUIRE(doc.ok());
  PlanShow show;
  show.plan = *doc;
  show.mode = PlannerMode::kConfirm;
  show.node = "n1";
  json j = ToJson(show);
  CHECK(j["publication"].is_null());
  CHECK(j["planner_mode"] == "confirm");
  CHECK(j["node"] == "n1");
  CHECK(j["decision"] == ToJson(*doc)["decision"]);

  coord::PublishedPlan p;
  p.state = "decided";
  p.generation = 2;
  p.step = 7;
  p.basis = "n3";
  p.planner = "n0";
  p.decided_at_ms = 5;
  p.version = 11;
  show.publication = p;
  show.current = true;
  j = ToJson(show);
  CHECK(j["publication"] == json{{"state", "decided"}, {"generation", 2}, {"step", 7}, {"basis", "n3"},
                                 {"planner", "n0"}, {"decided_at_ms", 5}, {"version", 11}, {"current", true},
                                 {"wait_until_ms", nullptr}, {"transfer", nullptr}});
}

TEST_CASE("plan decision: a loss's phases round-trip, and a record without them reads as none", "[plan_decision]") {
  const json old = Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"}));
  CHECK(!old.contains("phases"));
  auto plain = PlanDocumentFromJson(old);
  REQUIRE(plain.ok());
  CHECK(!plain->phases);  // published before decisions carried phases
  CHECK(ToJson(*plain).dump() == old.dump());

  PlanDecision d;
  d.state = PlanState::kDecided;
  d.generation = 1;
  d.step = 7;
  d.basis = "n3";
  d.plan = *plain;
  d.plan.phases = RecoveryPhases{};
  d.plan.phases->lost_at = PhaseMark{1000, "n0"};
  d.plan.phases->declared_at = PhaseMark{6000, "n0"};
  coord::PublishedPlan r = ToRecord(d, "n0", 6010);
  auto back = DocumentOf(r);
  REQUIRE(back);
  REQUIRE(back->phases);
  CHECK(back->phases->lost_at->at_ms == 1000);
  CHECK(back->phases->declared_at->node == "n0");
  CHECK(!back->phases->decided_at);
  CHECK(ToJson(*back).dump() == ToJson(d.plan).dump());
  CHECK(json::parse(r.plan_json)["phases"]["staged_at"].is_null());

  // The record adds its publication and, once the transfer is done, its end.
  auto phases = JobPhasesOf(r);
  REQUIRE(phases);
  CHECK(phases->lost_at->at_ms == 1000);
  CHECK(phases->declared_at->at_ms == 6000);
  REQUIRE(phases->decided_at);
  CHECK(phases->decided_at->at_ms == 6010);
  CHECK(phases->decided_at->node == "n0");
  CHECK(!phases->staged_at);
  r.transfer_json = json{{"state", "done"}, {"finished_at_ms", 6500}}.dump();
  phases = JobPhasesOf(r);
  REQUIRE(phases->staged_at);
  CHECK(phases->staged_at->at_ms == 6500);
  r.state = "waiting_for_spare";  // not decided yet: lost and declared only
  phases = JobPhasesOf(r);
  REQUIRE(phases);
  CHECK(!phases->decided_at);
  CHECK(!phases->staged_at);
  r.state = "decided";
  r.plan_json = old.dump();  // an old record: no phases
  CHECK(!JobPhasesOf(r));

  // Every key is written, null where a phase did not happen; a mark of another shape is refused.
  const json written = ToJson(RecoveryPhases{});
  CHECK(written.size() == 7);
  for (const auto& [key, value] : written.items()) CHECK(value.is_null());
  auto read = RecoveryPhasesFromJson(json{{"reconnected_at", {{"at_ms", 5}, {"node", "s"}}}});
  REQUIRE(read.ok());
  CHECK(read->reconnected_at->at_ms == 5);
  CHECK(!read->restore_ended_at);
  CHECK(RecoveryPhasesFromJson(json{{"lost_at", {{"at_ms", "soon"}}}}).status().code() == StatusCode::kCorrupted);
  json bad = old;
  bad["phases"] = {{"lost_at", 3}};
  CHECK(PlanDocumentFromJson(bad).status().code() == StatusCode::kCorrupted);
}

TEST_CASE("plan decision: plan show's last recovery", "[plan_decision]") {
  auto doc = PlanDocumentFromJson(Decide(Model(), Members({"n0", "n1", "n2"}, {"n3"})));
  REQUIRE(doc.ok());
  PlanShow show;
  show.plan = *doc;
  CHECK(ToJson(show)["last_recovery"].is_null());
  LastRecovery recovery;
  recovery.phases.declared_at = PhaseMark{6000, "n0"};
  show.last_recovery = recovery;
  json j = ToJson(show)["last_recovery"];
  CHECK(j["phases"]["declared_at"] == json{{"at_ms", 6000}, {"node", "n0"}});
  CHECK(j["first_commit_step"].is_null());
  CHECK(j["first_commit_at"].is_null());
  show.last_recovery->first_commit_step = 8;
  show.last_recovery->first_commit_at = PhaseMark{7000, "n1"};
  j = ToJson(show)["last_recovery"];
  CHECK(j["first_commit_step"] == 8);
  CHECK(j["first_commit_at"] == json{{"at_ms", 7000}, {"node", "n1"}});
}
